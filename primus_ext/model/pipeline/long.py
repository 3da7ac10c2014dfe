"""Long steps in closed form: any micro-batch count at the cost of four short ones.

    >>> from primus_ext.model.pipeline.long import reference_counts, extend
    >>> m0, period = reference_counts(10**9, pp=8, vpp=1, group=8)
    >>> result = extend([simulate(..., m0 + i * period) for i in range(4)], 10**9, m0, period)

A fixed pipeline order (1F1B, interleaved, ZB-H1 chosen greedily on fixed op times) is a max-plus linear
system whose op times do not depend on the micro-batch. Once the steady state is reached, ``period`` more
micro-batches (a whole number of the schedule's periods, ``pipeline.periodic``) move every rank's last
finish, its busy time and the send/recv seconds on the critical path by the same constants. So a step of
``m`` micro-batches above ``MAX_SIMULATED_MICROBATCHES`` is priced from four simulated counts m0 + i *
``period`` (m0 = m modulo ``period``, past the warm-up transient): the three increments must agree (else
``period`` doubles, up to four times, before the step is refused), and the result is the first one moved
by ``(m - m0) / period`` increments. Time and memory are O(1) in ``m``; the result equals the op-by-op
simulation up to float rounding (tests/model/test_pipeline_long.py checks it at counts both can run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from primus_ext.model.pipeline.ops import ScheduleResult

MAX_SIMULATED_MICROBATCHES = 4096
"""Micro-batches simulated op by op at most (the longest shipped or published step has ~2 000: a 16 M-token
global batch of 8 k sequences at MBS 1 on one DP rank); above it the step is extended in closed form."""

LINEAR_TOLERANCE = 1e-9
"""Relative agreement the increments need (float sums of ~1e5 op times round at ~1e-12)."""

_DOUBLINGS = 4


def reference_counts(m: int, pp: int, vpp: int, group: int, period_scale: int = 1) -> tuple[int, int]:
    """(m0, period): the first simulated count, congruent to ``m`` modulo ``period``, and the period in
    micro-batches: PP periods of the schedule's micro-batch group (1F1B's slow wave takes up to PP periods
    to settle, ``pipeline.periodic``), past a warm-up transient of 4 * PP groups."""
    g = group if vpp > 1 else 1
    period = g * pp * period_scale
    base = 4 * pp * g + 2 * g
    return base + (m - base) % period, period


def _agree(a: float, b: float, scale: float) -> bool:
    return abs(a - b) <= LINEAR_TOLERANCE * max(1.0, abs(scale))


def extend(results: Sequence[ScheduleResult], m: int, m0: int, period: int) -> ScheduleResult | None:
    """The step of ``m`` micro-batches from ``results`` at m0, m0 + period, m0 + 2 * period, m0 + 3 * period;
    ``None`` when their increments disagree (no steady state at this period)."""
    r0, r1, r2, r3 = results
    k = (m - m0) // period
    rows = [(r0.finish, r1.finish, r2.finish, r3.finish), (r0.busy, r1.busy, r2.busy, r3.busy),
            ((r0.critical_p2p,), (r1.critical_p2p,), (r2.critical_p2p,), (r3.critical_p2p,))]
    moved: list[tuple[float, ...]] = []
    for a, b, c, d in rows:
        out = []
        for x0, x1, x2, x3 in zip(a, b, c, d, strict=True):
            step = x1 - x0
            if not (_agree(x2 - x1, step, x3) and _agree(x3 - x2, step, x3)):
                return None
            out.append(x0 + k * step)
        moved.append(tuple(out))
    if r0.unpaired != r1.unpaired:
        return None
    finish, busy, (critical,) = moved
    return replace(r0, num_microbatches=m, makespan=max(finish), busy=busy, finish=finish, events=(),
                   critical_p2p=critical)


def long_step(run: Callable[[int], ScheduleResult], m: int, pp: int, vpp: int, group: int) -> ScheduleResult:
    """``run(count)`` simulated at four short counts and extended to ``m`` (see the module docstring)."""
    for doubling in range(_DOUBLINGS):
        m0, period = reference_counts(m, pp, vpp, group, 1 << doubling)
        if m <= m0 + 3 * period:
            return run(m)
        result = extend([run(m0 + i * period) for i in range(4)], m, m0, period)
        if result is not None:
            return result
    raise ValueError(f"the pipeline schedule reached no periodic steady state within {m0 + 3 * period} "
                     f"micro-batches; {m} micro-batches cannot be priced (use a global batch of at most "
                     f"{MAX_SIMULATED_MICROBATCHES} micro-batches per data-parallel rank)")


__all__ = ["LINEAR_TOLERANCE", "MAX_SIMULATED_MICROBATCHES", "extend", "long_step", "reference_counts"]
