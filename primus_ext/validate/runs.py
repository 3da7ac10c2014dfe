"""``measured_throughput.csv`` rows -> (model, execution, system) to project, or a skip reason.

Column layout of ``shared/validation/measured_throughput.csv``: source, source_date, model, seq_len,
precision, gpu, num_gpus, tp, pp, vpp, cp, ep, etp, dp, mbs, gbs, extra_flags,
tokens_per_sec_per_gpu, tflops_per_gpu, mfu, step_time_s, notes.

Each row becomes recipe keys (its architecture's, ``validate.archs``; its run's, ``validate.run_keys``, which names
the framework defaults filled in for what a row does not state) and goes through ``recipe.resolve.resolve_all``,
the path a user's recipe takes. Rows that cannot be projected are returned with the reason, never dropped or guessed.
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
from primus_ext.model.stages import layout_problems
from primus_ext.specs import ExecutionSpec, GPUSpec, ModelSpec, SystemSpec
from primus_ext.validate.archs import ArchRow
from primus_ext.validate.csvio import MAX_DIGITS, leading_count, overlong_counts, read_rows
from primus_ext.validate.finetune import finetune_keys, finetune_of, is_finetune
from primus_ext.validate.run_keys import run_keys

REQUIRED_RUN_COLUMNS = ("source", "model", "seq_len", "precision", "gpu", "num_gpus", "tp", "pp", "vpp", "cp",
                        "ep", "etp", "dp", "mbs", "gbs", "extra_flags", "tokens_per_sec_per_gpu", "notes")

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
    keys: Mapping[str, Any] | None = None
    """The recipe keys the row is (``validate.archs`` + ``validate.run_keys``), resolved as a user's recipe."""
    skipped_reason: str = ""
    assumptions: tuple[str, ...] = ()

    @property
    def configuration(self) -> tuple:
        """What a projection reads (model, execution, system): rows that share it share their projection
        (``validate.distinct``)."""
        return (self.model, self.execution, self.system)


_int = leading_count


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


def _legal_split(model: ModelSpec, execution: ExecutionSpec) -> tuple[dict[str, Any], str]:
    """The source did not state how an indivisible layer count was split: the keys of what Megatron-Bridge recipes do
    (embedding and loss counted as pipeline layers), else of a balanced layout."""
    accounted = replace(execution, account_for_embedding_in_pipeline_split=True,
                        account_for_loss_in_pipeline_split=True)
    if not layout_problems(model, accounted):
        return ({"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True},
                "pipeline split: embedding and loss accounted as layers (not stated by the source)")
    layout = balanced_layout(model.num_layers, execution.pp * execution.vpp, model.mtp_num_layers)
    return {"pipeline_model_parallel_layout": layout}, f"pipeline split assumed: layout {layout}"


def resolve_row(keys: dict[str, Any], system: SystemSpec, name: str) -> tuple[ModelSpec, ExecutionSpec, list[str]]:
    """A row's keys through the recipe resolve (``recipe.resolve.resolve_all``, a user's recipe's path; Primus's
    arguments when it trains with Primus's SFT trainer, ``stage: sft``); an unstated indivisible pipeline split gets
    the keys of ``_legal_split``. Raises ``RecipeError`` with the resolve's problems."""
    from primus_ext.recipe.resolve import resolve_all

    primus = keys.get("stage") == "sft"
    model, execution, problems, _ = resolve_all(keys, system, name=name, primus=primus, environ={})
    assumptions = []
    if not problems and layout_problems(model, execution):
        split, note = _legal_split(model, execution)
        keys.update(split)
        assumptions.append(note)
        model, execution, problems, _ = resolve_all(keys, system, name=name, primus=primus, environ={})
    if problems:
        raise RecipeError(problems=problems)
    return model, execution, assumptions


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

    if overlong := overlong_counts(row):
        return skip(f"{', '.join(overlong)}: not a count (more than {MAX_DIGITS} digits)")

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
    notes, assumptions = row["notes"] or "", []
    watts = board_power_w(notes)
    if watts and clock_scale(watts, gpu.tdp_w) < 1.0:  # a power-capped part (e.g. Grand Teton H100 @500W)
        assumptions.append(f"GPUs at {watts:g} W of {gpu.tdp_w:g} W: peaks x{clock_scale(watts, gpu.tdp_w):.3f}")
        gpu = power_capped(gpu, watts)
    hbm = re.search(r"\b(\d{1,6})\s*GB\s+HBM", row["notes"] or "")
    if hbm and int(hbm.group(1)) * 1e9 != gpu.hbm_bytes:
        # a variant of the named GPU stated by the row (e.g. torchtitan's 96 GB HBM2e H100 of Grand Teton)
        gpu = replace(gpu, hbm_bytes=int(hbm.group(1)) * 10**9)
        assumptions.append(f"HBM capacity {hbm.group(1)} GB as the row states")
    n = base.num_gpus
    if n % gpu.gpus_per_node:
        gpu = replace(gpu, gpus_per_node=n)  # a partial node: one node holding all the run's GPUs
    system = SystemSpec(gpu=gpu, num_nodes=max(1, n // gpu.gpus_per_node), name=canonical_name(row["gpu"]))
    keys = dict(arch.keys or {})
    found, run_assumptions = run_keys(row, name, arch.model.is_moe, precision, fp8_recipe_of(row["precision"], notes),
                                      fp4_recipe_of(row["precision"]))
    keys.update(found)
    assumptions = run_assumptions + assumptions
    if tune is not None:  # a fine-tuning run: LoRA adapters on a frozen base, or SFT (validate.finetune)
        keys.update(finetune_keys(tune, precision))
        assumptions += tune.assumptions
    if precision == "fp4":
        assumptions.append("fp4: megatron-core defaults fp4_param false, first_last_layers_bf16 false (not stated)")
    try:
        model, execution, split = resolve_row(keys, system, name)
    except RecipeError as err:
        return skip("; ".join(f"{p.path}: {p.message}" for p in err.problems))
    return replace(base, model=model, execution=execution, system=system, keys=keys,
                   assumptions=arch.assumptions + tuple(assumptions + split) + derived)


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
