"""Memory pre-filter: reject configurations the memory model says do not fit, before the oracle.

``margin`` is the user's safety margin (a fraction of HBM kept free, ``--margin 0.05``), passed to
``primus_ext.model.memory.fits``. The functions are injectable so tests can substitute a fake memory
model; by default they are the real ones, imported on first use.

    prefilter = MemoryFilter(model, system, margin=0.05)
    prefilter.fits(execution)           # fast bool (the exhaustive search calls this per config)
    prefilter.verdict(execution)        # peak / capacity / headroom, for reports and the LLM
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

if TYPE_CHECKING:
    from primus_ext.model.memory import Memory

FitsFn = Callable[..., bool]
EstimateFn = Callable[..., Any]


@dataclass(frozen=True, kw_only=True)
class MemoryVerdict:
    """The memory model's answer for one configuration."""

    fits: bool
    peak_bytes: int
    capacity_bytes: int
    worst_stage: int | None = None
    """Pipeline rank with the peak (when the memory model reports stages)."""

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.peak_bytes


def verdict_of(memory: Memory, *, fits: bool | None = None) -> MemoryVerdict:
    """A ``Memory`` result (``.fits``, ``.peak_bytes``, ``.capacity_bytes``, ``.stages``) -> verdict."""
    stages = getattr(memory, "stages", None) or ()
    worst = None
    if stages:
        peaks = [getattr(s, "peak_bytes", 0) for s in stages]
        worst = max(range(len(peaks)), key=peaks.__getitem__)
    return MemoryVerdict(fits=bool(memory.fits if fits is None else fits), peak_bytes=int(memory.peak_bytes),
                         capacity_bytes=int(memory.capacity_bytes), worst_stage=worst)


class MemoryFilter:
    """Fits / verdict for one model on one system with a safety margin."""

    def __init__(self, model: ModelSpec, system: SystemSpec, *, margin: float = 0.0,
                 fits_fn: FitsFn | None = None, estimate_fn: EstimateFn | None = None,
                 peak_fn: Callable[..., float] | None = None,
                 capacity_fn: Callable[[SystemSpec], float] | None = None,
                 memory_factor: Callable[[ExecutionSpec], float] | None = None) -> None:
        """``memory_factor``: measured / projected peak of a calibration record that applies to an execution (1
        where none does): the pre-filter then judges the corrected peak (``primus_ext.calibration``)."""
        if fits_fn is None or estimate_fn is None:
            from primus_ext.model import memory

            fits_fn = fits_fn or memory.fits
            estimate_fn = estimate_fn or memory.estimate_memory
            peak_fn = peak_fn or memory.peak_bytes
            capacity_fn = capacity_fn or memory.capacity_bytes
        self.model, self.system, self.margin = model, system, margin
        self._fits, self._estimate, self._peak = fits_fn, estimate_fn, peak_fn
        self._capacity = capacity_fn
        self._factor = memory_factor

    def fits(self, execution: ExecutionSpec) -> bool:
        factor = self._factor(execution) if self._factor is not None else 1.0
        if factor == 1.0:
            return bool(self._fits(self.model, execution, self.system, margin=self.margin))
        return self.peak(execution) <= self.capacity_bytes * (1.0 - self.margin)

    @property
    def capacity_bytes(self) -> int:
        """Allocatable bytes per GPU, as the memory model counts them (before the margin)."""
        return int(self._capacity(self.system) if self._capacity is not None else self.system.gpu.hbm_bytes)

    def peak(self, execution: ExecutionSpec) -> int:
        """Peak per-GPU bytes (the fast path when the memory model has one)."""
        factor = self._factor(execution) if self._factor is not None else 1.0
        if self._peak is not None:
            return int(self._peak(self.model, execution, self.system) * factor)
        return int(self._estimate(self.model, execution, self.system).peak_bytes * factor)

    def verdict(self, execution: ExecutionSpec) -> MemoryVerdict:
        memory = self._estimate(self.model, execution, self.system)
        factor = self._factor(execution) if self._factor is not None else 1.0
        if factor != 1.0:
            from primus_ext.calibration import calibrated_memory

            memory = calibrated_memory(memory, factor)
        return verdict_of(memory, fits=self.fits(execution))
