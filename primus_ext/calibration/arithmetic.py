"""The calibration arithmetic, once: a correction applied to a step's named parts (pure, no I/O).

    fixed = correct(correction, step_s, {"compute_s": 1.2, "bubble_s": 0.1, "exposed_tp_s": 0.05, ...})
    fixed.step_s, fixed.ratio, fixed.parts["compute_s"]      # corrected step, old / new step, corrected parts
    corrected_step_floor(correction, floor_s)                 # a lower bound stays a lower bound

Every consumer goes through here: ``apply_record`` (a ``Projection``: ``project``, ``compare``, ``train
--projection-only``), the tuner's oracle (a ``Score``, one configuration or a batch) and its branch-and-bound floor.
The parts are named as ``tune.oracle.Score.breakdown`` and ``projection.evaluate_batch.PARTS`` name them:
``compute_s`` (``overhead_s`` and ``recompute_s`` are inside it), ``bubble_s``, ``optimizer_s``, and per
communication kind ``exposed_<kind>_s`` / ``total_<kind>_s``. The split into what kernels set and what links set,
and the step it gives, are ``correction.Correction.step`` (the module docstring there says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from primus_ext.calibration.correction import Correction, StepParts

SCALED_BY_KERNELS = ("bubble_s", "optimizer_s", "recompute_s", "overhead_s")
"""Parts scaled by the kernel factor (``compute_s`` also gets the fixed overhead; ``overhead_s`` lies inside it and
gets it too)."""


@dataclass(frozen=True, kw_only=True)
class Corrected:
    """A step after a correction."""

    step_s: float
    ratio: float
    """Uncorrected step / corrected step: throughput, TFLOP/s and MFU scale by it."""
    parts: dict[str, float]
    """The parts, corrected (names not listed above unchanged)."""


def step_parts(parts: Mapping[str, float], mfu: float = 0.0) -> StepParts:
    """The kernels / links split of named parts."""
    kernels = parts.get("compute_s", 0.0) + parts.get("bubble_s", 0.0) + parts.get("optimizer_s", 0.0)
    links = sum(v for name, v in parts.items() if name.startswith("exposed_"))
    return StepParts(kernels_s=kernels, links_s=links, mfu=mfu)


def _scaled(name: str, value: float, c: Correction) -> float:
    if name == "compute_s" or name == "overhead_s":
        return value * c.kernel_factor + c.overhead_s
    if name in SCALED_BY_KERNELS or (c.scope == "step" and name.startswith(("exposed_", "total_"))):
        return value * c.kernel_factor
    return value


def correct(correction: Correction, step_s: float, parts: Mapping[str, float]) -> Corrected:
    """``parts`` of a step of ``step_s`` seconds corrected: ``step' = k * kernels + links + c`` (or ``k * step + c``
    with ``scope == "step"``); kernel parts x k, the overhead added to ``compute_s`` (and ``overhead_s``, which it
    contains); the communication parts x k only when the whole step is scaled."""
    step = correction.step(step_parts(parts))
    return Corrected(step_s=step, ratio=step_s / step,
                     parts={name: _scaled(name, value, correction) for name, value in parts.items()})


def corrected_peak(peak_bytes: float, memory_factor: float | None) -> float:
    """Peak memory x the measured / projected factor (as it is when memory is uncalibrated)."""
    return peak_bytes if memory_factor is None else peak_bytes * memory_factor


def corrected_step_floor(correction: Correction, floor_s: float) -> float:
    """A lower bound of the corrected step from one of the uncorrected step: every part is scaled by k or kept, so
    the step is at least min(k, 1) x the floor, plus the fixed overhead."""
    return floor_s * min(1.0, correction.kernel_factor) + correction.overhead_s


__all__ = ["Corrected", "correct", "corrected_peak", "corrected_step_floor", "step_parts"]
