"""The zero-bubble ZB-H1 schedule (Qi et al. 2023, arXiv:2401.10241, sec. 3): its op order and its run.

``model.pipeline.simulate("zb-h1", ...)`` calls ``zb_h1``; the order is chosen greedily on the compute times,
then replayed fixed with the send/recv times (``pipeline.ops.replay``). Pure and torch-free.
"""

from __future__ import annotations

import heapq
from functools import lru_cache

from primus_ext.model.pipeline.ops import BWD, FWD, WGRAD, ChunkTimes, ScheduleResult, Structure, place, replay

_READY_TOLERANCE = 1e-12
"""Relative slack of the ZB-H1 order's "input already there" test: two sums of the same op times that differ
in rounding only count as simultaneous (an input one ulp late must not hand the slot to a W)."""


def zb_h1_split(times: tuple[tuple[ChunkTimes, ...], ...]) -> tuple[list[float], list[float], list[float]]:
    """Per rank (F, B, W) seconds: the backward split into input-grad B and weight-grad W."""
    f = [row[0].fwd for row in times]
    w = [min(row[0].wgrad, row[0].bwd) for row in times]
    b = [row[0].bwd - w[r] for r, row in enumerate(times)]
    return f, b, w


@lru_cache(maxsize=256)
def zb_h1_structure(times: tuple[tuple[ChunkTimes, ...], ...], m: int) -> Structure:
    """ZB-H1's per-rank op order (Qi et al. 2023, arXiv:2401.10241, sec. 3 "ZB-H1"), chosen greedily in time
    order on the compute times alone (no send/recv): B has priority, F keeps 1F1B's budget (at most PP-r
    micro-batches between F and B on rank r), W fills otherwise idle time but rank r defers at most r of
    them (the paper's memory bound, also what ``model.memory`` assumes). On uniform stages this is the
    paper's figure 3 order with its bubble (p-1)(F+B-W).

    The order is then fixed and ops wait for their inputs (``pipeline.ops.replay``), as the schedule runs: the
    zero-bubble runtime executes a precomputed per-rank op list, and a rank blocks on its recv. Choosing the order with
    the send/recv times instead would make the step jump when a B's input arrives an epsilon after the rank
    frees up (a whole W would start first); with the order fixed the step is continuous and non-decreasing
    in the p2p time, and the p2p on its critical path is at most every boundary crossed once per micro-batch
    and direction."""
    pp = len(times)
    f, b, w = zb_h1_split(times)
    f_end = [[None] * m for _ in range(pp)]
    b_end = [[None] * m for _ in range(pp)]
    next_f, next_b, w_done = [0] * pp, [0] * pp, [0] * pp
    free = [0.0] * pp
    orders: list[list[tuple[int, int, int]]] = [[] for _ in range(pp)]
    heap = [(0.0, r) for r in range(pp)]
    waiting: set[int] = set()
    done = 0
    while done < 3 * m * pp:
        t, r = heapq.heappop(heap)
        if t != free[r]:
            continue
        arrivals = []  # (time, kind)
        if next_b[r] < m:
            src = f_end[r][next_b[r]] if r == pp - 1 else b_end[r + 1][next_b[r]]
            if src is not None:
                arrivals.append((src, BWD))
        if next_f[r] < m and next_f[r] - next_b[r] < pp - r:
            src = 0.0 if r == 0 else f_end[r - 1][next_f[r]]
            if src is not None:
                arrivals.append((src, FWD))
        ready = sorted(k for a, k in arrivals if a <= t + _READY_TOLERANCE * max(1.0, t))
        pending_w = next_b[r] - w_done[r]
        # at most r deferred W on rank r (ZB-H1's memory bound: PP micro-batches held)
        kind = ready[0] if ready and pending_w <= r else (WGRAD if pending_w else None)
        if kind is None:
            future = [a for a, _ in arrivals]
            if future:
                free[r] = max(t, min(future))
                heapq.heappush(heap, (free[r], r))
            waiting.add(r)
            continue
        if kind == FWD:
            mb, dur = next_f[r], f[r]
            next_f[r] += 1
            f_end[r][mb] = t + dur
        elif kind == BWD:
            mb, dur = next_b[r], b[r]
            next_b[r] += 1
            b_end[r][mb] = t + dur
        else:
            mb, dur = w_done[r], w[r]
            w_done[r] += 1
        orders[r].append((kind, mb, 0))
        free[r] = t + dur
        heapq.heappush(heap, (free[r], r))
        done += 1
        for other in waiting - {r}:
            free[other] = t  # re-check at the current time: a new input may now be known
            heapq.heappush(heap, (free[other], other))
        waiting.clear()
    return place(orders, pp, 1, m)


def zb_h1(times: tuple[tuple[ChunkTimes, ...], ...], m: int, p2p: tuple[float, ...], timeline: bool) -> ScheduleResult:
    f, b, w = zb_h1_split(times)
    return replay("zb-h1", zb_h1_structure(times, m), times, m, f + b + w, p2p, timeline)


__all__ = ["zb_h1", "zb_h1_split", "zb_h1_structure"]
