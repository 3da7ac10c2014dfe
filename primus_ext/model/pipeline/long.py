"""Long steps: any micro-batch count within a fixed simulation budget.

    >>> from primus_ext.model.pipeline.long import simulated_directly, long_step
    >>> simulated_directly(pp=8, vpp=1, m=10**9)                       # False: priced in closed form
    >>> result = long_step(lambda k: simulate(..., k), 10**9, pp=8, vpp=1, group=8)

A step of ``m`` micro-batches costs about 2 * PP * VPP * m simulated ops (a timeline holds one event each).
Up to ``MAX_SIMULATED_OPS`` the step is simulated op by op. Beyond it the step is extended in closed form: a
fixed pipeline order (1F1B, interleaved; ZB-H1's greedy order on fixed op times) is a max-plus linear system
whose op times do not depend on the micro-batch, so once its transient has died out, ``period`` more
micro-batches (c of the schedule's periods of ``group`` micro-batches: max-plus systems may repeat only every c
periods) move every rank's last finish, its busy time and the send/recv seconds on the critical path by the
same constants. The four reference counts m0 + i * period end at the largest count the budget simulates (the
transient is given every op the budget allows; m0 = m modulo ``period``), and the three increments must agree
to ``LINEAR_TOLERANCE``, for c = 1, 2, 3 ... until they do. The result is the first reference moved by
(m - m0) / period increments: exact once the steady state is reached within the budget (the tests compare it
with op-by-op simulations past the budget). When no c agrees, or the budget cannot even hold the warm-up and
three periods (thousands of stages), the step is refused with a ``Problem`` (``pricing_problem`` says so before
any work, as a legality rule). Time and memory are bounded by the budget, whatever ``m``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from primus_ext.errors import InfeasibleConfig, Problem
from primus_ext.model.pipeline.ops import ScheduleResult

MAX_SIMULATED_OPS = 1 << 18
"""Ops simulated at most per step: 262 144 (measured here: 0.75 s with the timeline, 0.1 s without, on PP 8 x
VPP 4 x 4 096 micro-batches); the largest shipped or published step needs ~25 000 (Llama-3.1-405B: 192 x 8 x 8 x 2)."""

ZB_SIMULATED_OPS = MAX_SIMULATED_OPS // 4
"""ZB-H1's budget: its order is chosen greedily on the op times, op by op in Python (~4x the cost of a fixed
order's op, measured here: ~1.2 s for 262 144 ops)."""

LINEAR_TOLERANCE = 1e-9
"""Relative agreement the increments need (float sums of ~1e5 op times round at ~1e-12)."""


def ops_of(pp: int, vpp: int, m: int) -> int:
    """Forward and backward ops of one step (ZB-H1's split weight-grads are a third kind of the same count)."""
    return 2 * pp * vpp * m


def budget_of(schedule: str) -> int:
    return ZB_SIMULATED_OPS if schedule == "zb-h1" else MAX_SIMULATED_OPS


def simulated_directly(pp: int, vpp: int, m: int, budget: int = MAX_SIMULATED_OPS) -> bool:
    """Whether a step of ``m`` micro-batches is simulated op by op (and has a timeline)."""
    return ops_of(pp, vpp, m) <= budget


def reference_plan(m: int, pp: int, vpp: int, group: int, budget: int = MAX_SIMULATED_OPS) -> Iterator[tuple[int, int]]:
    """(m0, period) candidates: period = c schedule periods (c = 1, 2 ... max(2, PP)), the four references ending at
    the budget's largest count, m0 congruent to ``m`` modulo ``period`` and past a warm-up of 2 * PP groups."""
    g = group if vpp > 1 else 1
    top = budget // (2 * pp * vpp)
    for c in range(1, max(2, pp) + 1):  # 1F1B on 4 nearly equal stages settles into a cycle of 3 periods
        period = g * c
        m0 = top - 3 * period
        m0 -= (m0 - m) % period
        if m0 < 2 * pp * g:
            return
        yield m0, period


def pricing_problem(pp: int, vpp: int, m: int, group: int, budget: int = MAX_SIMULATED_OPS) -> str:
    """Why a step of ``m`` micro-batches cannot be priced ("" when it can): too many ops to simulate and too
    few within the budget to reach the steady state."""
    if simulated_directly(pp, vpp, m, budget) or next(reference_plan(m, pp, vpp, group, budget), None) is not None:
        return ""
    return (f"PP*VPP = {pp * vpp} pipeline stages x {m:,} micro-batches is {ops_of(pp, vpp, m):,} ops to simulate, "
            f"more than {budget:,}, and the budget cannot hold the schedule's warm-up and three periods "
            "to extend it in closed form")


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


def refusal(m: int, pp: int, vpp: int, group: int, budget: int = MAX_SIMULATED_OPS) -> InfeasibleConfig:
    """The step cannot be priced: a ``Problem`` at the global batch (exit 2; illegal to the tuner)."""
    why = pricing_problem(pp, vpp, m, group, budget) or (
        f"the pipeline schedule reached no periodic steady state within the {budget:,} simulated ops "
        f"(PP*VPP = {pp * vpp}), so {m:,} micro-batches cannot be priced exactly")
    top = budget // (2 * pp * vpp)
    return InfeasibleConfig(problems=[Problem(
        path="global_batch_size", value=m, message=why,
        fix=f"use a global batch of at most {top:,} micro-batches per data-parallel rank, or fewer pipeline stages")])


def long_step(run: Callable[[int], ScheduleResult], m: int, pp: int, vpp: int, group: int,
              budget: int = MAX_SIMULATED_OPS) -> ScheduleResult:
    """``run(count)`` simulated at four reference counts and extended to ``m`` (see the module docstring)."""
    if simulated_directly(pp, vpp, m, budget):
        return run(m)
    for m0, period in reference_plan(m, pp, vpp, group, budget):
        result = extend([run(m0 + i * period) for i in range(4)], m, m0, period)
        if result is not None:
            return result
    raise refusal(m, pp, vpp, group, budget)


__all__ = ["LINEAR_TOLERANCE", "MAX_SIMULATED_OPS", "ZB_SIMULATED_OPS", "budget_of", "extend", "long_step",
           "ops_of", "pricing_problem", "reference_plan", "refusal", "simulated_directly"]
