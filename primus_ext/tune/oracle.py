"""The oracle: an execution -> a ``Score`` (tok/s/GPU, step time, MFU, breakdown, memory).

The tuner reads fields, never text. ``projection_oracle`` wraps the projection
(``primus_ext.projection.evaluate``, fast and pure) over a cost provider (the analytic roofline or the
timing store); tests pass any ``Callable[[ExecutionSpec], Score]`` instead.

    oracle = projection_oracle(model, system, costs)
    score = oracle(execution)
    score.tokens_per_s_per_gpu, score.breakdown["bubble_s"], score.exposed()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from primus_ext.calibration.arithmetic import correct, corrected_peak, corrected_step_floor
from primus_ext.errors import PrimusExtError
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

if TYPE_CHECKING:
    from primus_ext.calibration import CalibrationRecord, Correction
    from primus_ext.calibration.workload import Match
    from primus_ext.projection.evaluate import Costs
    from primus_ext.projection.evaluate_batch import BatchProjection
    from primus_ext.projection.result import Projection

Oracle = Callable[[ExecutionSpec], "Score"]


@dataclass(frozen=True, kw_only=True)
class Score:
    """What the search ranks on, and what it explains to the LLM."""

    tokens_per_s_per_gpu: float
    step_time_s: float
    mfu: float = 0.0
    breakdown: Mapping[str, float] = field(default_factory=dict)
    """Seconds per step: ``compute_s``, ``bubble_s``, ``optimizer_s``, ``recompute_s`` and
    ``exposed_<kind>_s`` for each communication kind (tp, cp, ep, fsdp, pp, dp_grad, dp_param)."""
    peak_bytes: int | None = None
    capacity_bytes: int | None = None
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def headroom_bytes(self) -> int | None:
        if self.peak_bytes is None or self.capacity_bytes is None:
            return None
        return self.capacity_bytes - self.peak_bytes

    def exposed(self) -> dict[str, float]:
        """Exposed communication per kind (seconds per step), largest first, zeros dropped."""
        items = {k[8:-2]: v for k, v in self.breakdown.items() if k.startswith("exposed_") and v > 0}
        return dict(sorted(items.items(), key=lambda kv: -kv[1]))

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "step_time_s": self.step_time_s, "mfu": self.mfu,
            "breakdown": dict(self.breakdown), "peak_bytes": self.peak_bytes, "capacity_bytes": self.capacity_bytes,
            "sources": dict(self.sources),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Score:
        return cls(
            tokens_per_s_per_gpu=float(data["tokens_per_s_per_gpu"]), step_time_s=float(data["step_time_s"]),
            mfu=float(data.get("mfu", 0.0)), breakdown=dict(data.get("breakdown") or {}),
            peak_bytes=data.get("peak_bytes"), capacity_bytes=data.get("capacity_bytes"),
            sources=dict(data.get("sources") or {}),
        )


def score_of(projection: Projection) -> Score:
    """A ``primus_ext.projection.Projection`` -> ``Score``."""
    b = projection.breakdown
    breakdown = {"compute_s": b.compute_s, "bubble_s": b.bubble_s, "optimizer_s": b.optimizer_s,
                 "recompute_s": b.recompute_s}
    for comm in b.comms:
        breakdown[f"exposed_{comm.kind}_s"] = comm.exposed_s
        breakdown[f"total_{comm.kind}_s"] = comm.total_s
    memory = projection.memory
    return Score(
        tokens_per_s_per_gpu=projection.tokens_per_s_per_gpu, step_time_s=projection.step_time_s,
        mfu=projection.mfu, breakdown=breakdown,
        peak_bytes=int(memory.peak_bytes) if memory is not None else None,
        capacity_bytes=int(memory.capacity_bytes) if memory is not None else None,
        sources=dict(projection.sources),
    )


def batch_scores(batch: BatchProjection) -> list[Score | PrimusExtError]:
    """A ``projection.evaluate_batch.BatchProjection`` -> per configuration its ``Score`` (the numbers
    ``score_of`` gives for ``evaluate``'s projection) or the error that stopped its projection."""
    out: list[Score | PrimusExtError] = []
    for i, problem in enumerate(batch.problems):
        if problem is not None:
            out.append(problem)
            continue
        breakdown = batch.breakdown(i)
        del breakdown["overhead_s"]  # part of compute_s; score_of does not list it either
        out.append(Score(tokens_per_s_per_gpu=float(batch.tokens_per_s_per_gpu[i]),
                         step_time_s=float(batch.step_time_s[i]), mfu=float(batch.mfu[i]), breakdown=breakdown,
                         sources=dict(batch.sources[i])))
    return out


@dataclass(frozen=True, kw_only=True, eq=False)
class ProjectionOracle:
    """The projection as the oracle (``costs``: a ``CostProvider``): ``oracle(execution)`` projects one
    configuration, ``oracle.many(executions)`` a batch through ``evaluate_many`` (same numbers)."""

    model: ModelSpec
    system: SystemSpec
    costs: Costs = None
    calibrations: tuple[CalibrationRecord, ...] = ()
    """Records from real runs of this model on this GPU type (``primus_ext.calibration``): each score is corrected
    by the one that applies to its execution (exact, else the nearest), when it priced its layers the same way."""

    def __call__(self, execution: ExecutionSpec) -> Score:
        from primus_ext.projection import evaluate

        return self._calibrated(execution, score_of(evaluate(self.model, execution, self.system, self.costs)))

    def many(self, executions: Sequence[ExecutionSpec]) -> list[Score | PrimusExtError]:
        from primus_ext.projection.evaluate_batch import evaluate_many

        scores = batch_scores(evaluate_many(self.model, executions, self.system, self.costs))
        return [s if isinstance(s, PrimusExtError) else self._calibrated(e, s)
                for e, s in zip(executions, scores, strict=True)]

    def step_floor(self, execution: ExecutionSpec, *, compute_only: bool = False) -> float:
        """Seconds no score of ``execution`` goes below (``projection.evaluate.step_floor``; ``compute_only``: its
        busiest rank's compute, ``evaluate.compute_floor``, the same for every sharding and overlap flag),
        calibrated as the scores are (``calibration.arithmetic.corrected_step_floor``); raises as ``__call__``."""
        from primus_ext.projection.evaluate import compute_floor, step_floor

        floor, sources = (compute_floor if compute_only else step_floor)(self.model, execution, self.system,
                                                                           self.costs)
        found = self._record(execution, sources)
        return floor if found is None else corrected_step_floor(found[0].correction, floor)

    def _record(self, execution: ExecutionSpec, sources: Mapping[str, str]) -> tuple[CalibrationRecord, Match] | None:
        """The record that corrects a score of ``execution`` whose layers came from ``sources`` (exact, else the
        nearest; only one that priced its layers the same way)."""
        if not self.calibrations:
            return None
        from primus_ext.calibration import find_record
        from primus_ext.calibration.record import costs_of

        costs = costs_of(dict(sources))
        return find_record([r for r in self.calibrations if r.costs == costs], self.model, execution, self.system)

    def band(self, execution: ExecutionSpec) -> tuple[float, float] | None:
        """The band of ``execution``'s score as factors of its throughput: the calibration record's that applies
        (``calibration.apply.band_factors``: the band ``project`` prints), else the projection's sensitivity band
        (every efficiency +-``EFFICIENCY_RANGE``, widened by the measurement spread); None when it cannot be projected.
        The tuner's ties (``tune.run``)."""
        from primus_ext.projection import project

        try:
            p = project(self.model, execution, self.system, self.costs, memory=False)
        except PrimusExtError:
            return None
        found = self._record(execution, p.sources)
        if found is not None:
            from primus_ext.calibration.apply import band_factors

            return band_factors(*found)
        if p.band is None or p.tokens_per_s_per_gpu <= 0:
            return None
        return p.band[0] / p.tokens_per_s_per_gpu, p.band[1] / p.tokens_per_s_per_gpu

    def _calibrated(self, execution: ExecutionSpec, score: Score) -> Score:
        found = self._record(execution, score.sources)
        return score if found is None else calibrated_score(score, found[0].correction)


def calibrated_score(score: Score, correction: Correction) -> Score:
    """``score`` corrected (``calibration.arithmetic.correct``, the arithmetic every consumer uses)."""
    fixed = correct(correction, score.step_time_s, score.breakdown)
    peak = score.peak_bytes
    if peak is not None and correction.memory_factor is not None:
        peak = int(corrected_peak(peak, correction.memory_factor))
    return replace(score, step_time_s=fixed.step_s, tokens_per_s_per_gpu=score.tokens_per_s_per_gpu * fixed.ratio,
                   mfu=score.mfu * fixed.ratio, breakdown=fixed.parts, peak_bytes=peak)


def projection_oracle(model: ModelSpec, system: SystemSpec, costs: Costs,
                      calibrations: Sequence[CalibrationRecord] = ()) -> ProjectionOracle:
    """The projection as the oracle (``costs``: a ``CostProvider``; ``calibrations``: records from real runs)."""
    return ProjectionOracle(model=model, system=system, costs=costs, calibrations=tuple(calibrations))
