"""Apply a stored calibration to a projection (``project``, ``compare``, ``train --projection-only``).

    records = load_records()                                  # the timing store's calibration records
    found = find_record(records, model, execution, system)    # (record, "exact" | "nearby") or None
    projection = apply_record(projection, *found)             # figures corrected, ``projection.calibration`` set

A record applies to its own workload with the band its runs measured, and to nearby configurations of the
same model (same precision, same GPU type) with that band widened by ``NEARBY_SPREAD``: the correction is a
property of the cluster's kernels and loop, which a different layout or batch changes only partly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from primus_ext.calibration.arithmetic import correct, corrected_peak, step_parts
from primus_ext.calibration.correction import StepParts
from primus_ext.calibration.record import CalibrationRecord
from primus_ext.calibration.workload import Match, Workload
from primus_ext.projection.result import Breakdown, CalibrationApplied, CommTime, Projection, StageTime
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

if TYPE_CHECKING:
    from primus_ext.model.memory import Memory
    from primus_ext.model.pipeline import Event

NEARBY_SPREAD = 0.15
"""Extra relative band of a nearby configuration: a correction taken from one run of a model on one GPU type and
applied to the model's other published configurations on that GPU type misses their measured step by a median of
7.1 % and a 75th percentile of 15.5 % (162 pairs in 19 groups of ``shared/validation``: ``python benchmarks/
calibration_transfer.py``); the band covers about three in four."""
MIN_BAND = 0.02
"""Smallest band of an exact match: two runs of one recipe differ by ~1-2 % step to step (clocks, data)."""


def parts_of(breakdown: Breakdown, mfu: float = 0.0) -> StepParts:
    """The part of a step its kernels set (compute incl. recompute and overhead, bubble, optimizer) and the part
    links set (exposed communication): ``arithmetic.step_parts``."""
    return step_parts(breakdown_parts(breakdown), mfu)


def find_record(records: Sequence[CalibrationRecord], model: ModelSpec, execution: ExecutionSpec,
                system: SystemSpec) -> tuple[CalibrationRecord, Match] | None:
    """The record that applies: the exact workload's, else the nearest nearby one (newest on a tie)."""
    target = Workload.of(model, execution, system)
    best: tuple[tuple[int, int, str], CalibrationRecord, Match] | None = None
    for record in records:
        match = record.workload.match(target)
        if match is None:
            continue
        rank = (0 if match == "exact" else 1, record.workload.distance(target), _negated(record.date))
        if best is None or rank < best[0]:
            best = (rank, record, match)
    return None if best is None else (best[1], best[2])


def _negated(date: str) -> str:
    """Sort key putting newer ISO dates first."""
    return "".join(chr(0x10FFFF - ord(ch)) for ch in date)


def band_of(record: CalibrationRecord, match: Match) -> float:
    """The band's relative width ``b`` (printed as +-b): the runs' spread, at least ``MIN_BAND``, wider nearby."""
    spread = max(record.correction.spread, MIN_BAND)
    return spread + (NEARBY_SPREAD if match == "nearby" else 0.0)


def band_factors(record: CalibrationRecord, match: Match) -> tuple[float, float]:
    """The band of a calibrated throughput as factors of it: ``1 / (1 + b)`` .. ``1 + b`` (``b = band_of``), symmetric
    in log (a run ``1 + b`` times slower is as likely as one ``1 + b`` times faster; ``1 - b`` would reach zero at
    ``b = 1``). The one band: ``project`` prints it (``apply_record``) and the tuner's ties use it
    (``tune.oracle.ProjectionOracle.band``)."""
    width = band_of(record, match)
    return 1 / (1 + width), 1 + width


def breakdown_parts(breakdown: Breakdown) -> dict[str, float]:
    """A breakdown as the named parts ``arithmetic.correct`` takes."""
    parts = {"compute_s": breakdown.compute_s, "bubble_s": breakdown.bubble_s, "optimizer_s": breakdown.optimizer_s,
             "recompute_s": breakdown.recompute_s, "overhead_s": breakdown.overhead_s}
    for x in breakdown.comms:
        parts[f"exposed_{x.kind}_s"], parts[f"total_{x.kind}_s"] = x.exposed_s, x.total_s
    return parts


def apply_record(projection: Projection, record: CalibrationRecord, match: Match, *,
                 store: str | None = None) -> Projection:
    """``projection`` with its step, throughput, MFU, breakdown and peak memory corrected by ``record`` (held in the
    timing store ``store``: named in the note, with how to list or forget it)."""
    c = record.correction
    b = projection.breakdown
    fixed = correct(c, projection.step_time_s, breakdown_parts(b))
    step, ratio, new = fixed.step_s, fixed.ratio, fixed.parts
    k = c.kernel_factor
    comms = tuple(CommTime(kind=x.kind, total_s=new[f"total_{x.kind}_s"], exposed_s=new[f"exposed_{x.kind}_s"],
                           group=x.group) for x in b.comms)
    breakdown = replace(b, compute_s=new["compute_s"], bubble_s=new["bubble_s"], optimizer_s=new["optimizer_s"],
                        overhead_s=new["overhead_s"], recompute_s=new["recompute_s"], comms=comms)
    band, (low, high) = band_of(record, match), band_factors(record, match)
    tokens = projection.tokens_per_s_per_gpu * ratio
    memory, peak_before = projection.memory, None
    if memory is not None:
        peak_before = memory.peak_bytes
        if c.memory_factor is not None:
            memory = calibrated_memory(memory, c.memory_factor)
    scale = timeline_scale(projection, step - breakdown.tail_s)
    applied = CalibrationApplied(match=match, kernel_factor=k, overhead_s=c.overhead_s, scope=c.scope,
                                 memory_factor=c.memory_factor, band=band, uncalibrated_step_s=projection.step_time_s,
                                 uncalibrated_peak_bytes=peak_before, record=record.describe(), logs=record.logs,
                                 date=record.date, store=store, timeline_scale=scale)
    note = (f"calibrated ({match}) from {record.describe()}: kernels x{k:.3f}"
            + (f" + {c.overhead_s * 1e3:.1f} ms/step" if c.overhead_s else "")
            + (" (whole step)" if c.scope == "step" else "") + f", band +-{band:.0%}; per-stage times and the "
            f"timeline: the simulated schedule x{scale:.3f} (its calibrated makespan). Stored record: "
            f"{record.source()}"
            + (f" in {store}" if store else "") + " (primus-ext calibrate --list to see it, --forget RECIPE to undo "
            "it, --uncalibrated to ignore it)")
    stages, timeline = scaled_schedule(projection, scale)
    return replace(projection, step_time_s=step, tokens_per_s_per_gpu=tokens,
                   model_tflops_per_gpu=projection.model_tflops_per_gpu * ratio, mfu=projection.mfu * ratio,
                   breakdown=breakdown, memory=memory, band=(tokens * low, tokens * high),
                   notes=(*projection.notes, note), calibration=applied, stages=stages, timeline=timeline)


def makespan_of(projection: Projection) -> float:
    """The simulated schedule's end: the last stage's finish (or timeline op's end), before the step's tail."""
    ends = [s.finish_s for s in projection.stages] + [e.end for e in projection.timeline]
    return max(ends, default=0.0)


def timeline_scale(projection: Projection, makespan_s: float) -> float:
    """The factor taking ``projection``'s simulated makespan to ``makespan_s`` (the calibrated step less its tail):
    the stages and the timeline, scaled by it, end where the calibrated tail begins (1 without a schedule)."""
    before = makespan_of(projection)
    return makespan_s / before if before > 0 and makespan_s > 0 else 1.0


def scaled_schedule(projection: Projection, scale: float) -> tuple[tuple[StageTime, ...], tuple[Event, ...]]:
    """The per-stage times and the timeline's ops x ``scale`` (one factor: the ops keep their order and their
    dependencies across stages; the per-kind split within them stays the breakdown's)."""
    stages = tuple(replace(s, fwd_s=tuple(t * scale for t in s.fwd_s), bwd_s=tuple(t * scale for t in s.bwd_s),
                           busy_s=s.busy_s * scale, finish_s=s.finish_s * scale) for s in projection.stages)
    timeline = tuple(replace(e, start=e.start * scale, end=e.end * scale) for e in projection.timeline)
    return stages, timeline


def calibrated_memory(memory: Memory, factor: float) -> Memory:
    """The memory verdict with the peak, and every stage's parts with it, scaled by the measured / projected factor
    (so the stage table's and the HTML's per-stage peaks agree with the peak)."""
    peak = corrected_peak(memory.peak_bytes, factor)
    usable = memory.capacity_bytes * (1.0 - memory.margin)
    stages = tuple(replace(st, **{f: getattr(st, f) * factor for f in STAGE_BYTES},
                           detail={k: v * factor for k, v in st.detail.items()}) for st in memory.stages)
    return replace(memory, peak_bytes=peak, fits=peak <= usable, headroom_bytes=usable - peak, stages=stages,
                   source=f"{memory.source}, x{factor:.3f} measured/projected peak")


STAGE_BYTES = ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "other_bytes", "total_bytes")
"""The per-stage byte counts a memory factor scales (``model.memory.rank.StageMemory``)."""


def apply_stored(projection: Projection, store_path: str | None = None, *,
                 records: Sequence[CalibrationRecord] | None = None) -> Projection:
    """``projection`` corrected by the store's record for its workload (exact, else nearby), or as it is.
    ``records``: the store's records of this model on this GPU type, when the caller read them already."""
    from primus_ext.calibration.record import costs_of, load_records
    from primus_ext.measure.store import default_store_path

    if records is None:
        target = Workload.of(projection.model, projection.execution, projection.system)
        records = load_records(store_path, model=target.model, gpu=target.gpu)
    costs = costs_of(dict(projection.sources))
    usable = [r for r in records if r.costs == costs]
    found = find_record(usable, projection.model, projection.execution, projection.system)
    if found is None:
        other = find_record(records, projection.model, projection.execution, projection.system)
        if other is None:
            return projection
        note = (f"a calibration record of {other[0].describe()} exists but corrects {other[0].costs} layer costs and "
                f"this projection uses {costs} ones: not applied (calibrate again with the same --compute)")
        return replace(projection, notes=(*projection.notes, note))
    return apply_record(projection, *found, store=str(store_path or default_store_path()))
