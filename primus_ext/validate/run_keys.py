"""A ``measured_throughput.csv`` row -> the recipe keys of the run it describes (a flat Megatron / Primus key
mapping, the keys a user's recipe holds), to resolve through ``recipe.resolve`` like a user's recipe.

What a row does not state is filled with the defaults of the framework that produced it, named here: NVIDIA's
Megatron-Bridge / NeMo performance recipes run with the distributed optimizer, DP grad-reduce / param-gather overlap,
TP communication overlap and sequence parallelism when TP > 1 (shared/validation/README: "recipe-wide defaults such
as TP comm overlap or the distributed optimizer are not listed"); torchtitan rows run FSDP2 (``recipe.torchtitan_keys``
for what only torchtitan says).

    keys, assumptions = run_keys(row, arch.keys, "fp8")
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from primus_ext.recipe.graphs import graph_mode
from primus_ext.validate.csvio import leading_count

MEGATRON_BRIDGE_TE_LOSS_FAMILIES = ("Llama", "Qwen3", "DeepSeek")
"""Model families whose Megatron-Bridge pre-training recipes use Transformer Engine's cross entropy
(``cross_entropy_fusion_impl = "te"``: megatron/bridge/recipes/llama/llama3.py, qwen/qwen3.py,
qwen/qwen3_moe.py, deepseek/deepseek_v3.py, and the Llama provider / DeepSeek bridges' defaults, v0.3.1);
GPT-OSS (gpt_oss.py: "native") and the others keep megatron-core's default, ``native``."""

PRECISION_KEYS = {"fp8": {"fp8": "hybrid", "bf16": True}, "fp4": {"fp4": "e2m1", "bf16": True},
                  "bf16": {"bf16": True}}
"""GEMM precision -> Megatron's keys (``--fp8-format hybrid``: NVIDIA's recipes' E4M3 forward / E5M2 backward;
``--fp4-format e2m1``; the rest of the model in bf16)."""


_int = leading_count


def _flag(flags: str, key: str) -> str | None:
    match = re.search(rf"{key}\s*=\s*\"?([^;\]\"]*)\"?", flags)
    return match.group(1).strip() if match else None


def _bool_flag(flags: str, key: str, default: bool) -> bool:
    """A true/false recipe flag (``key=True``); ``default`` when the row does not set it."""
    value = _flag(flags, key)
    return default if value is None else value.lower() == "true"


def cuda_graph_keys(flags: str) -> dict[str, Any]:
    """The CUDA graph keys (megatron-core ``cuda_graph_impl`` / ``cuda_graph_scope``) a row's recipe flags set. The
    last ``cuda_graph_impl`` and ``cuda_graph_scope`` win (a recipe call may override an earlier one);
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
        if impl == "full_iteration":
            return {"cuda_graph_impl": "local", "cuda_graph_scope": ["full_iteration"]}
        return {"cuda_graph_impl": impl, "cuda_graph_scope": scopes}
    if re.search(r"\b(cuda_graphs|enable_cuda_graph)\s*=\s*(true|1)\b", flags, re.IGNORECASE):
        return {"cuda_graph_impl": "local", "cuda_graph_scope": scopes}
    if re.search(r"\bexternal_cuda_graph\s*=\s*(true|1)\b", flags, re.IGNORECASE):
        return {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": scopes}
    prose = re.search(r"\b(?:te|transformer engine) cuda graphs?\s+([a-z_]+(?:\+[a-z_]+)*)", flags, re.IGNORECASE)
    if prose:  # an optimization-history row's summary: "TE cuda graphs attn+moe_router+moe_preprocess"
        return {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": prose.group(1).lower().split("+")}
    if re.search(r"full_iter", _flag(flags, "calls") or ""):
        return {"cuda_graph_impl": "local", "cuda_graph_scope": ["full_iteration"]}
    return {}


def cuda_graph_of(flags: str) -> str:
    """The ``ExecutionSpec.cuda_graph`` mode of a row's CUDA graph keys (``cuda_graph_keys``)."""
    keys = cuda_graph_keys(flags)
    return graph_mode(keys.get("cuda_graph_impl", "none"), keys.get("cuda_graph_scope", []))


def optimizer_of(flags: str) -> dict[str, object]:
    """The precision-aware optimizer keys a row states: ``use_precision_aware_optimizer=True`` with its dtype flags,
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


def recompute_keys(flags: str, lowered: str, torchtitan: bool) -> dict[str, Any]:
    """The activation recomputation keys a row states (recipe flags or prose: "full AC", "selective AC"); none when
    it states none. torchtitan's selective checkpointing is op-level (its default ``selective_ac_option = "op"``;
    the torchtitan rows say "per-op selective AC")."""
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
    keys: dict[str, Any] = {"recompute_granularity": granularity, "recompute_modules": list(modules) or None}
    if granularity == "full":
        method = (_flag(flags, "recompute_method") or "uniform").lower()
        keys.update(recompute_method="uniform" if method == "none" else method,
                    recompute_num_layers=_int(_flag(flags, "recompute_num_layers"), 1))
    if torchtitan and granularity == "selective":
        keys["selective_ac_option"] = "op"
    return keys


MEGATRON_FSDP_FLAGS = ("use_megatron_fsdp=true", "megatron_fsdp(", "megatron fsdp", "use_mcore_fsdp=1",
                       "use_mcore_fsdp=true")
"""Flag texts (lower case) that name Megatron's own FSDP."""


def sharding_keys(flags: str, notes: str, torchtitan: bool) -> dict[str, Any]:
    """How the data-parallel state is sharded: Megatron FSDP, torch FSDP2 (torchtitan, or FSDP named), else the
    distributed optimizer."""
    raw_fsdp = re.search(r"\bFSDP=(\d+)", notes)
    flag_text = flags.lower()
    if any(k in flag_text for k in MEGATRON_FSDP_FLAGS) or (raw_fsdp and int(raw_fsdp.group(1))):
        return {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"}
    if torchtitan or ("fsdp" in flag_text and "no fsdp" not in flag_text):  # "no FSDP (DDP/...)": the opposite
        # the FSDP2 rows are torchtitan's and NeMo AutoModel's: their MixedPrecisionPolicy reduces in fp32
        return {"use_torch_fsdp2": True, "mixed_precision_reduce": "float32"}
    return {"use_distributed_optimizer": True}


def _dispatcher(flags: str, lowered: str) -> str:
    """The MoE token dispatcher: as stated, ``flex`` when DeepEP / HybridEP is named (they run through Megatron's
    flex dispatcher), else ``alltoall``."""
    dispatcher = (_flag(flags, "moe_token_dispatcher_type") or "alltoall").lower()
    if "moe_flex_dispatcher_backend" in flags or re.search(r"dispatcher\s*=\s*(deepep|hybridep)", lowered) or \
            re.search(r"kernels:[^;|]*\bdeepep\b", lowered):  # NeMo AutoModel rows: "kernels: TE + DeepEP"
        dispatcher = "flex"
    return dispatcher if dispatcher in ("alltoall", "allgather", "flex") else "alltoall"


def _moe_keys(flags: str, lowered: str) -> dict[str, Any]:
    """The MoE keys of a MoE row: its dispatcher, grouped GEMMs (Megatron-Bridge MoE recipes' default) and forced
    load balancing (the benchmark runs route tokens evenly: ``moe_router_force_load_balancing``)."""
    return {"moe_token_dispatcher_type": _dispatcher(flags, lowered), "moe_grouped_gemm": True,
            "moe_router_force_load_balancing": True}


def offloading_keys(flags: str) -> dict[str, Any]:
    """The activation / weight CPU offloading keys a row's recipe flags set."""
    layers = _int(_flag(flags, "cpu_offloading_num_layers"), 0) or 0
    # NeMo / Megatron-Bridge performance scripts turn ``cpu_offloading`` on (activations only, weights
    # off) when they set ``cpu_offloading_num_layers`` > 0; the rows list only the layer count.
    return {"cpu_offloading": _bool_flag(flags, "cpu_offloading", layers > 0), "cpu_offloading_num_layers": layers,
            "cpu_offloading_activations": (_flag(flags, "cpu_offloading_activations") or "true").lower() == "true",
            "cpu_offloading_weights": _bool_flag(flags, "cpu_offloading_weights", False)}


def _loss_impl(flags: str, source: str, name: str) -> str:
    """The cross-entropy implementation: as stated, else Transformer Engine's for the Megatron-Bridge families
    that use it (``MEGATRON_BRIDGE_TE_LOSS_FAMILIES``), else megatron-core's ``native``."""
    loss_impl = (_flag(flags, "cross_entropy_fusion_impl") or "").lower()
    if loss_impl in ("native", "te"):
        return loss_impl
    bridge = "megatron-bridge" in source.lower()
    return "te" if bridge and name.startswith(MEGATRON_BRIDGE_TE_LOSS_FAMILIES) else "native"


def _fp8_param_gather(flags: str, lowered: str, source: str, precision: str) -> bool:
    """Whether the weights are gathered in fp8: as stated, else on for NVIDIA's NeMo 2 / Megatron-Bridge fp8
    mixed-precision recipes (bf16_with_fp8_delayed_scaling / current_scaling / mxfp8_mixed, Megatron-Bridge
    training/mixed_precision.py, ported from NeMo 2's recipes/precision/mixed_precision.py: all set
    fp8_param_gather=True), elsewhere only when the row names it."""
    nvidia_fp8 = "nemo" in source.lower() and "automodel" not in source.lower() and precision == "fp8"
    return _bool_flag(flags, "fp8_param_gather", "fp8-param-gather" in lowered or nvidia_fp8)


def run_keys(row: Mapping[str, str], name: str, moe: bool, precision: str, fp8_recipe: str,
             fp4_recipe: str) -> tuple[dict[str, Any], list[str]]:
    """The execution keys a row describes (framework defaults for what it leaves out) and what they assume."""
    flags, notes, source = row["extra_flags"] or "", row["notes"] or "", row["source"] or ""
    lowered = (flags + " " + notes).lower()
    torchtitan = "torchtitan" in source.lower()
    tp = _int(row["tp"], 1) or 1
    vpp, etp = _int(row["vpp"]), _int(row["etp"])
    assumptions: list[str] = []
    if moe and etp is None:
        etp = 1
        assumptions.append("expert_tensor_parallel_size=1 (Megatron-Bridge MoE recipes; not stated)")
    keys: dict[str, Any] = {
        "tensor_model_parallel_size": tp, "pipeline_model_parallel_size": _int(row["pp"], 1) or 1,
        "context_parallel_size": _int(row["cp"], 1) or 1,
        "virtual_pipeline_model_parallel_size": vpp if vpp and vpp > 1 else None,
        "expert_model_parallel_size": _int(row["ep"], 1) or 1, "expert_tensor_parallel_size": etp,
        # on when TP > 1 unless stated otherwise; always for MoE with TP > 1 (Megatron requires it)
        "sequence_parallel": (moe and tp > 1) or _bool_flag(flags, "sequence_parallel", tp > 1),
        "pipeline_model_parallel_layout": _flag(flags, "pp_layout") or None,
        "micro_batch_size": _int(row["mbs"], 1) or 1, "global_batch_size": _int(row["gbs"], 1) or 1,
        "seq_length": _int(row["seq_len"], 4096) or 4096,
        **PRECISION_KEYS[precision], "fp8_recipe": fp8_recipe, "fp4_recipe": fp4_recipe,
        "fp8_param_gather": _fp8_param_gather(flags, lowered, source, precision),
        **cuda_graph_keys(flags), **recompute_keys(flags, lowered, torchtitan), **optimizer_of(flags),
        **offloading_keys(flags), **sharding_keys(flags, notes, torchtitan),
        "overlap_grad_reduce": True, "overlap_param_gather": True, "tp_comm_overlap": tp > 1 and not torchtitan,
        "overlap_moe_expert_parallel_comm": "moe_a2a_overlap" in lowered,
        "cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": _loss_impl(flags, source, name),
        **(_moe_keys(flags, lowered) if moe else {}),
        # torchtitan calls F.scaled_dot_product_attention (FlashAttention-2); Megatron stacks run TE's fused attention
        "attn_type": "sdpa" if torchtitan else None,
    }
    if not torchtitan:
        assumptions.append("Megatron recipe defaults: distributed optimizer, grad/param overlap, TP comm overlap")
    return {k: v for k, v in keys.items() if v is not None}, assumptions
