"""The correction a measured run makes to the projection: a kernel-efficiency factor and a fixed step overhead.

A projected step splits into what the GPU's kernels set and what the links set::

    step = kernels + links        kernels = compute + bubble + optimizer     links = exposed communication

A real run on the user's cluster (their container, kernels, clocks) measures ``m``. The correction keeps that
split physical::

    step' = k * kernels + links + c

``k`` (the *kernel factor*) says the kernels ran ``1/k`` as efficiently as the profile projects (k > 1: slower);
``c`` (the *step overhead*, seconds) is time per step outside the model (data loading, logging, the Python
loop, garbage collection). One run cannot separate ``k`` from ``c``: ``c = 0`` and ``k`` takes it all. Runs of
the same model at different step sizes (micro-batches, batch, layout) fit both (least squares on relative
error, ``c >= 0``). When the projected links alone exceed the measured step, the links are mispriced too and
the whole step is scaled (``scope="step"``: ``step' = k * step``).

Bounds (beyond them the run and the projection disagree about more than efficiency: refused, not stored):
``k`` in [``K_MIN``, ``K_MAX``], and the calibrated step's MFU must stay at or below 100 %. Inside them, a factor
outside ``PLAUSIBLE_KERNEL_FACTOR`` is stored only when the user insists (``calibrate --force``).

Memory gets its own factor: the measured peak (``max reserved`` + the stage's ``other.outside_allocator``) over the
projected peak of the same rank.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

K_MIN = 0.2
"""Kernels at most 5x more efficient than projected: the profiles' efficiencies are >= 0.15 of peak for every
kernel class (``validate/efficiency_fit.py`` bounds), so a 5x gain would exceed the peak; below this, the recipe
and the run differ."""
K_MAX = 20.0
"""Kernels at most 20x slower than projected: a GEMM at 1/20 of its projected ~0.6-0.8 of peak runs at ~3-4 %
of peak, below what any tuned BLAS reaches at training sizes; beyond this the run is not what was projected
(other model, debug build, throttled GPU)."""
PLAUSIBLE_KERNEL_FACTOR = (1 / 3, 3.0)
"""Kernel factors a stored record may carry without ``--force``: the shipped profiles project the 136 published runs
of the development set (``shared/validation``, ``primus-ext validate``) at measured / projected step 0.64-1.80
in-sample and at most 1.91 held out (``validate --cv``); the real Primus MI355X log, an AMD GPU on NVIDIA-pooled
efficiencies, needs ~2.0. A factor beyond 3 (or below 1/3) is half as far again past all of them: the log is not
the recipe's workload (another model, precision or batch), the run was broken (throttled clocks, a debug build,
a shared GPU), or its cost is one the projection does not model (e.g. the DeepSeek-V2-Lite MI355X log's Turbo DeepEP:
x4.98); stored, it would move every later projection of the model, so only ``--force`` stores it (said in the
record's notes)."""
MEMORY_FACTOR_RANGE = (0.5, 3.0)
"""Measured / projected peak memory accepted as an allocator correction: below 0.5 the model counts tensors the
run did not hold; above 3 (PyTorch's caching allocator reserves up to ~1.3-2x what is allocated under
fragmentation, plus workspaces: PyTorch docs "CUDA memory management") the run held something the model does
not know about. Outside it the memory correction is refused with the figures."""

Scope = Literal["kernels", "step"]


@dataclass(frozen=True, kw_only=True)
class StepParts:
    """A projected step split into the part kernels set and the part links set (seconds)."""

    kernels_s: float
    links_s: float
    mfu: float = 0.0
    """The projected MFU (fraction), to check the corrected one."""

    @property
    def step_s(self) -> float:
        return self.kernels_s + self.links_s


@dataclass(frozen=True, kw_only=True)
class Correction:
    kernel_factor: float
    overhead_s: float = 0.0
    scope: Scope = "kernels"
    spread: float = 0.0
    """Relative spread of the corrected step (the measured steps' spread and the fit's residuals, whichever is
    larger): the band of an exactly matching workload is step' x (1 +- spread)."""
    memory_factor: float | None = None
    runs: int = 1

    def step(self, parts: StepParts) -> float:
        if self.scope == "step":
            return self.kernel_factor * parts.step_s + self.overhead_s
        return self.kernel_factor * parts.kernels_s + parts.links_s + self.overhead_s

    def to_dict(self) -> dict[str, Any]:
        return {"kernel_factor": self.kernel_factor, "overhead_s": self.overhead_s, "scope": self.scope,
                "spread": self.spread, "memory_factor": self.memory_factor, "runs": self.runs}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Correction:
        memory = data.get("memory_factor")
        out = cls(kernel_factor=float(data["kernel_factor"]), overhead_s=float(data.get("overhead_s", 0.0)),
                  scope="step" if data.get("scope") == "step" else "kernels", spread=float(data.get("spread", 0.0)),
                  memory_factor=None if memory is None else float(memory), runs=int(data.get("runs", 1)))
        numbers = (out.kernel_factor, out.overhead_s, out.spread, out.memory_factor or 1.0)
        if not all(math.isfinite(x) for x in numbers) or out.kernel_factor <= 0 or out.overhead_s < 0:
            raise ValueError(f"not a physical correction: {data!r}")
        return out


class CorrectionError(ValueError):
    """The measured runs and the projection disagree beyond what an efficiency correction can explain."""


class RecordKept(CorrectionError):
    """The store holds a better-evidenced record of the same workload: the new one is not stored."""


def fit_correction(parts: Sequence[StepParts], measured_s: Sequence[float],
                   spreads: Sequence[float] = ()) -> Correction:
    """The correction that best maps projected ``parts`` onto ``measured_s`` (one entry per run)."""
    if not parts or len(parts) != len(measured_s):
        raise ValueError("one projected step per measured run")
    if any(not (math.isfinite(m) and m > 0) for m in measured_s):
        raise CorrectionError(f"measured step times must be positive: {list(measured_s)}")
    scope: Scope = "kernels"
    if any(p.links_s >= m for p, m in zip(parts, measured_s, strict=True)):
        scope = "step"  # the links alone are slower than the run: they are mispriced as well
    a = [p.step_s if scope == "step" else p.kernels_s for p in parts]
    b = [0.0 if scope == "step" else p.links_s for p in parts]
    k, c, residual = _least_squares(a, b, list(measured_s))
    spread = max([residual, *[s for s in spreads if math.isfinite(s)]], default=0.0)
    correction = Correction(kernel_factor=k, overhead_s=c, scope=scope, spread=spread, runs=len(parts))
    _check_physical(correction, parts, measured_s)
    return correction


def _least_squares(a: list[float], b: list[float], m: list[float]) -> tuple[float, float, float]:
    """min sum(((k a + b + c) - m) / m)^2 over k > 0, c >= 0; c = 0 unless the kernel parts differ enough (>= 10 %)
    across runs to tell a fixed overhead from a factor. Returns k, c and the rms relative residual."""
    import numpy as np
    from scipy.optimize import lsq_linear

    av, bv, mv = (np.asarray(x, dtype=float) for x in (a, b, m))
    if min(av) <= 0:
        raise CorrectionError("a projected step with no kernel time cannot be corrected by a kernel factor")
    separable = len(a) >= 2 and max(av) / min(av) >= 1.10
    if separable:
        design = np.column_stack([av / mv, 1.0 / mv])
        fit = lsq_linear(design, 1.0 - bv / mv, bounds=([1e-9, 0.0], [np.inf, np.inf]))
        k, c = float(fit.x[0]), float(fit.x[1])
        c = c if c > 1e-6 * float(np.mean(mv)) else 0.0  # the bound reached, up to the solver's tolerance
    else:  # weighted mean of the per-run factors (relative error: each run counts the same)
        ratios = (mv - bv) / av
        k, c = float(np.mean(ratios)), 0.0
    predicted = k * av + bv + c
    residual = float(np.sqrt(np.mean(((predicted - mv) / mv) ** 2)))
    return k, c, residual


def _check_physical(correction: Correction, parts: Sequence[StepParts], measured_s: Sequence[float]) -> None:
    k = correction.kernel_factor
    figures = ", ".join(f"measured {m * 1e3:.1f} ms vs projected {p.step_s * 1e3:.1f} ms"
                        for p, m in zip(parts, measured_s, strict=True))
    if not K_MIN <= k <= K_MAX:
        raise CorrectionError(
            f"{figures}: that needs the kernels {k:.3g}x {'slower' if k > 1 else 'faster'} than projected, outside "
            f"the physical range [{K_MIN}, {K_MAX}]; the run is not the projected configuration (check the recipe "
            "against the log's arguments: model size, layout, batch, precision, GPU count)")
    for p in parts:
        step = correction.step(p)
        mfu = p.mfu * p.step_s / step
        if mfu > 1.0:
            raise CorrectionError(f"{figures}: the corrected step would run at {mfu:.0%} MFU (above the GPU's peak); "
                                  "the recipe projects less work than the run did")


def implausible_factor(correction: Correction) -> str:
    """Why ``correction``'s kernel factor is outside ``PLAUSIBLE_KERNEL_FACTOR`` (empty when inside)."""
    low, high = PLAUSIBLE_KERNEL_FACTOR
    k = correction.kernel_factor
    if low <= k <= high:
        return ""
    return (f"kernel factor x{k:.3g} is outside the plausible range [x{low:.2f}, x{high:.0f}]: the shipped profiles "
            "miss every published run of the development set by less than x2, so a run this far off is another "
            "workload than the recipe (model, precision, batch), a broken run (throttled, debug build, shared GPU) "
            "or one whose cost the projection does not model (the recipe's warnings name such keys); stored, it "
            "would move every later projection of this model")


def memory_factor(measured_bytes: float, projected_bytes: float) -> tuple[float | None, str]:
    """Measured / projected peak when it is an allocator correction, else ``None`` and why."""
    if not (measured_bytes > 0 and projected_bytes > 0):
        return None, "no measured or projected peak"
    factor = measured_bytes / projected_bytes
    low, high = MEMORY_FACTOR_RANGE
    if not low <= factor <= high:
        return None, (f"measured peak {measured_bytes / 2**30:.1f} GiB vs projected {projected_bytes / 2**30:.1f} GiB "
                      f"(x{factor:.2f}) is outside [{low}, {high}]: not an allocator correction; memory left "
                      "uncalibrated")
    return factor, ""
