"""Pipeline ops and their replay: the types of ``model.pipeline`` and the core every schedule runs on.

A schedule is a per-rank op order (kind, micro-batch, chunk); ``place`` turns the orders into a topological
``Structure`` (each op's same-rank predecessor and input dependency; ``place_positional``: in the periodic order;
one routine, ``_place``, for every schedule whose ops run alone, whatever its chunk placement), and ``replay`` runs
it: every op starts when its rank is free and its input arrived (upstream forward + p2p, or downstream backward +
p2p).

Overlapped pairs (DualPipe's "F&B", DeepSeek-V3 report arXiv:2412.19437 sec. 3.2.1): one op that runs the
forward of one micro-batch beside the backward of another, each hiding the other's EP all-to-all. The op has two
inputs (``Structure.pairs``: the second half's input and p2p slot); it starts once both arrived and its one
duration slot holds the pair's time, which the schedule sets (``pipeline.dualpipe``: the chunks' paired ``fwd`` +
``bwd``). Both halves' outputs leave at its end. Pure and torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

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
    fwd_unpaired: float = 0.0
    """Seconds more a forward takes when it runs without a partner micro-batch: under
    ``overlap_moe_expert_parallel_comm`` the EP all-to-all that ``fwd`` counts as hidden behind another
    micro-batch's pass stays exposed (``pipeline.unpaired_passes``)."""
    bwd_unpaired: float = 0.0
    """The same for a backward."""


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
    overlapped: bool = False
    """Half of an overlapped F&B pair: the F and the B of one op share its start and end (DualPipe)."""


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
    unpaired: tuple[float, ...] = ()
    """Per rank: what its passes without a partner micro-batch add to its busy time (EP overlap: their
    all-to-all stays exposed); empty when none."""

    @property
    def bubble_time(self) -> float:
        """Idle time of the busiest rank within the makespan."""
        return self.makespan - max(self.busy)

    @property
    def bubble_fraction(self) -> float:
        """Bubble over useful work of the busiest rank ((p-1)/m for uniform 1F1B)."""
        return self.bubble_time / max(self.busy) if max(self.busy) > 0 else 0.0


UNPAIRED_SLOT_KINDS = 3
"""Duration slots: forwards, backwards and weight-grads (``kind * PP * VPP + rank * VPP + chunk``), then the
forwards and backwards that run without a partner micro-batch, ``UNPAIRED_SLOT_KINDS`` kinds further on."""


def duration_slot(kind: int, rank: int, chunk: int, pp: int, vpp: int, unpaired: bool = False) -> int:
    """Index of an op's duration in ``durations``' list."""
    return ((kind + (UNPAIRED_SLOT_KINDS if unpaired else 0)) * pp + rank) * vpp + chunk


def durations(times: tuple[tuple[ChunkTimes, ...], ...]) -> list[float]:
    """Op durations by slot (``duration_slot``): forwards, backwards, weight-grads, unpaired forwards and
    backwards, each rank-major then chunk."""
    chunks = [c for row in times for c in row]
    return ([c.fwd for c in chunks] + [c.bwd for c in chunks] + [c.wgrad for c in chunks]
            + [c.fwd + c.fwd_unpaired for c in chunks] + [c.bwd + c.bwd_unpaired for c in chunks])


@dataclass(frozen=True)
class Structure:
    """Topologically ordered ops; positions are 1-based so that 0 is a zero-time sentinel."""

    ops: tuple[tuple[int, int, int, int], ...]
    """(kind, rank, chunk, micro-batch) per op, in a topological order."""
    steps: tuple[tuple[int, int, int, int], ...]
    """Per op: (same-rank predecessor, input dependency, duration slot, p2p slot); 0 / -1 = none."""
    last: tuple[int, ...]
    """Per rank: position of its last op."""
    pairs: tuple[tuple[int, int, int, int, int], ...] = ()
    """Per op: (input position, p2p slot, kind, chunk, micro-batch) of the pass overlapped with it in one F&B op,
    ``NO_PAIR`` for an op that runs alone; empty when no op is overlapped (every schedule but DualPipe)."""


NO_PAIR = (0, -1, -1, 0, 0)
"""``Structure.pairs`` entry of an op that runs alone (input 0: the zero-time sentinel, p2p slot -1: none)."""


StageOf = Callable[[int, int, int], int]
"""(rank, chunk, pp) -> virtual stage (model order)."""


def loop_stage(rank: int, chunk: int, pp: int) -> int:
    """Megatron's placement: chunk c of rank r is virtual stage c*PP + r."""
    return chunk * pp + rank


def _place(streams: list, pp: int, vpp: int, m: int, unpaired: list | None, stage_of: StageOf,
           strict: bool) -> Structure | None:
    """The one placement routine: ``streams`` of (rank, kind, micro-batch, chunk) ops, each stream placed in its
    order as far as its inputs are placed, the streams swept until every op is (``strict``: one pass; ``None``
    when an op's input is not placed yet). F of stage s waits for F of s-1 (p2p slot s-1), B of s for B of s+1
    (slot s), the last stage's B for its own F; a W has no input (its B precedes it on its rank)."""
    stages = pp * vpp
    stage_at = [[stage_of(r, c, pp) for c in range(vpp)] for r in range(pp)]
    # position of (kind, virtual stage, mb) at flat index (kind * stages + stage) * m + mb; 0 = not yet placed
    placed = [0] * (3 * stages * m)
    ops: list[tuple[int, int, int, int]] = []
    steps: list[tuple[int, int, int, int]] = []
    pointers = [0] * len(streams)
    last = [0] * pp
    lengths = [len(s) for s in streams]
    remaining = sum(lengths)
    while remaining:
        progressed = False
        for i, stream in enumerate(streams):
            ptr, n = pointers[i], lengths[i]
            while ptr < n:
                r, kind, mb, chunk = stream[ptr]
                stage = stage_at[r][chunk]
                if kind == FWD:
                    cslot = stage - 1
                    dep = placed[cslot * m + mb] if stage > 0 else -1
                elif kind == WGRAD:
                    dep, cslot = -1, -1
                elif stage < stages - 1:
                    cslot = stage
                    dep = placed[(stages + stage + 1) * m + mb]
                else:
                    cslot = -1
                    dep = placed[stage * m + mb]
                if dep == 0:
                    break
                ops.append((kind, r, chunk, mb))
                position = len(ops)
                placed[(kind * stages + stage) * m + mb] = position
                alone = unpaired is not None and (kind, mb, chunk) in unpaired[r]
                steps.append((last[r], max(dep, 0), duration_slot(kind, r, chunk, pp, vpp, alone), cslot))
                last[r] = position
                ptr += 1
            remaining -= ptr - pointers[i]
            progressed = progressed or ptr != pointers[i]
            pointers[i] = ptr
        if strict and remaining:
            return None
        assert progressed, "pipeline order deadlocks"
    return Structure(tuple(ops), tuple(steps), tuple(last))


def place(orders: list, pp: int, vpp: int, m: int, unpaired: list | None = None,
          stage_of: StageOf = loop_stage) -> Structure:
    """Per-rank (kind, micro-batch, chunk) orders -> a topological ``Structure``, sweeping the ranks, each as far
    as its inputs are placed. ``unpaired[r]``: rank r's ops that run without a partner micro-batch (their own
    duration slots, ``duration_slot``); ``stage_of``: where chunk c of rank r sits in the model (``loop_stage``,
    or a V: ``zb2.v_stage``)."""
    found = _place([[(r, *op) for op in order] for r, order in enumerate(orders)], pp, vpp, m, unpaired, stage_of,
                   False)
    assert found is not None
    return found


def place_positional(orders: list, pp: int, vpp: int, m: int, unpaired: list | None = None) -> Structure | None:
    """The ops sorted by their position in their rank's order (at each position the forwards by rank, then the
    backwards by reverse rank): periodic in the steady state, unlike ``place``'s sweep order (``pipeline.periodic``).
    ``None`` when that order is not topological."""
    forward, backward = range(pp), range(pp - 1, -1, -1)
    keyed = [(r, *orders[r][t]) for t in range(max(map(len, orders))) for ranks, want in ((forward, FWD),
             (backward, BWD)) for r in ranks if t < len(orders[r]) and orders[r][t][0] == want]
    return _place([keyed], pp, vpp, m, unpaired, loop_stage, True)


def busy_times(times: tuple[tuple[ChunkTimes, ...], ...], m: int,
               unpaired: tuple[float, ...] = ()) -> tuple[float, ...]:
    """Per rank: the sum of its op times, ``m`` passes of each chunk plus what its unpaired passes add."""
    return tuple(m * sum(c.fwd + c.bwd for c in row) + (unpaired[r] if unpaired else 0.0)
                 for r, row in enumerate(times))


def critical_p2p(st: Structure, fin: list[float], durs: list[float], comms: tuple[float, ...]) -> float:
    """Send/recv time on the critical path (walk back from the last op along binding inputs; an overlapped pair
    has two inputs, either may bind)."""
    i = max(st.last, key=lambda pos: fin[pos])
    total = 0.0
    while i > 0:
        p, d, ds, cs = st.steps[i - 1]
        start = fin[i] - durs[ds]
        inputs = ((d, cs), st.pairs[i - 1][:2]) if st.pairs else ((d, cs),)
        nxt = p
        for dep, slot in inputs:
            if dep > 0 and abs(fin[dep] + comms[slot] - start) <= 1e-12 * max(1.0, start) and \
                    fin[dep] + comms[slot] > fin[p]:
                total += comms[slot]
                nxt = dep
                break
        i = nxt
    return total


def replay(schedule: str, st: Structure, times: tuple[tuple[ChunkTimes, ...], ...], m: int, durs: list[float],
            p2p: tuple[float, ...], timeline: bool, unpaired: tuple[float, ...] = ()) -> ScheduleResult:
    """Run a fixed op order: every op starts when its rank is free and its input arrived. ``unpaired``: per
    rank what its passes without a partner add to its chunks' ``fwd`` / ``bwd`` (``ScheduleResult.unpaired``)."""
    comms = (*p2p, 0.0)  # slot -1 -> 0
    fin = [0.0]
    append = fin.append
    if st.pairs:  # overlapped F&B ops wait for both inputs (NO_PAIR adds the 0 s sentinel)
        for (p, d, ds, cs), (d2, cs2, _, _, _) in zip(st.steps, st.pairs, strict=True):
            append(max(fin[p], fin[d] + comms[cs], fin[d2] + comms[cs2]) + durs[ds])
    else:
        for p, d, ds, cs in st.steps:  # the hot loop: finish = max(rank free, input arrived) + duration
            t = fin[p]
            a = fin[d] + comms[cs]
            append((a if a > t else t) + durs[ds])
    finish = tuple(fin[pos] for pos in st.last)
    busy = busy_times(times, m, unpaired)
    events: tuple[Event, ...] = ()
    if timeline:
        events = tuple(
            Event(rank=r, chunk=c, microbatch=mb, kind=KIND_NAMES[k], start=fin[i + 1] - durs[st.steps[i][2]],
                  end=fin[i + 1])
            for i, (k, r, c, mb) in enumerate(st.ops)
        )
        if st.pairs:  # the second half of each overlapped pair, over the same span; both halves flagged
            events = tuple(
                e for i, first in enumerate(events)
                for e in ((first,) if st.pairs[i][2] < 0 else (
                    replace(first, overlapped=True),
                    replace(first, chunk=st.pairs[i][3], microbatch=st.pairs[i][4], kind=KIND_NAMES[st.pairs[i][2]],
                            overlapped=True)))
            )
    return ScheduleResult(schedule=schedule, num_microbatches=m, makespan=max(finish), busy=busy, finish=finish,
                          events=events, critical_p2p=critical_p2p(st, fin, durs, comms) if any(p2p) else 0.0,
                          unpaired=unpaired)


__all__ = ["BWD", "FWD", "KIND_NAMES", "NO_PAIR", "UNPAIRED_SLOT_KINDS", "WGRAD", "ChunkTimes", "Event",
           "ScheduleResult", "StageOf", "Structure", "busy_times", "critical_p2p", "duration_slot", "durations",
           "loop_stage", "place", "place_positional", "replay"]
