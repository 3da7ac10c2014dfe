"""Pipeline schedule simulator: 1F1B, interleaved 1F1B (VPP) and zero-bubble ZB-H1.

    >>> from primus_ext.model.pipeline import ChunkTimes, simulate
    >>> times = ((ChunkTimes(fwd=1.0, bwd=2.0),),) * 4             # [rank][chunk], seconds
    >>> r = simulate("1f1b", times, num_microbatches=8)
    >>> r.makespan, r.bubble_fraction                              # 33.0, (4-1)/8

Input: per pipeline rank and model chunk, the time of one micro-batch's forward, backward (input-grad
+ weight-grad) and weight-grad part; the send/recv time between consecutive virtual stages. Each rank
runs its ops in the schedule's order; an op starts when its rank is free and its input arrived
(upstream forward + p2p, or downstream backward + p2p). P2P runs on its own stream (Megatron's
batched isend/irecv), so it delays only the dependent op. Uneven stages are just unequal times.

Orders (megatron-core ``pipeline_parallel/schedules.py``):
  * ``1f1b``: rank r runs min(PP-r-1, m) warm-up forwards, then one-forward-one-backward, then the
    remaining backwards.
  * ``interleaved``: virtual micro-batch k runs (micro-batch, chunk) ``get_schedule_table`` entry k,
    groups of ``microbatch_group_size_per_vp_stage`` (default PP) micro-batches per chunk; warm-up
    (PP-r-1)*2 + (VPP-1)*group (+1 with ``overlap_moe_expert_parallel_comm``), then 1F1B over
    virtual micro-batches; backward k runs the table's entry with the chunk mirrored.
  * ``zb-h1``: Qi et al. 2023 (arXiv:2401.10241) "ZB-H1": backward split into input-grad B and
    weight-grad W; B has priority, F keeps 1F1B's budget (at most PP-r micro-batches between F and B
    on rank r), W fills otherwise idle time but rank r defers at most r of them (the paper's memory
    bound, also what ``model.memory`` assumes). The order is chosen greedily in time order on the
    compute times (on uniform stages the paper's figure's order and bubble (p-1)(F+B-W)), then run
    fixed with the send/recv times like the other schedules (``_zb_h1_structure``).

The closed forms (p-1)/m and (p-1)/(v*m) are tests of this simulator (tests/model/test_pipeline.py),
not its implementation. Pure and torch-free; the fixed orders are memoised per structure.

Without a timeline, 1F1B and interleaved runs take the fast path (``pipeline_periodic``): the same
recurrence over the ops sorted by their position in their rank's order, simulated until the steady
state repeats exactly and extrapolated from there (tests/model/test_pipeline_periodic.py checks it
against the op-by-op simulation ``_fixed``, which ``timeline=True`` still uses).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import lru_cache

from primus_ext.model.pipeline_periodic import Periodic, periodic_structure, simulate_periodic, stretch

FWD, BWD, WGRAD = 0, 1, 2
KIND_NAMES = ("F", "B", "W")


@dataclass(frozen=True, kw_only=True)
class ChunkTimes:
    """One micro-batch through one model chunk, seconds."""

    fwd: float
    bwd: float
    """Whole backward: input-grad + weight-grad (+ recompute)."""
    wgrad: float = 0.0
    """Weight-grad part of ``bwd`` (split off by zero-bubble schedules)."""


@dataclass(frozen=True, kw_only=True)
class Event:
    """One op on the timeline (for the Gantt chart)."""

    rank: int
    chunk: int
    microbatch: int
    kind: str
    """``F`` forward, ``B`` backward (input-grad only under zb-h1), ``W`` weight-grad."""
    start: float
    end: float


@dataclass(frozen=True, kw_only=True)
class ScheduleResult:
    """Simulated pipeline: makespan, per-rank busy / finish times and (optionally) the timeline."""

    schedule: str
    num_microbatches: int
    makespan: float
    busy: tuple[float, ...]
    """Per rank: sum of its op times."""
    finish: tuple[float, ...]
    """Per rank: end of its last op."""
    events: tuple[Event, ...] = ()
    critical_p2p: float = 0.0
    """Send/recv seconds on the critical path (what p2p adds to the makespan): at most every stage boundary
    crossed once per micro-batch and direction."""

    @property
    def bubble_time(self) -> float:
        """Idle time of the busiest rank within the makespan."""
        return self.makespan - max(self.busy)

    @property
    def bubble_fraction(self) -> float:
        """Bubble over useful work of the busiest rank ((p-1)/m for uniform 1F1B)."""
        return self.bubble_time / max(self.busy) if max(self.busy) > 0 else 0.0


# --------------------------------------------------------------------------- fixed orders
def schedule_table(num_microbatches: int, num_chunks: int, group: int) -> list[tuple[int, int]]:
    """megatron-core ``get_schedule_table``: virtual micro-batch k -> (micro-batch, chunk)."""
    table: list[tuple[int, int]] = []
    for low in range(0, num_microbatches, group):
        high = min(low + group, num_microbatches)
        table.extend((mb, chunk) for chunk in range(num_chunks) for mb in range(low, high))
    return table


def rank_order(schedule: str, rank: int, pp: int, vpp: int, m: int, group: int,
               extra_warmup: int = 0) -> list[tuple[int, int, int]]:
    """The (kind, micro-batch, chunk) sequence rank ``rank`` executes."""
    if schedule == "1f1b" or vpp == 1:
        warm = min(pp - rank - 1, m)
        order = [(FWD, i, 0) for i in range(warm)]
        for k in range(m - warm):
            order += [(FWD, warm + k, 0), (BWD, k, 0)]
        order += [(BWD, k, 0) for k in range(m - warm, m)]
        return order
    table = schedule_table(m, vpp, group)
    total = m * vpp
    warm = min((pp - rank - 1) * 2 + (vpp - 1) * group + extra_warmup, total)
    fwd = [(FWD, mb, c) for mb, c in table]
    bwd = [(BWD, mb, vpp - 1 - c) for mb, c in table]
    order = fwd[:warm]
    for k in range(total - warm):
        order += [fwd[warm + k], bwd[k]]
    return order + bwd[total - warm:]


@dataclass(frozen=True)
class _Structure:
    """Topologically ordered ops; positions are 1-based so that 0 is a zero-time sentinel."""

    ops: tuple[tuple[int, int, int, int], ...]
    """(kind, rank, chunk, micro-batch) per op, in a topological order."""
    steps: tuple[tuple[int, int, int, int], ...]
    """Per op: (same-rank predecessor, input dependency, duration slot, p2p slot); 0 / -1 = none."""
    last: tuple[int, ...]
    """Per rank: position of its last op."""


@lru_cache(maxsize=256)
def _structure(schedule: str, pp: int, vpp: int, m: int, group: int, extra: int = 0) -> _Structure:
    return _place([rank_order(schedule, r, pp, vpp, m, group, extra) for r in range(pp)], pp, vpp, m)


def _place(orders: list, pp: int, vpp: int, m: int) -> _Structure:
    """Per-rank (kind, micro-batch, chunk) orders -> a topological ``_Structure`` (sweeping the ranks, each
    as far as its inputs are placed). A weight-grad W has no input of its own: its B precedes it on its rank."""
    stages = pp * vpp
    # position of (kind, virtual stage, mb) at flat index (kind * stages + stage) * m + mb; 0 = not yet placed
    placed = [0] * (3 * stages * m)
    ops: list[tuple[int, int, int, int]] = []
    steps: list[tuple[int, int, int, int]] = []
    pointers = [0] * pp
    last = [0] * pp
    lengths = [len(o) for o in orders]
    remaining = sum(lengths)
    while remaining:
        progressed = False
        for r in range(pp):
            order, ptr, prev = orders[r], pointers[r], last[r]
            while ptr < lengths[r]:
                kind, mb, chunk = order[ptr]
                stage = chunk * pp + r
                if kind == FWD:
                    dep_stage, cslot = stage - 1, stage - 1
                    dep = placed[dep_stage * m + mb] if stage > 0 else -1
                elif kind == WGRAD:
                    dep, cslot = -1, -1
                elif stage < stages - 1:
                    dep_stage, cslot = stage + 1, stage
                    dep = placed[(stages + dep_stage) * m + mb]
                else:
                    cslot = -1
                    dep = placed[stage * m + mb]
                if dep == 0:
                    break
                ops.append((kind, r, chunk, mb))
                position = len(ops)
                placed[(kind * stages + stage) * m + mb] = position
                steps.append((prev, max(dep, 0), (kind * pp + r) * vpp + chunk, cslot))
                prev = position
                ptr += 1
            remaining -= ptr - pointers[r]
            progressed = progressed or ptr != pointers[r]
            pointers[r], last[r] = ptr, prev
        assert progressed, "pipeline order deadlocks"
    return _Structure(tuple(ops), tuple(steps), tuple(last))


def _critical_p2p(st: _Structure, fin: list[float], durs: list[float], comms: tuple[float, ...]) -> float:
    """Send/recv time on the critical path (walk back from the last op along binding inputs)."""
    i = max(st.last, key=lambda pos: fin[pos])
    total = 0.0
    while i > 0:
        p, d, ds, cs = st.steps[i - 1]
        start = fin[i] - durs[ds]
        if d > 0 and abs(fin[d] + comms[cs] - start) <= 1e-12 * max(1.0, start) and fin[d] + comms[cs] > fin[p]:
            total += comms[cs]
            i = d
        else:
            i = p
    return total


def _fixed(schedule: str, times: tuple[tuple[ChunkTimes, ...], ...], m: int, p2p: tuple[float, ...],
           group: int, timeline: bool, extra: int = 0) -> ScheduleResult:
    pp, vpp = len(times), len(times[0])
    st = _structure(schedule, pp, vpp, m, group, extra)
    durs = [c.fwd for row in times for c in row] + [c.bwd for row in times for c in row]
    return _replay(schedule, st, times, m, durs, p2p, timeline)


def _replay(schedule: str, st: _Structure, times: tuple[tuple[ChunkTimes, ...], ...], m: int, durs: list[float],
            p2p: tuple[float, ...], timeline: bool) -> ScheduleResult:
    """Run a fixed op order: every op starts when its rank is free and its input arrived."""
    comms = (*p2p, 0.0)  # slot -1 -> 0
    fin = [0.0]
    append = fin.append
    for p, d, ds, cs in st.steps:  # the hot loop: finish = max(rank free, input arrived) + duration
        t = fin[p]
        a = fin[d] + comms[cs]
        append((a if a > t else t) + durs[ds])
    finish = tuple(fin[pos] for pos in st.last)
    busy = tuple(m * sum(c.fwd + c.bwd for c in row) for row in times)
    events: tuple[Event, ...] = ()
    if timeline:
        events = tuple(
            Event(rank=r, chunk=c, microbatch=mb, kind=KIND_NAMES[k], start=fin[i + 1] - durs[st.steps[i][2]],
                  end=fin[i + 1])
            for i, (k, r, c, mb) in enumerate(st.ops)
        )
    return ScheduleResult(schedule=schedule, num_microbatches=m, makespan=max(finish), busy=busy, finish=finish,
                          events=events, critical_p2p=_critical_p2p(st, fin, durs, comms) if any(p2p) else 0.0)


# --------------------------------------------------------------------------- zero bubble
_READY_TOLERANCE = 1e-12
"""Relative slack of the ZB-H1 order's "input already there" test: two sums of the same op times that differ
in rounding only count as simultaneous (an input one ulp late must not hand the slot to a W)."""


def _zb_h1_split(times: tuple[tuple[ChunkTimes, ...], ...]) -> tuple[list[float], list[float], list[float]]:
    """Per rank (F, B, W) seconds: the backward split into input-grad B and weight-grad W."""
    f = [row[0].fwd for row in times]
    w = [min(row[0].wgrad, row[0].bwd) for row in times]
    b = [row[0].bwd - w[r] for r, row in enumerate(times)]
    return f, b, w


@lru_cache(maxsize=256)
def _zb_h1_structure(times: tuple[tuple[ChunkTimes, ...], ...], m: int) -> _Structure:
    """ZB-H1's per-rank op order (Qi et al. 2023, arXiv:2401.10241, sec. 3 "ZB-H1"), chosen greedily in time
    order on the compute times alone (no send/recv): B has priority, F keeps 1F1B's budget (at most PP-r
    micro-batches between F and B on rank r), W fills otherwise idle time but rank r defers at most r of
    them (the paper's memory bound, also what ``model.memory`` assumes). On uniform stages this is the
    paper's figure 3 order with its bubble (p-1)(F+B-W).

    The order is then fixed and ops wait for their inputs (``_replay``), as the schedule runs: the zero-bubble
    runtime executes a precomputed per-rank op list, and a rank blocks on its recv. Choosing the order with
    the send/recv times instead would make the step jump when a B's input arrives an epsilon after the rank
    frees up (a whole W would start first); with the order fixed the step is continuous and non-decreasing
    in the p2p time, and the p2p on its critical path is at most every boundary crossed once per micro-batch
    and direction."""
    pp = len(times)
    f, b, w = _zb_h1_split(times)
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
    return _place(orders, pp, 1, m)


def _zb_h1(times: tuple[tuple[ChunkTimes, ...], ...], m: int, p2p: tuple[float, ...], timeline: bool) -> ScheduleResult:
    f, b, w = _zb_h1_split(times)
    return _replay("zb-h1", _zb_h1_structure(times, m), times, m, f + b + w, p2p, timeline)


# --------------------------------------------------------------------------- entry point
def _positional(schedule: str, pp: int, vpp: int, m: int, group: int, extra: int) -> _Structure | None:
    """The ops sorted by their position in their rank's order (forwards by rank, then backwards by
    reverse rank): periodic in the steady state, unlike ``_structure``'s sweep order. ``None`` when that
    order is not topological."""
    orders = [rank_order(schedule, r, pp, vpp, m, group, extra) for r in range(pp)]
    length = max(map(len, orders))
    forward, backward = range(pp), range(pp - 1, -1, -1)
    keyed = [(r, *orders[r][t]) for t in range(length) for ranks, want in ((forward, FWD), (backward, BWD))
             for r in ranks if t < len(orders[r]) and orders[r][t][0] == want]
    stages = pp * vpp
    placed = [0] * (2 * stages * m)
    ops, steps, last = [], [], [0] * pp
    for r, kind, mb, chunk in keyed:
        stage = chunk * pp + r
        if kind == FWD:
            cslot = stage - 1
            dep = placed[(stage - 1) * m + mb] if stage > 0 else -1
        elif stage < stages - 1:
            cslot = stage
            dep = placed[(stages + stage + 1) * m + mb]
        else:
            cslot = -1
            dep = placed[stage * m + mb]
        if dep == 0:
            return None
        ops.append((kind, r, chunk, mb))
        placed[(kind * stages + stage) * m + mb] = len(ops)
        steps.append((last[r], max(dep, 0), (kind * pp + r) * vpp + chunk, cslot))
        last[r] = len(ops)
    return _Structure(tuple(ops), tuple(steps), tuple(last))


def _periodic_direct(schedule: str, pp: int, vpp: int, m: int, group: int, extra: int) -> Periodic:
    st = _positional(schedule, pp, vpp, m, group, extra) or _structure(schedule, pp, vpp, m, group, extra)
    return periodic_structure(st.ops, st.steps, st.last, pp, vpp, group)


@lru_cache(maxsize=256)
def _periodic(schedule: str, pp: int, vpp: int, m: int, group: int, extra: int) -> Periodic:
    """The shift structure for ``m`` micro-batches. Long runs are the structure of a short run with
    whole periods inserted (``stretch``), used when that rule reproduces the short run's next two
    lengths exactly; building the op order of a long run costs ~30 us per op in Python."""
    g = 1 if vpp == 1 else group
    short = m % g + g * max(1, -(-(2 * pp + 2 * g - m % g) // g))
    if m <= short + 4 * g:
        return _periodic_direct(schedule, pp, vpp, m, group, extra)
    base = _periodic_direct(schedule, pp, vpp, short, group, extra)
    for k in (1, 2):
        if stretch(base, k) != _periodic_direct(schedule, pp, vpp, short + k * g, group, extra):
            return _periodic_direct(schedule, pp, vpp, m, group, extra)
    return stretch(base, (m - short) // g)


def _fixed_fast(schedule: str, times: tuple[tuple[ChunkTimes, ...], ...], m: int, p2p: tuple[float, ...],
                group: int, extra: int = 0) -> ScheduleResult:
    """``_fixed`` without the timeline, extrapolating the periodic steady state (``pipeline_periodic``)."""
    per = _periodic(schedule, len(times), len(times[0]), m, group, extra)
    durs = [c.fwd for row in times for c in row] + [c.bwd for row in times for c in row]
    finish, critical = simulate_periodic(per, durs, (*p2p, 0.0))
    busy = tuple(m * sum(c.fwd + c.bwd for c in row) for row in times)
    return ScheduleResult(schedule=schedule, num_microbatches=m, makespan=max(finish), busy=busy, finish=finish,
                          critical_p2p=critical if any(p2p) else 0.0)


def _worth_extrapolating(schedule: str, pp: int, vpp: int, m: int, group: int, extra: int) -> bool:
    """Whether the fast path beats the op-by-op loop. Measured on the DeepSeek-V3 tuner's calls: the
    repetition shows after about one period on interleaved schedules (the fast path wins from ~50 ops
    on), but only after up to ~PP periods on 1F1B (a slow wave crossing identical ranks), and each
    simulated op costs ~1.6x the plain loop's (it also carries the critical p2p)."""
    # 1F1B's positional order: invariant run from (PP+1)^2 to n - PP(PP-1), window 2PP-1, period 2PP ops;
    # skipping more than half of the n = 2*PP*m ops after a PP-period wait needs m > 4*PP + 3
    return vpp > 1 or m > 4 * pp + 3


@lru_cache(maxsize=8192)
def _simulate_cached(schedule: str, times: tuple[tuple[ChunkTimes, ...], ...], m: int, p2p: tuple[float, ...],
                     group: int, extra: int) -> ScheduleResult:
    if schedule == "zb-h1":
        return _zb_h1(times, m, p2p, False)
    if _worth_extrapolating(schedule, len(times), len(times[0]), m, group, extra):
        return _fixed_fast(schedule, times, m, p2p, group, extra)
    return _fixed(schedule, times, m, p2p, group, False, extra)


def clear_schedule_cache() -> None:
    """Forget memoised schedule results (op orders stay: they depend on the structure only; ZB-H1's, chosen on
    the op times, go too)."""
    _simulate_cached.cache_clear()
    _zb_h1_structure.cache_clear()


def simulate(
    schedule: str,
    times: tuple[tuple[ChunkTimes, ...], ...],
    num_microbatches: int,
    p2p: tuple[float, ...] = (),
    *,
    microbatch_group_size_per_vp_stage: int | None = None,
    moe_a2a_overlap_warmup: bool = False,
    timeline: bool = False,
) -> ScheduleResult:
    """Simulate one step's forward/backward over ``num_microbatches`` micro-batches.

    ``times[rank][chunk]``: per-micro-batch chunk times; ``p2p[s]``: send/recv seconds between virtual
    stage s and s+1 (virtual stage = chunk * PP + rank), defaults to 0. ``timeline=True`` returns every
    op as an ``Event`` (not memoised); otherwise the result is memoised on the inputs.
    ``moe_a2a_overlap_warmup``: Megatron's extra interleaved warm-up forward under
    ``overlap_moe_expert_parallel_comm``.
    """
    pp = len(times)
    if pp == 0 or num_microbatches < 1:
        raise ValueError("need at least one pipeline rank and one micro-batch")
    vpp = len(times[0])
    if any(len(row) != vpp for row in times):
        raise ValueError("every pipeline rank needs the same number of model chunks")
    if schedule not in ("1f1b", "interleaved", "zb-h1"):
        raise ValueError(f"unknown pipeline schedule {schedule!r}; known: 1f1b, interleaved, zb-h1")
    if schedule == "zb-h1" and vpp > 1:
        raise ValueError("zb-h1 is a one-chunk schedule; use interleaved with VPP > 1")
    stages = pp * vpp
    p2p = tuple(p2p) + (0.0,) * (stages - 1 - len(p2p))
    group = microbatch_group_size_per_vp_stage or pp
    extra = 1 if moe_a2a_overlap_warmup and schedule == "interleaved" and vpp > 1 else 0
    if vpp == 1 and schedule == "interleaved":
        schedule = "1f1b"
    if schedule == "interleaved":
        problem = interleaving_problem(pp, num_microbatches, group)
        if problem:
            raise ValueError(problem)
    if timeline:
        if schedule == "zb-h1":
            return _zb_h1(times, num_microbatches, p2p, True)
        return _fixed(schedule, times, num_microbatches, p2p, group, True, extra)
    return _simulate_cached(schedule, times, num_microbatches, p2p, group, extra)


def interleaving_problem(pp: int, num_microbatches: int, group: int | None = None) -> str:
    """Why megatron-core refuses this interleaved schedule ("" when it runs): the micro-batch group must
    lie in [PP, M] and the last group must not be shorter than PP (``schedules.py``)."""
    group = group or pp
    if not pp <= group <= num_microbatches:
        return (f"interleaved schedule needs PP <= microbatch_group_size_per_vp_stage <= micro-batches; got PP={pp}, "
                f"group={group}, micro-batches={num_microbatches}")
    if 0 < num_microbatches % group < pp:
        return (f"{num_microbatches} micro-batches leave a last group of {num_microbatches % group} < PP={pp} "
                f"(group size {group}); make the micro-batch count a multiple of {group}")
    return ""


def uniform_times(pp: int, vpp: int, fwd: float, bwd: float, wgrad: float = 0.0) -> tuple[tuple[ChunkTimes, ...], ...]:
    """Equal chunk times on every rank (tests, quick estimates)."""
    chunk = ChunkTimes(fwd=fwd, bwd=bwd, wgrad=wgrad)
    return tuple(tuple(chunk for _ in range(vpp)) for _ in range(pp))


__all__ = [
    "ChunkTimes", "Event", "ScheduleResult", "interleaving_problem", "rank_order", "schedule_table", "simulate",
    "uniform_times",
]
