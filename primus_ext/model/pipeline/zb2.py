"""Zero-bubble ZB-H2 (Qi et al. 2023, arXiv:2401.10241, sec. 3 "ZB-H2") and the memory-capped greedy the
zero-bubble family shares (``pipeline.zbv`` runs it on V-shaped chunks).

    >>> from primus_ext.model.pipeline import uniform_times
    >>> from primus_ext.model.pipeline.zb2 import zb_h2
    >>> r = zb_h2(uniform_times(4, 1, 1.0, 2.0, 1.0), 12)     # F = B = W = 1
    >>> r.makespan                                             # 3*12 + (4-1)*F: only the fill is idle

Each rank runs split-backward ops (F, input-grad B, weight-grad W) chosen greedily in time order on the compute
times: a ready B first, then a ready F while the rank's forward activations in flight (F done, B not yet) stay
under its cap, then a deferred W to fill what would be idle. The order is then fixed and replayed with the
send/recv times (``pipeline.ops.replay``), as Primus's zero-bubble runtime executes a precomputed op list
(primus/backends/megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py builds it greedily under a memory
limit). Pure and torch-free.

ZB-H2's cap: rank r holds up to 2(P-r)-1 micro-batches (the paper's "2P-1 in flight" on rank 0, sec. 3,
table 1 memory (2p-1)M_B), so its warm-up forwards fill the bubble before the first B; it defers at most
P-1+r W (``zb_h2_w_caps``). Its bubble here is the
fill (P-1)·T_F alone on uniform stages: the paper's ~0 (table 1: (p-1)(T_F+T_B-2T_W)) also needs its sec. 4
"bypassing optimizer synchronizations", which lets each rank's next step start without waiting for the others;
a synchronous step (this simulator) keeps the fill.
"""

from __future__ import annotations

import heapq
from collections import deque
from functools import lru_cache

from primus_ext.model.pipeline.ops import (
    BWD,
    FWD,
    WGRAD,
    ChunkTimes,
    ScheduleResult,
    StageOf,
    Structure,
    loop_stage,
    place,
    replay,
)
from primus_ext.model.pipeline.registry import Schedule, peak_count, register

_READY_TOLERANCE = 1e-12
"""Relative slack of "input already there" (as ``pipeline.zb``): two sums of the same op times that differ in
rounding only count as simultaneous."""

def v_stage(rank: int, chunk: int, pp: int) -> int:
    """V placement (Qi et al. 2024, arXiv:2405.15362 sec. 2; Primus zbv.py's layer_group_idx): chunk 0 on ranks
    0..P-1, chunk 1 back on P-1..0, so rank 0 holds the first and the last layers."""
    return rank if chunk == 0 else 2 * pp - 1 - rank


def split_times(times: tuple[tuple[ChunkTimes, ...], ...]) -> list[float]:
    """Op durations by ``ops.duration_slot`` (kind-major, then rank, then chunk): F, input-grad B = bwd - W, W."""
    chunks = [c for row in times for c in row]
    w = [min(c.wgrad, c.bwd) for c in chunks]
    return [c.fwd for c in chunks] + [c.bwd - wc for c, wc in zip(chunks, w, strict=True)] + w


def place_mapped(orders: list, pp: int, chunks: int, m: int, stage_of: StageOf) -> Structure:
    """``ops.place`` for any chunk placement (the one placement routine)."""
    return place(orders, pp, chunks, m, stage_of=stage_of)


def greedy_orders(times: tuple[tuple[ChunkTimes, ...], ...], m: int, caps: tuple[int, ...], stage_of: StageOf,
                  w_caps: tuple[int, ...] | None = None, w_weight: float = 0.0) -> list[list[tuple[int, int, int]]]:
    """Per-rank (kind, micro-batch, chunk) orders, chosen in time order on the compute times (no send/recv).

    At each moment a free rank runs: a B whose input is there (the lower chunk's first: it completes a
    micro-batch, as Primus zbv.py prefers the return arm's B); else an F whose input is there, if its forward
    activations in flight (chunk units: F done, B not yet) stay within ``caps[rank]`` with room left for one F
    per later chunk (so a rank never fills up with early chunks while the micro-batch that would free them
    waits on its own later chunk; the later chunk's F first, as zbv.py, which turns micro-batches round and
    frees memory sooner); else its oldest deferred W; else it waits for the next input. ``w_caps[rank]``: with
    more W deferred than this, the rank runs its oldest W first (None: no bound). ``w_weight``: a deferred W's
    held inputs in forward-activation units, counted against ``caps`` with them (Primus zbv.py's one memory limit:
    F adds f_mem, B frees all but the W part, W the rest; 0: the W count is bounded by ``w_caps`` alone)."""
    pp, chunks = len(times), len(times[0])
    stages = pp * chunks
    durs = split_times(times)
    end: dict[tuple[int, int, int], float] = {}  # (kind, stage, mb) -> end time
    next_op = [[[0] * chunks for _ in range(pp)] for _ in (FWD, BWD)]
    pending_w: list[deque] = [deque() for _ in range(pp)]
    free = [0.0] * pp
    orders: list[list[tuple[int, int, int]]] = [[] for _ in range(pp)]
    heap = [(0.0, r) for r in range(pp)]
    waiting: set[int] = set()
    done, total = 0, 3 * pp * chunks * m
    while done < total:
        t, r = heapq.heappop(heap)
        if t != free[r]:
            continue
        in_flight = sum(next_op[FWD][r]) - sum(next_op[BWD][r])
        candidates = []  # (B before F, chunk preference, input arrival, kind, chunk)
        for c in range(chunks):
            s = stage_of(r, c, pp)
            mb = next_op[BWD][r][c]
            if mb < m:
                src = end.get((BWD, s + 1, mb)) if s < stages - 1 else end.get((FWD, s, mb))
                if src is not None:
                    candidates.append((0, c, src, BWD, c))
            mb = next_op[FWD][r][c]
            if mb < m and in_flight + w_weight * len(pending_w[r]) + chunks - c <= caps[r]:
                src = end.get((FWD, s - 1, mb)) if s > 0 else 0.0
                if src is not None:
                    candidates.append((1, -c, src, FWD, c))
        slack = _READY_TOLERANCE * max(1.0, t)
        ready = sorted(x for x in candidates if x[2] <= t + slack)
        if ready and not (w_caps is not None and len(pending_w[r]) > w_caps[r]):
            _, _, _, kind, c = ready[0]
            mb = next_op[kind][r][c]
            next_op[kind][r][c] += 1
            if kind == BWD:
                pending_w[r].append((mb, c))
        elif pending_w[r]:
            kind, (mb, c) = WGRAD, pending_w[r].popleft()
        else:
            future = [x[2] for x in candidates]
            if future:
                free[r] = max(t, min(future))
                heapq.heappush(heap, (free[r], r))
            waiting.add(r)
            continue
        free[r] = t + durs[(kind * pp + r) * chunks + c]
        if kind != WGRAD:
            end[(kind, stage_of(r, c, pp), mb)] = free[r]
        orders[r].append((kind, mb, c))
        heapq.heappush(heap, (free[r], r))
        done += 1
        for other in waiting - {r}:  # re-check at the current time: a new input may now be known
            free[other] = t
            heapq.heappush(heap, (t, other))
        waiting.clear()
    return orders


def peak_in_flight(order: list[tuple[int, int, int]]) -> int:
    """Most forward activations (chunk units) one rank's order holds at once: F done, its B not yet."""
    held = peak = 0
    for kind, _, _ in order:
        held += 1 if kind == FWD else -1 if kind == BWD else 0
        peak = max(peak, held)
    return peak


def peak_wgrad_held(order: list[tuple[int, int, int]]) -> int:
    """Most weight-grad inputs one rank's order holds at once: B done, its W not yet."""
    held = peak = 0
    for kind, _, _ in order:
        held += 1 if kind == BWD else -1 if kind == WGRAD else 0
        peak = max(peak, held)
    return peak


# --------------------------------------------------------------------------- ZB-H2
def zb_h2_caps(pp: int, m: int) -> tuple[int, ...]:
    """Per rank: micro-batches ZB-H2 keeps in flight, 2(P-r)-1 (Qi et al. 2023 sec. 3 / table 1: rank 0 holds
    2P-1; the last rank 1, as in 1F1B), never more than the micro-batches there are."""
    return tuple(min(2 * (pp - r) - 1, m) for r in range(pp))


def zb_h2_w_caps(pp: int) -> tuple[int, ...]:
    """Per rank: W that ZB-H2 may defer, P-1+r. The paper's figure-4 tail has the last rank run its last Bs
    back to back and its Ws after, so that rank 0's last Bs (P-1 backward hops later) are not waited for: it
    must defer about (P-1)·T_B/T_W of them, P-1 at T_B = T_W. ZB-H1's bound r (``pipeline.zb``) leaves H2's
    step no shorter than H1's when T_B > T_W; no bound at all lets the last rank hold every W until the end
    (tests/model/pipeline/test_zb2.py measures both)."""
    return tuple(pp - 1 + r for r in range(pp))


def zb_h2_problems(pp: int, vpp: int | None, m: int) -> list[str]:
    """Why ZB-H2 cannot run here ([] when it can): one chunk per rank (Primus's zero-bubble 1P: VPP 1,
    zerobubble/README.md), PP >= 2 (zbpp_utils.py: "zero bubble must be enabled with pipeline parallelism")."""
    problems = []
    if (vpp or 1) > 1:
        problems.append(f"zb-h2 is a one-chunk schedule (VPP=1); got VPP={vpp}: use zb-v for two V-shaped chunks")
    if pp < 2:
        problems.append(f"zb-h2 needs pipeline parallelism (PP >= 2); got PP={pp}")
    if m < 1:
        problems.append(f"zb-h2 needs at least one micro-batch; got {m}")
    return problems


@lru_cache(maxsize=256)
def zb_h2_orders(times: tuple[tuple[ChunkTimes, ...], ...], m: int) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """ZB-H2's per-rank op orders (``greedy_orders`` with ``zb_h2_caps``)."""
    pp = len(times)
    orders = greedy_orders(times, m, zb_h2_caps(pp, m), loop_stage, zb_h2_w_caps(pp))
    return tuple(tuple(o) for o in orders)


def zb_h2(times: tuple[tuple[ChunkTimes, ...], ...], m: int, p2p: tuple[float, ...] = (),
          timeline: bool = False) -> ScheduleResult:
    """Simulate ZB-H2 (one chunk per rank) over ``m`` micro-batches; ``p2p[s]``: send/recv seconds s -> s+1."""
    pp = len(times)
    if any(len(row) != 1 for row in times):
        raise ValueError("zb-h2 is a one-chunk schedule")
    p2p = tuple(p2p) + (0.0,) * (pp - 1 - len(p2p))
    st = place_mapped([list(o) for o in zb_h2_orders(times, m)], pp, 1, m, loop_stage)
    return replay("zb-h2", st, times, m, split_times(times), p2p, timeline)


UNIT_TIMES_1 = ChunkTimes(fwd=1.0, bwd=2.0, wgrad=1.0)
"""T_F = T_B = T_W = 1: the paper's setting, which ``rank_order`` and the memory counts use."""


def zb_h2_in_flight(rank: int, pp: int, m: int) -> int:
    """Peak forward activations rank ``rank`` holds under ZB-H2, in micro-batches (one chunk = one stage):
    2(P-r)-1 once m reaches it (the uniform-time order's count)."""
    return peak_in_flight(list(zb_h2_orders(((UNIT_TIMES_1,),) * pp, m)[rank]))


def zb_h2_wgrad_held(rank: int, pp: int, m: int) -> int:
    """Peak weight-grad inputs rank ``rank`` holds under ZB-H2 (B done, W not yet): P + r at most."""
    return peak_wgrad_held(list(zb_h2_orders(((UNIT_TIMES_1,),) * pp, m)[rank]))


@register
class ZBH2(Schedule):
    """Zero-bubble ZB-H2 (Qi et al. 2023, arXiv:2401.10241 sec. 3): split backward, up to 2P-1 micro-batches in
    flight on rank 0 so the warm-up fills the bubble; one chunk per rank. Primus selects it by a memory limit
    (zero_bubble.yaml: ``zero_bubble_max_pending_backward`` = 2P "will use zb2p"), not by a pp_algorithm name."""

    name = "zb-h2"
    label = "ZB-H2"
    splits_wgrad = True
    kept_over_vpp = True
    batch_kernel = None  # op order chosen greedily on the op times: one configuration at a time

    def recipe_keys(self, pp: int) -> dict[str, object] | None:
        # zero_bubble.yaml: "when number of stages are 8, setting to 16 will use zb2p"
        return {**super().recipe_keys(pp), "patch_zero_bubble": True, "zero_bubble_max_pending_backward": 2 * pp}

    def legality(self, pp: int, vpp: int | None, num_microbatches: int) -> list[str]:
        return zb_h2_problems(pp, vpp, num_microbatches)

    def rank_order(self, rank: int, pp: int, vpp: int, m: int, group: int | None = None,
                   extra_warmup: int = 0) -> list[tuple[int, int, int]]:
        """The uniform-time (T_F = T_B = T_W) order; ``simulate`` re-chooses it on the actual op times."""
        return list(zb_h2_orders(((UNIT_TIMES_1,),) * pp, m)[rank])

    def simulate(self, times, num_microbatches: int, p2p=(), **kwargs):
        return zb_h2(times, num_microbatches, tuple(p2p), kwargs.get("timeline", False))

    def chunk_in_flight(self, rank: int, pp: int, vpp: int, m: int, extra: int = 0) -> tuple[float, ...]:
        return (float(zb_h2_in_flight(rank, pp, peak_count(pp, m))),)

    def wgrad_held_microbatches(self, rank: int, pp: int, m: int) -> int:
        return zb_h2_wgrad_held(rank, pp, peak_count(pp, m))


__all__ = ["ZBH2", "greedy_orders", "loop_stage", "peak_in_flight", "peak_wgrad_held", "place_mapped",
           "split_times", "v_stage", "zb_h2", "zb_h2_caps", "zb_h2_in_flight", "zb_h2_orders", "zb_h2_problems",
           "zb_h2_w_caps", "zb_h2_wgrad_held"]
