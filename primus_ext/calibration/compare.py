"""One real run against its projection: read what the log states, project the same configuration, compare.

    c = compare_log(recipe, log, costs)          # c.measured / c.projected: RunFigures; c.projection: uncalibrated
    record = fit_record([c, ...], cluster="mi355x")

The log's argument dump (Megatron prints every argument at start-up) is checked against the recipe: a run of
another layout, batch or model size is not the recipe's, and calibrating one from the other would fold that
difference into the kernel factor. ``mismatches`` lists each with the override that fixes it; the CLI's ``--follow-log``
reloads the recipe with the log's layout and batch instead (said in ``notes``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from primus_ext.calibration.apply import parts_of
from primus_ext.calibration.correction import CorrectionError, fit_correction, memory_factor
from primus_ext.calibration.record import CalibrationRecord, RunFigures, costs_of, now
from primus_ext.calibration.workload import Workload
from primus_ext.errors import Problem

if TYPE_CHECKING:
    from primus_ext.logs import TrainingLog
    from primus_ext.projection.evaluate import Costs
    from primus_ext.projection.result import Projection
    from primus_ext.recipe import Recipe

CHECKED_ARGS: tuple[tuple[str, str], ...] = (
    ("tensor_model_parallel_size", "execution"), ("pipeline_model_parallel_size", "execution"),
    ("virtual_pipeline_model_parallel_size", "execution"), ("context_parallel_size", "execution"),
    ("expert_model_parallel_size", "execution"), ("micro_batch_size", "execution"),
    ("global_batch_size", "execution"), ("seq_length", "execution"), ("num_layers", "model"),
    ("hidden_size", "model"), ("ffn_hidden_size", "model"), ("num_attention_heads", "model"),
    ("num_experts", "model"), ("world_size", "system"),
)
"""Megatron arguments (as the log's dump names them) that must agree between the run and the projection."""
FOLLOWED = frozenset(name for name, where in CHECKED_ARGS if where == "execution")
"""What ``--follow-log`` adopts from the log (the layout and batch; a different model or GPU count is refused)."""


@dataclass(frozen=True, kw_only=True)
class LogComparison:
    path: str
    log: TrainingLog
    projection: Projection
    """The uncalibrated projection of the configuration the run used."""
    measured: RunFigures
    projected: RunFigures
    mismatches: tuple[Problem, ...] = ()
    overrides: tuple[str, ...] = ()
    """``key=value`` taken from the log (``--follow-log``)."""
    memory_rank: int | None = None
    """The rank whose memory report is compared (its pipeline stage's projected peak)."""
    notes: tuple[str, ...] = ()

    @property
    def step_ratio(self) -> float:
        return self.measured.step_s / self.projected.step_s

    def to_dict(self) -> dict[str, Any]:
        stats = self.log.stats
        return {"log": self.path, "format": self.log.format, "framework": self.log.framework_version,
                "measured": self.measured.to_dict(), "projected": self.projected.to_dict(),
                "step_ratio": self.step_ratio, "iterations_used": stats.n, "first_iteration": stats.first,
                "last_iteration": stats.last, "excluded": [list(x) for x in stats.excluded],
                "averaged": stats.averaged, "flags": [str(f) for f in self.log.flags],
                "overrides": list(self.overrides), "memory_rank": self.memory_rank, "notes": list(self.notes)}


def _spec_value(recipe: Recipe, name: str, where: str) -> Any:
    if where == "system":
        return recipe.system.world_size
    return getattr(recipe.execution if where == "execution" else recipe.model, name, None)


def _logged(text: str) -> Any:
    text = text.strip()
    if text in ("None", "none", "null", ""):
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def mismatches(recipe: Recipe, log: TrainingLog) -> tuple[list[Problem], list[str]]:
    """Arguments the log states differently from the recipe, and the overrides that would make them agree."""
    problems, overrides = [], []
    for name, where in CHECKED_ARGS:
        if name not in log.config:
            continue
        ran, projected = _logged(log.config[name]), _spec_value(recipe, name, where)
        if name == "virtual_pipeline_model_parallel_size" and ran in (None, 1) and projected in (None, 1):
            continue
        if ran is None or ran == projected:
            continue
        problems.append(Problem(path=name, value=projected, message=f"the run logged {name} = {ran}",
                                fix=f"calibrate with the recipe the run used (e.g. {name}={ran}), or --follow-log"
                                    if name in FOLLOWED else "calibrate with the recipe (and --nodes) the run used"))
        if name in FOLLOWED:
            overrides.append(f"{name}={ran}")
    return problems, overrides


def _memory_side(log: TrainingLog, projection: Projection) -> tuple[float | None, float | None, int | None]:
    """Measured peak (max reserved) of the reporting rank with the highest one, and its stage's projected peak."""
    reports = [m for m in log.memory if m.max_reserved_mb is not None]
    if not reports or projection.memory is None:
        return None, None, None
    top = max(reports, key=lambda m: m.max_reserved_mb)
    ex = projection.execution
    stages = projection.memory.stages
    per_stage = max(1, projection.system.world_size // max(1, ex.pipeline_model_parallel_size))
    stage = min(top.rank // per_stage, len(stages) - 1) if top.rank is not None else None
    projected = stages[stage].total_bytes if stage is not None else projection.memory.peak_bytes
    return top.max_reserved_mb * 2**20, float(projected), top.rank


def compare_log(recipe: Recipe, log: TrainingLog, costs: Costs = None, *, path: str = "",
                followed: Sequence[str] = ()) -> LogComparison:
    """Project the configuration ``log`` ran and put the two side by side. ``followed``: the overrides taken from
    the log to load ``recipe`` (the caller reloads it; ``mismatches`` gives them)."""
    from primus_ext.projection import project

    problems, _ = mismatches(recipe, log)
    notes: list[str] = ["projected with the log's " + ", ".join(followed)] if followed else []
    projection = project(recipe.model, recipe.execution, recipe.system, costs)
    stats = log.stats
    tokens = recipe.execution.global_batch_size * recipe.execution.seq_length
    measured_tokens = log.tokens_per_s_per_gpu or tokens / stats.median_s / recipe.system.world_size
    measured_tflops = log.tflops_per_gpu
    if measured_tflops is None:  # the projection's FLOP count over the measured step: like with like
        measured_tflops = projection.model_flops_per_step / stats.median_s / recipe.system.world_size / 1e12
        notes.append("measured TFLOP/s/GPU: the projection's model FLOPs over the measured step (the log prints none)")
    measured_peak, projected_peak, rank = _memory_side(log, projection)
    measured = RunFigures(step_s=stats.median_s, tokens_per_s_per_gpu=measured_tokens, tflops_per_gpu=measured_tflops,
                          peak_bytes=measured_peak, spread=stats.spread)
    projected = RunFigures(step_s=projection.step_time_s, tokens_per_s_per_gpu=projection.tokens_per_s_per_gpu,
                           tflops_per_gpu=projection.model_tflops_per_gpu, peak_bytes=projected_peak)
    if stats.averaged:
        notes.append("the log's step time averages its logging interval including warm-up: an upper bound")
    return LogComparison(path=path, log=log, projection=projection, measured=measured, projected=projected,
                         mismatches=tuple(problems), overrides=tuple(followed), memory_rank=rank,
                         notes=tuple(notes))


def fit_record(comparisons: Sequence[LogComparison], *, cluster: str = "") -> CalibrationRecord:
    """The calibration record of these runs (one workload: the first run's; the others must share its model,
    precision and GPU type). Raises ``CorrectionError`` when no physical correction fits."""
    first = comparisons[0].projection
    workload = Workload.of(first.model, first.execution, first.system)
    for c in comparisons[1:]:
        other = Workload.of(c.projection.model, c.projection.execution, c.projection.system)
        if workload.match(other) is None:
            raise CorrectionError(f"{c.path}: another model, precision or GPU type than {comparisons[0].path}: "
                                  "calibrate each workload with its own logs")
    parts = [parts_of(c.projection.breakdown, c.projection.mfu) for c in comparisons]
    correction = fit_correction(parts, [c.measured.step_s for c in comparisons],
                                [c.measured.spread for c in comparisons])
    notes: list[str] = []
    factors = []
    for c in comparisons:
        if c.measured.peak_bytes and c.projected.peak_bytes:
            factor, why = memory_factor(c.measured.peak_bytes, c.projected.peak_bytes)
            if factor is None:
                notes.append(f"{c.path}: {why}")
            else:
                factors.append(factor)
    if factors:
        correction = replace(correction, memory_factor=max(factors))  # the largest: an OOM verdict errs safe
    frameworks = sorted({c.log.framework_version for c in comparisons if c.log.framework_version})
    return CalibrationRecord(workload=workload, correction=correction,
                             measured=tuple(c.measured for c in comparisons),
                             projected=tuple(c.projected for c in comparisons),
                             logs=tuple(os.path.abspath(c.path) if c.path else "" for c in comparisons),
                             framework="; ".join(frameworks), cluster=cluster,
                             costs=costs_of(dict(first.sources)), date=now(), notes=tuple(notes))
