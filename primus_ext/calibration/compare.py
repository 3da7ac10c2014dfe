"""One real run against its projection: read what the log states, project the same configuration, compare.

    c = compare_log(recipe, log, costs)          # c.measured / c.projected: RunFigures; c.projection: uncalibrated
    record = fit_record([c, ...], cluster="mi355x")

What the log states (its argument dump: Megatron prints every argument at start-up; the batch of its iteration
lines; the GPU names nvidia-smi / rocm-smi / torch print) is checked against the recipe: a run of another model,
precision, layout, batch, sequence length, GPU type or GPU count is not the recipe's, and calibrating one from the
other would fold that difference into the kernel factor. ``mismatches`` lists each with its fix (for the layout,
batch and sequence length, the override; the CLI's ``--follow-log`` reloads the recipe with the log's instead,
said in ``notes``); ``unstated`` names what the log does not say (assumed the recipe's, said). ``log_problems``
refuses a log that cannot stand for the run's steady state (warm-up only, too few steady iterations, mostly
unusable lines).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from primus_ext.calibration.apply import parts_of
from primus_ext.calibration.correction import CorrectionError, fit_correction, implausible_factor, memory_factor
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
FROM_RUN = {"tensor_model_parallel_size": "tensor_parallel", "pipeline_model_parallel_size": "pipeline_parallel",
            "context_parallel_size": "context_parallel", "expert_model_parallel_size": "expert_parallel",
            "micro_batch_size": "micro_batch_size", "global_batch_size": "global_batch_size",
            "seq_length": "seq_length", "num_layers": "num_layers", "hidden_size": "hidden_size",
            "ffn_hidden_size": "ffn_hidden_size", "num_attention_heads": "num_attention_heads",
            "world_size": "world_size"}
"""Arguments read from the log's typed configuration (``TrainingLog.run``: its dump in any of the formats
``logs.dump`` reads, the world size also from the lines that state it) before its raw argument dump."""
NEVER_CROSSED = "a correction never crosses GPU type or precision, not even with --force"
MIN_STEADY_ITERATIONS = 3
"""Steady-state iterations (after warm-up, spikes dropped) a calibration needs: the median of fewer is one or two
steps, and a spread needs three to say anything (``logs.stats``: range / median below four)."""
MAX_UNUSABLE = 0.5
"""Largest share of iteration lines without a usable step time (not a number, non-positive): beyond it the run was
not healthy (timer faults, overflow), and its few good lines are not a steady state."""


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


def _ran(log: TrainingLog, name: str) -> Any:
    """What the log states for argument ``name`` (its typed configuration, else its raw dump), or None."""
    if name in FROM_RUN and getattr(log.run, FROM_RUN[name]) is not None:
        return getattr(log.run, FROM_RUN[name])
    if name == "global_batch_size" and log.global_batch_size is not None:  # its iteration lines print it
        return log.global_batch_size
    return _logged(log.config[name]) if name in log.config else None


def logged_gpus(log: TrainingLog) -> list[str]:
    """The hardware profiles of the GPUs the log names (nvidia-smi, rocm-smi, torch device names)."""
    from primus_ext.hardware import profile_of_device

    return sorted({p for name in log.devices if (p := profile_of_device(name)) is not None})


def crossing(recipe: Recipe, log: TrainingLog) -> list[Problem]:
    """The run's precision or GPU type where the log states one other than the recipe's: never calibrated across
    (``NEVER_CROSSED``; ``--force`` and ``--follow-log`` do not change it)."""
    from primus_ext.hardware import canonical_name

    problems = []
    precision = log.run.precision
    if precision is not None and precision != recipe.execution.precision:
        problems.append(Problem(path="precision", value=recipe.execution.precision,
                                message=f"the run logged {precision} (its configuration dump): {NEVER_CROSSED}",
                                fix=f"calibrate with the recipe the run used (its precision: {precision})"))
    gpus = logged_gpus(log)
    if gpus and canonical_name(recipe.system.name) not in gpus:
        problems.append(Problem(path="GPU type", value=recipe.system.name,
                                message=f"the log names {', '.join(log.devices[:2])} ({', '.join(gpus)}): "
                                        f"{NEVER_CROSSED}",
                                fix=f"calibrate on the run's GPU: --cluster {gpus[0]}"))
    return problems


def unstated(log: TrainingLog) -> list[str]:
    """What the workload check could not read in the log (assumed the recipe's)."""
    missing = [name for name in ("global_batch_size", "seq_length", "world_size", "num_layers", "hidden_size")
               if _ran(log, name) is None]
    if log.run.precision is None:
        missing.append("precision")
    if not logged_gpus(log):
        missing.append("GPU type")
    return missing


def log_problems(log: TrainingLog) -> list[Problem]:
    """Why ``log`` cannot stand for its run's steady state (empty when it can): warm-up only, fewer than
    ``MIN_STEADY_ITERATIONS`` steady iterations, more than ``MAX_UNUSABLE`` of its lines without a step time."""
    stats, problems = log.stats, []
    if stats.from_warmup:
        problems.append(Problem(path="iterations", value=len(log.iterations),
                                message="the log holds warm-up iterations only (the first 2 of a run: compilation, "
                                        "allocator growth, NCCL set-up), so its step time is not the steady state",
                                fix=f"log at least {MIN_STEADY_ITERATIONS} iterations after the first 2 "
                                    "(log_interval 1), or --force"))
    elif stats.n < MIN_STEADY_ITERATIONS:
        problems.append(Problem(path="iterations", value=stats.n,
                                message=f"{stats.n} steady-state iteration(s) after warm-up and spikes, fewer than "
                                        f"{MIN_STEADY_ITERATIONS}",
                                fix=f"log at least {MIN_STEADY_ITERATIONS} iterations after the first 2, or --force"))
    bad = sum(1 for f in log.flags if f.field == "step time")
    unreadable = sum(1 for f in log.flags if f.field == "step time" and "not a number" in f.why)
    lines = len(log.iterations) + unreadable
    if lines and bad / lines > MAX_UNUSABLE:
        problems.append(Problem(path="iterations", value=f"{bad} of {lines}",
                                message=f"{bad / lines:.0%} of the iteration lines have no usable step time (not a "
                                        f"number or non-positive), more than {MAX_UNUSABLE:.0%}: the run was not "
                                        "healthy and its remaining lines are not its steady state",
                                fix="calibrate from a healthy run, or --force"))
    return problems


def mismatches(recipe: Recipe, log: TrainingLog, *, followed: bool = False) -> tuple[list[Problem], list[str]]:
    """What the log states differently from the recipe (model, precision, layout, batch, sequence length, GPU type
    and count), and the overrides that would make the followable ones agree (``FOLLOWED``). ``followed``: the recipe
    was already reloaded with the log's values (``--follow-log``), so a difference left is not one it can follow."""
    problems, overrides = crossing(recipe, log), []
    for name, where in CHECKED_ARGS:
        ran, projected = _ran(log, name), _spec_value(recipe, name, where)
        if name == "virtual_pipeline_model_parallel_size" and ran in (None, 1) and projected in (None, 1):
            continue
        if ran is None or ran == projected:
            continue
        if name not in FOLLOWED:
            fix = "calibrate with the recipe (and --nodes) the run used"
        elif followed:  # --follow-log gave the recipe this value and the recipe's rules replaced it
            fix = (f"--follow-log set {name}={ran} but the recipe resolves it to {projected}: give the recipe the "
                   "run used")
        else:
            fix = f"calibrate with the recipe the run used (e.g. {name}={ran}), or --follow-log"
        problems.append(Problem(path=name, value=projected, message=f"the run logged {name} = {ran}", fix=fix))
        if name in FOLLOWED:
            overrides.append(f"{name}={ran}")
    return problems, overrides


def logged_tokens(recipe: Recipe, log: TrainingLog) -> int:
    """Tokens per step the run trained: its own global batch and sequence length where the log states them (its
    dump or its iteration lines), the recipe's where it does not."""
    batch = _ran(log, "global_batch_size") or recipe.execution.global_batch_size
    return int(batch) * int(_ran(log, "seq_length") or recipe.execution.seq_length)


def _memory_side(log: TrainingLog, projection: Projection) -> tuple[float | None, float | None, int | None]:
    """Measured peak of the reporting rank with the highest max reserved, and its stage's projected peak. The log's
    max reserved is torch's allocator only: the stage's device bytes outside it (``other.outside_allocator``: runtime,
    collective buffers) are added, so both sides are the device's total."""
    reports = [m for m in log.memory if m.max_reserved_mb is not None]
    if not reports or projection.memory is None:
        return None, None, None
    top = max(reports, key=lambda m: m.max_reserved_mb)
    ex = projection.execution
    stages = projection.memory.stages
    per_stage = max(1, projection.system.world_size // max(1, ex.pipeline_model_parallel_size))
    stage = min(top.rank // per_stage, len(stages) - 1) if top.rank is not None else None
    shown = stages[stage] if stage is not None else projection.memory.peak_stage
    projected = shown.total_bytes if stage is not None else projection.memory.peak_bytes
    outside = shown.detail.get("other.outside_allocator", 0.0)
    return top.max_reserved_mb * 2**20 + outside, float(projected), top.rank


def compare_log(recipe: Recipe, log: TrainingLog, costs: Costs = None, *, path: str = "",
                followed: Sequence[str] = ()) -> LogComparison:
    """Project the configuration ``log`` ran and put the two side by side. ``followed``: the overrides taken from
    the log to load ``recipe`` (the caller reloads it; ``mismatches`` gives them)."""
    from primus_ext.projection import project

    problems, _ = mismatches(recipe, log, followed=bool(followed))
    notes: list[str] = ["projected with the log's " + ", ".join(followed)] if followed else []
    projection = project(recipe.model, recipe.execution, recipe.system, costs)
    stats = log.stats
    measured_tokens = log.tokens_per_s_per_gpu or logged_tokens(recipe, log) / stats.median_s / (
        _ran(log, "world_size") or recipe.system.world_size)
    measured_tflops = log.tflops_per_gpu
    if measured_tflops is None:  # the projection's FLOP count over the measured step: like with like
        measured_tflops = projection.model_flops_per_step / stats.median_s / recipe.system.world_size / 1e12
        notes.append("measured TFLOP/s/GPU: the projection's model FLOPs over the measured step (the log prints none)")
    measured_peak, projected_peak, rank = _memory_side(log, projection)
    measured = RunFigures(step_s=stats.median_s, tokens_per_s_per_gpu=measured_tokens, tflops_per_gpu=measured_tflops,
                          peak_bytes=measured_peak, spread=stats.spread, iterations=stats.n)
    projected = RunFigures(step_s=projection.step_time_s, tokens_per_s_per_gpu=projection.tokens_per_s_per_gpu,
                           tflops_per_gpu=projection.model_tflops_per_gpu, peak_bytes=projected_peak)
    if stats.averaged:
        notes.append("the log's step time averages its logging interval including warm-up: an upper bound")
    missing = unstated(log)
    if missing:
        notes.append(f"the log does not state its {', '.join(missing)}: assumed the recipe's")
    return LogComparison(path=path, log=log, projection=projection, measured=measured, projected=projected,
                         mismatches=tuple(problems), overrides=tuple(followed), memory_rank=rank,
                         notes=tuple(notes))


def fit_record(comparisons: Sequence[LogComparison], *, cluster: str = "", force: bool = False) -> CalibrationRecord:
    """The calibration record of these runs (one workload: the first run's; the others must share its model,
    precision and GPU type). Raises ``CorrectionError`` when no physical correction fits, or one outside the
    plausible range (``correction.PLAUSIBLE_KERNEL_FACTOR``) unless ``force`` (then said in its notes)."""
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
    implausible = implausible_factor(correction)
    if implausible and not force:
        raise CorrectionError(f"{implausible}; --force stores it anyway")
    if implausible:
        notes.append(f"stored with --force: {implausible}")
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
