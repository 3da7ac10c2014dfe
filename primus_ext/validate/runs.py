"""``measured_throughput.csv`` rows -> (model, execution, system) to project, or a skip reason.

Column layout of ``shared/validation/measured_throughput.csv``: source, source_date, model, seq_len,
precision, gpu, num_gpus, tp, pp, vpp, cp, ep, etp, dp, mbs, gbs, extra_flags,
tokens_per_sec_per_gpu, tflops_per_gpu, mfu, step_time_s, notes.

What a row does not state is filled with the defaults of the framework that produced it, named
here: NVIDIA's Megatron-Bridge / NeMo performance recipes run with the distributed optimizer, DP
grad-reduce / param-gather overlap, TP communication overlap and sequence parallelism when TP > 1
(shared/validation/README: "recipe-wide defaults such as TP comm overlap or the distributed
optimizer are not listed"); torchtitan rows run FSDP2.
Rows that cannot be projected are returned with the reason, never dropped or guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from primus_ext.errors import RecipeError
from primus_ext.hardware import canonical_name, load_gpu
from primus_ext.hardware.power import clock_scale, power_capped
from primus_ext.model.flops import model_flops_per_token
from primus_ext.model.fp4 import fp4_problem
from primus_ext.model.pipeline.registry import resolve_schedule
from primus_ext.model.stages import layout_problems
from primus_ext.recipe.graphs import graph_mode
from primus_ext.specs import ExecutionSpec, GPUSpec, ModelSpec, SystemSpec
from primus_ext.validate.archs import ArchRow
from primus_ext.validate.csvio import read_rows
from primus_ext.validate.finetune import apply_finetune, finetune_of, is_finetune

REQUIRED_RUN_COLUMNS = ("source", "model", "seq_len", "precision", "gpu", "num_gpus", "tp", "pp", "vpp", "cp",
                        "ep", "etp", "dp", "mbs", "gbs", "extra_flags", "tokens_per_sec_per_gpu", "notes")

MEGATRON_BRIDGE_TE_LOSS_FAMILIES = ("Llama", "Qwen3", "DeepSeek")
"""Model families whose Megatron-Bridge pre-training recipes use Transformer Engine's cross entropy
(``cross_entropy_fusion_impl = "te"``: megatron/bridge/recipes/llama/llama3.py, qwen/qwen3.py,
qwen/qwen3_moe.py, deepseek/deepseek_v3.py, and the Llama provider / DeepSeek bridges' defaults, v0.3.1);
GPT-OSS (gpt_oss.py: "native") and the others keep megatron-core's default, ``native``."""


@dataclass(frozen=True, kw_only=True)
class RunRow:
    """One measured run, ready to project (``model is None`` when skipped)."""

    index: int
    """0-based data-row index in the CSV."""
    model_name: str
    gpu: str
    num_gpus: int
    precision_label: str
    measured_tokens_per_sec_per_gpu: float
    measured_tflops_per_gpu: float | None = None
    model: ModelSpec | None = None
    execution: ExecutionSpec | None = None
    system: SystemSpec | None = None
    skipped_reason: str = ""
    assumptions: tuple[str, ...] = ()


def _int(text: str, default: int | None = None) -> int | None:
    match = re.match(r"\s*(\d+)", text or "")
    return int(match.group(1)) if match else default


def _float(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def precision_of(label: str) -> str | None:
    """Map a CSV precision label to a GEMM precision (NVFP4 / MXFP4 -> fp4); ``None`` when unsupported (blank)."""
    text = label.upper()
    if "FP4" in text:
        return "fp4"
    if "FP8" in text:
        return "fp8"
    if "BF16" in text:
        return "bf16"
    return None


def fp4_recipe_of(label: str) -> str:
    """The fp4 recipe a row's precision label names: MXFP4, else NVFP4 (megatron-core's only built-in one)."""
    return "mxfp4" if "MXFP4" in label.upper() else "nvfp4"


def fp8_recipe_of(label: str, notes: str) -> str:
    """The fp8 scaling recipe a row's precision label (or the recipe it names) states; Megatron's default
    ``delayed`` when it states none. torchao's float8 default is tensorwise (dynamic per-tensor) scaling."""
    text = label.upper()
    if "PRESUMABLY" in text:  # the source guesses the column's recipe ("presumably MXFP8"): not stated
        return "delayed"
    if "MX" in text:
        return "mxfp8"
    if "ROWWISE" in text:
        return "rowwise"
    if "BLOCKWISE" in text:
        return "blockwise"
    if any(k in text for k in ("-CS", "CURRENT SCALING", "TENSORWISE", "TORCHAO")) or "_FP8_CS_" in notes:
        return "tensorwise"
    return "delayed"


def _flag(flags: str, key: str) -> str | None:
    match = re.search(rf"{key}\s*=\s*\"?([^;\]\"]*)\"?", flags)
    return match.group(1).strip() if match else None


def _bool_flag(flags: str, key: str, default: bool) -> bool:
    """A true/false recipe flag (``key=True``); ``default`` when the row does not set it."""
    value = _flag(flags, key)
    return default if value is None else value.lower() == "true"


def cuda_graph_of(flags: str) -> str:
    """The CUDA graph mode a row's recipe flags set (``recipe.graphs.graph_mode``). The last
    ``cuda_graph_impl`` and ``cuda_graph_scope`` win (a recipe call may override an earlier one);
    ``full_iteration`` as an impl is Megatron-Bridge's performance scripts' shorthand for ``local`` + scope
    ``full_iteration``; NeMo's ``cuda_graphs=True|1`` is ``enable_cuda_graph`` (local per-layer graphs),
    ``external_cuda_graph`` Transformer Engine's; a recipe call named ``..._full_iter...`` (Megatron-Bridge's
    full-iteration-graph presets) -> the whole iteration; the prose "TE cuda graphs <scopes>" -> Transformer
    Engine graphs of those scopes."""
    impls = re.findall(r"cuda_graph_impl\s*=\s*\"?(\w+)", flags)
    scope_texts = re.findall(r"cuda_graph_scope\s*=\s*(\[[^\]]*\]|[^;\]]*)", flags)
    scopes = [x for x in re.split(r"[+,\[\]'\" ]+", scope_texts[-1] if scope_texts else "") if x]
    if impls:
        impl = impls[-1].lower()
        return graph_mode("local", ["full_iteration"]) if impl == "full_iteration" else graph_mode(impl, scopes)
    if re.search(r"\b(cuda_graphs|enable_cuda_graph)\s*=\s*(true|1)\b", flags, re.IGNORECASE):
        return graph_mode("local", scopes)
    if re.search(r"\bexternal_cuda_graph\s*=\s*(true|1)\b", flags, re.IGNORECASE):
        return graph_mode("transformer_engine", scopes)
    prose = re.search(r"\b(?:te|transformer engine) cuda graphs?\s+([a-z_]+(?:\+[a-z_]+)*)", flags, re.IGNORECASE)
    if prose:  # an optimization-history row's summary: "TE cuda graphs attn+moe_router+moe_preprocess"
        return graph_mode("transformer_engine", prose.group(1).lower().split("+"))
    return "full_iteration" if re.search(r"full_iter", _flag(flags, "calls") or "") else "none"


def optimizer_of(flags: str) -> dict[str, object]:
    """The precision-aware optimizer a row states: ``use_precision_aware_optimizer=True`` with its dtype flags,
    or the prose "precision-aware optimizer <dtype> moments" (an optimization-history row's summary)."""
    lowered = flags.lower()
    prose = re.search(r"precision-aware optimizer(?:\s+(bf16|fp16|fp8) moments)?", lowered)
    flag = _bool_flag(flags, "use_precision_aware_optimizer", False)
    if not (prose or flag):
        return {}
    out: dict[str, object] = {"use_precision_aware_optimizer": True}
    moments = prose.group(1) if prose else None
    for key in ("exp_avg_dtype", "exp_avg_sq_dtype"):
        value = (_flag(flags, key) or moments or "fp32").lower()
        out[key] = value if value in ("fp32", "fp16", "bf16", "fp8") else "fp32"
    return out


def execution_of(row: dict[str, str], model: ModelSpec, precision: str) -> tuple[ExecutionSpec, list[str]]:
    """The execution a row describes, with framework defaults for what it leaves out."""
    flags, notes, source = row["extra_flags"] or "", row["notes"] or "", row["source"] or ""
    lowered = (flags + " " + notes).lower()
    torchtitan = "torchtitan" in source.lower()
    tp, pp, cp = _int(row["tp"], 1) or 1, _int(row["pp"], 1) or 1, _int(row["cp"], 1) or 1
    vpp, etp, num_gpus = _int(row["vpp"]), _int(row["etp"]), _int(row["num_gpus"], 0) or 0
    assumptions: list[str] = []
    if model.is_moe and etp is None:
        etp = 1
        assumptions.append("expert_tensor_parallel_size=1 (Megatron-Bridge MoE recipes; not stated)")
    execution = ExecutionSpec(
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=cp,
        virtual_pipeline_model_parallel_size=vpp if vpp and vpp > 1 else None,
        expert_model_parallel_size=_int(row["ep"], 1) or 1, expert_tensor_parallel_size=etp,
        data_parallel_size=max(1, num_gpus // (tp * pp * cp)) if num_gpus else 1,
        # on when TP > 1 unless stated otherwise; always for MoE with TP > 1 (Megatron requires it)
        sequence_parallel=(model.is_moe and tp > 1) or _bool_flag(flags, "sequence_parallel", tp > 1),
        pipeline_model_parallel_layout=_flag(flags, "pp_layout") or None,
        pipeline_schedule=resolve_schedule("1f1b", 2, vpp).name,
        micro_batch_size=_int(row["mbs"], 1) or 1, global_batch_size=_int(row["gbs"], 1) or 1,
        seq_length=_int(row["seq_len"], 4096) or 4096,
        # torchtitan calls F.scaled_dot_product_attention, whose flash backend is FlashAttention-2 (PyTorch
        # 2.2+ release notes); Megatron-based stacks run Transformer Engine's fused attention
        attention_kernel="flash2" if torchtitan else "fused",
        cuda_graph=cuda_graph_of(flags),  # type: ignore[arg-type]
        **_recompute_of(flags, lowered, torchtitan), **optimizer_of(flags), **_offloading_of(flags),
        **_sharding_of(flags, notes, torchtitan),
        overlap_grad_reduce=True, overlap_param_gather=True, tp_comm_overlap=tp > 1 and not torchtitan,
        overlap_moe_expert_parallel_comm="moe_a2a_overlap" in lowered,
        precision=precision,  # type: ignore[arg-type]
        fp8_recipe=fp8_recipe_of(row["precision"], notes),  # type: ignore[arg-type]
        fp4_recipe=fp4_recipe_of(row["precision"]),  # type: ignore[arg-type]
        fp8_param_gather=_fp8_param_gather_of(flags, lowered, source, precision),
        cross_entropy_fusion_impl=_loss_impl_of(flags, source, model),  # type: ignore[arg-type]
        moe_token_dispatcher_type=_dispatcher_of(flags, lowered),  # type: ignore[arg-type]
        moe_router_force_load_balancing=model.is_moe,
    )
    if not torchtitan:
        assumptions.append("Megatron recipe defaults: distributed optimizer, grad/param overlap, TP comm overlap")
    if layout_problems(model, execution):
        execution, note = _legal_split(model, execution)
        assumptions.append(note)
    return execution, assumptions


def _recompute_of(flags: str, lowered: str, torchtitan: bool) -> dict[str, Any]:
    """The activation recomputation a row states (recipe flags or prose: "full AC", "selective AC"), as the
    ``recompute_*`` and ``selective_ac_option`` fields; none when it states none."""
    granularity, modules = None, ()
    rg = _flag(flags, "recompute_granularity")
    if rg and rg.lower() not in ("none", ""):
        granularity = rg.lower()
    if "full activation checkpointing" in lowered or "full ac" in lowered:
        granularity = "full"
    elif "selective" in lowered and ("ac" in lowered or "checkpoint" in lowered):
        granularity = granularity or "selective"
    rm = _flag(flags, "recompute_modules")
    if rm:
        modules = tuple(m for m in re.split(r"[+,\[\] ]+", rm) if m)
        granularity = "selective" if modules else granularity
    method, num_layers = None, None
    if granularity == "full":
        method = (_flag(flags, "recompute_method") or "uniform").lower()
        num_layers = _int(_flag(flags, "recompute_num_layers") or "", 1)
        if method == "none":
            method = "uniform"
    return {"recompute_granularity": granularity, "recompute_method": method, "recompute_num_layers": num_layers,
            "recompute_modules": modules,
            # torchtitan's selective activation checkpointing is op-level by default (train_configs
            # selective_ac_option = "op"; the torchtitan rows say "per-op selective AC")
            "selective_ac_option": "op" if torchtitan and granularity == "selective" else "modules"}


MEGATRON_FSDP_FLAGS = ("use_megatron_fsdp=true", "megatron_fsdp(", "megatron fsdp", "use_mcore_fsdp=1",
                       "use_mcore_fsdp=true")
"""Flag texts (lower case) that name Megatron's own FSDP."""


def _sharding_of(flags: str, notes: str, torchtitan: bool) -> dict[str, Any]:
    """How the data-parallel state is sharded: Megatron FSDP, torch FSDP2 (torchtitan, or FSDP named), else the
    distributed optimizer; as the ``fsdp`` fields and ``use_distributed_optimizer``."""
    fsdp = "none"
    raw_fsdp = re.search(r"\bFSDP=(\d+)", notes)
    flag_text = flags.lower()
    if any(k in flag_text for k in MEGATRON_FSDP_FLAGS) or (raw_fsdp and int(raw_fsdp.group(1))):
        fsdp = "megatron_fsdp"
    elif torchtitan or ("fsdp" in flag_text and "no fsdp" not in flag_text):  # "no FSDP (DDP/...)": the opposite
        fsdp = "torch_fsdp2"
    return {"use_distributed_optimizer": fsdp == "none", "fsdp": fsdp,
            # the FSDP2 rows are torchtitan's and NeMo AutoModel's: their MixedPrecisionPolicy reduces in fp32
            "fsdp_reduce_dtype": "fp32" if fsdp == "torch_fsdp2" else "param",
            "data_parallel_sharding_strategy": "optim_grads_params" if fsdp == "megatron_fsdp" else "no_shard"}


def _dispatcher_of(flags: str, lowered: str) -> str:
    """The MoE token dispatcher: as stated, ``flex`` when DeepEP / HybridEP is named (they run through Megatron's
    flex dispatcher), else ``alltoall``."""
    dispatcher = (_flag(flags, "moe_token_dispatcher_type") or "alltoall").lower()
    if "moe_flex_dispatcher_backend" in flags or re.search(r"dispatcher\s*=\s*(deepep|hybridep)", lowered) or \
            re.search(r"kernels:[^;|]*\bdeepep\b", lowered):  # NeMo AutoModel rows: "kernels: TE + DeepEP"
        dispatcher = "flex"
    return dispatcher if dispatcher in ("alltoall", "allgather", "flex") else "alltoall"


def _offloading_of(flags: str) -> dict[str, Any]:
    """The activation / weight CPU offloading a row's recipe flags set, as the ``cpu_offloading*`` fields."""
    layers = _int(_flag(flags, "cpu_offloading_num_layers") or "", 0) or 0
    # NeMo / Megatron-Bridge performance scripts turn ``cpu_offloading`` on (activations only, weights
    # off) when they set ``cpu_offloading_num_layers`` > 0; the rows list only the layer count.
    return {"cpu_offloading": _bool_flag(flags, "cpu_offloading", layers > 0), "cpu_offloading_num_layers": layers,
            "cpu_offloading_activations": (_flag(flags, "cpu_offloading_activations") or "true").lower() == "true",
            "cpu_offloading_weights": _bool_flag(flags, "cpu_offloading_weights", False)}


def _loss_impl_of(flags: str, source: str, model: ModelSpec) -> str:
    """The cross-entropy implementation: as stated, else Transformer Engine's for the Megatron-Bridge families
    that use it (``MEGATRON_BRIDGE_TE_LOSS_FAMILIES``), else megatron-core's ``native``."""
    loss_impl = (_flag(flags, "cross_entropy_fusion_impl") or "").lower()
    if loss_impl in ("native", "te"):
        return loss_impl
    bridge = "megatron-bridge" in source.lower()
    return "te" if bridge and model.name.startswith(MEGATRON_BRIDGE_TE_LOSS_FAMILIES) else "native"


def _fp8_param_gather_of(flags: str, lowered: str, source: str, precision: str) -> bool:
    """Whether the weights are gathered in fp8: as stated, else on for NVIDIA's NeMo 2 / Megatron-Bridge fp8
    mixed-precision recipes (bf16_with_fp8_delayed_scaling / current_scaling / mxfp8_mixed, Megatron-Bridge
    training/mixed_precision.py, ported from NeMo 2's recipes/precision/mixed_precision.py: all set
    fp8_param_gather=True), elsewhere only when the row names it."""
    nvidia_fp8 = "nemo" in source.lower() and "automodel" not in source.lower() and precision == "fp8"
    return _bool_flag(flags, "fp8_param_gather", "fp8-param-gather" in lowered or nvidia_fp8)


def balanced_layout(num_layers: int, stages: int, mtp_layers: int = 0) -> str:
    """A Megatron layout string spreading ``num_layers`` over ``stages`` virtual stages as evenly as
    possible, the remainder on the middle stages (the embedding and loss stages carry extra work)."""
    base, extra = divmod(num_layers, stages)
    counts = [base] * stages
    middle = list(range(1, stages - 1)) or list(range(stages))
    for i in range(extra):
        counts[middle[i % len(middle)]] += 1
    parts = ["t" * c for c in counts]
    parts[0] = "E" + parts[0]
    parts[-1] = parts[-1] + "m" * mtp_layers + "L"
    return "|".join(parts)


def _legal_split(model: ModelSpec, execution: ExecutionSpec) -> tuple[ExecutionSpec, str]:
    """The source did not state how an indivisible layer count was split: use what Megatron-Bridge
    recipes do (embedding and loss counted as pipeline layers), else a balanced layout."""
    accounted = replace(execution, account_for_embedding_in_pipeline_split=True,
                        account_for_loss_in_pipeline_split=True)
    if not layout_problems(model, accounted):
        return accounted, "pipeline split: embedding and loss accounted as layers (not stated by the source)"
    layout = balanced_layout(model.num_layers, execution.pp * execution.vpp, model.mtp_num_layers)
    return replace(execution, pipeline_model_parallel_layout=layout), f"pipeline split assumed: layout {layout}"


_BOARD_POWER = re.compile(r"@\s*(\d{3,4})\s*W\b")


def board_power_w(notes: str) -> float | None:
    """The board power a source states for its GPUs (``"H100 96GB @500W"``), else ``None``."""
    match = _BOARD_POWER.search(notes)
    return float(match.group(1)) if match else None


def run_of(index: int, row: dict[str, str], archs: dict[str, ArchRow],
           gpus: Mapping[str, GPUSpec] | None = None) -> RunRow:
    """One CSV data row -> ``RunRow`` with specs or a skip reason."""
    name = (row["model"] or "").strip()
    measured = _float(row["tokens_per_sec_per_gpu"]) or 0.0
    base = RunRow(index=index, model_name=name, gpu=row["gpu"], num_gpus=_int(row["num_gpus"], 0) or 0,
                  precision_label=row["precision"], measured_tokens_per_sec_per_gpu=measured,
                  measured_tflops_per_gpu=_float(row.get("tflops_per_gpu", "")))

    def skip(reason: str) -> RunRow:
        return replace(base, skipped_reason=reason)

    tune = finetune_of(row) if is_finetune(row) else None
    if isinstance(tune, str):
        return skip(tune)
    arch = archs.get(name)
    if arch is None:
        return skip(f"unknown architecture {name!r} (not in the archs file)")
    if arch.model is None:
        return skip(arch.skipped_reason)
    precision = precision_of(row["precision"])
    if precision is None:
        return skip(f"unsupported precision {row['precision']!r}" if row["precision"] else "precision not stated")
    derived: tuple[str, ...] = ()
    if measured <= 0 and base.measured_tflops_per_gpu and _int(row["seq_len"]):
        # Only model TFLOP/s published: tokens/s = TFLOP/s / (model FLOPs per token), the same
        # convention the sources use (primus_ext.model.flops); a unit conversion, not a fit.
        per_token = model_flops_per_token(arch.model, _int(row["seq_len"]) or 0)
        measured = base.measured_tflops_per_gpu * 1e12 / per_token
        base = replace(base, measured_tokens_per_sec_per_gpu=measured)
        derived = ("measured tok/s/GPU derived from the published model TFLOP/s",)
    if measured <= 0:
        return skip("no measured tokens/s/GPU")
    if not row["mbs"] or not row["gbs"] or not row["seq_len"]:
        return skip("incomplete parallel config (mbs / gbs / seq_len not stated)")
    gpu_name = canonical_name(row["gpu"])
    if gpus and gpu_name in gpus:
        gpu = gpus[gpu_name]
    else:
        try:
            gpu = load_gpu(gpu_name)
        except RecipeError:
            return skip(f"no hardware profile for GPU {row['gpu']!r}")
    execution, assumptions = execution_of(row, arch.model, precision)
    if tune is not None:  # a fine-tuning run: LoRA adapters on a frozen base, or SFT (validate.finetune)
        execution = apply_finetune(execution, tune)
        assumptions += tune.assumptions
    if precision == "fp4":
        problem = fp4_problem(gpu, execution.fp4_recipe)
        if problem:
            return skip(problem)
        assumptions.append("fp4: megatron-core defaults fp4_param false, first_last_layers_bf16 false (not stated)")
    watts = board_power_w(row["notes"] or "")
    if watts and clock_scale(watts, gpu.tdp_w) < 1.0:  # a power-capped part (e.g. Grand Teton H100 @500W)
        assumptions.append(f"GPUs at {watts:g} W of {gpu.tdp_w:g} W: peaks x{clock_scale(watts, gpu.tdp_w):.3f}")
        gpu = power_capped(gpu, watts)
    hbm = re.search(r"(\d+)\s*GB\s+HBM", row["notes"] or "")
    if hbm and int(hbm.group(1)) * 1e9 != gpu.hbm_bytes:
        # a variant of the named GPU stated by the row (e.g. torchtitan's 96 GB HBM2e H100 of Grand Teton)
        gpu = replace(gpu, hbm_bytes=int(hbm.group(1)) * 10**9)
        assumptions.append(f"HBM capacity {hbm.group(1)} GB as the row states")
    n = base.num_gpus
    if n % gpu.gpus_per_node:
        gpu = replace(gpu, gpus_per_node=n)  # a partial node: one node holding all the run's GPUs
    system = SystemSpec(gpu=gpu, num_nodes=max(1, n // gpu.gpus_per_node), name=canonical_name(row["gpu"]))
    return replace(base, model=arch.model, execution=execution, system=system,
                   assumptions=arch.assumptions + tuple(assumptions) + derived)


def read_runs(path: str | Path, archs: dict[str, ArchRow],
              gpus: Mapping[str, GPUSpec] | None = None) -> list[RunRow]:
    """Every data row of a measurements CSV, projected-ready or skipped with its reason."""
    rows = read_rows(path, REQUIRED_RUN_COLUMNS, "measured_throughput.csv")
    runs = [run_of(i, row, archs, gpus) for i, row in enumerate(rows)]
    return _keep_final_optimization_steps(runs, rows)


_STEP = re.compile(r"\bstep(\d+):")


def _keep_final_optimization_steps(runs: list[RunRow], rows: list[dict[str, str]]) -> list[RunRow]:
    """An optimization-history table lists one configuration under successive software changes
    (kernel fusions, CUDA graphs...) that no configuration-level projection can tell apart. Keep the
    final step of each table as the measurement of that configuration; name the others as skipped."""
    tables: dict[tuple[str, str, str, str], list[tuple[int, int]]] = {}
    for i, row in enumerate(rows):
        step = _STEP.search(row["extra_flags"] or "")
        if step and "optimization-history" in (row["notes"] or ""):
            key = (row["source"], row["model"], row["gpu"], row["num_gpus"])
            tables.setdefault(key, []).append((int(step.group(1)), i))
    out = list(runs)
    for steps in tables.values():
        final_step, _ = max(steps)
        for step, i in steps:
            if step != final_step and out[i].model is not None:
                out[i] = replace(out[i], model=None, execution=None, system=None, skipped_reason=(
                    f"intermediate software-optimization step {step} of an optimization-history table "
                    f"(its final step {final_step} is kept)"))
    return out
