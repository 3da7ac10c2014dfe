"""Pipeline schedule simulator: 1F1B, interleaved 1F1B (VPP) and zero-bubble ZB-H1.

    >>> from primus_ext.model.pipeline import ChunkTimes, simulate
    >>> times = ((ChunkTimes(fwd=1.0, bwd=2.0),),) * 4             # [rank][chunk], seconds
    >>> r = simulate("1f1b", times, num_microbatches=8)
    >>> r.makespan, r.bubble_fraction                              # 33.0, (4-1)/8

Input: per pipeline rank and model chunk, the time of one micro-batch's forward, backward (input-grad
+ weight-grad) and weight-grad part, and how much longer a forward / backward without a partner
micro-batch takes under EP overlap (``unpaired_ops``); the send/recv time between consecutive virtual stages. Each rank
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
    fixed with the send/recv times like the other schedules (``pipeline.zb``).

The closed forms (p-1)/m and (p-1)/(v*m) are tests of this simulator (tests/model/test_pipeline.py),
not its implementation. Pure and torch-free; the fixed orders are memoised per structure.

Without a timeline, 1F1B and interleaved runs take the fast path (``pipeline.periodic``): the same
recurrence over the ops sorted by their position in their rank's order, simulated until the steady
state repeats exactly and extrapolated from there (tests/model/test_pipeline_periodic.py checks it
against the op-by-op simulation ``simulate_fixed``, which ``timeline=True`` still uses).
"""

from __future__ import annotations

from functools import lru_cache

from primus_ext.model.pipeline.long import budget_of, long_step, reference_plan, simulated_directly
from primus_ext.model.pipeline.ops import (
    BWD,
    FWD,
    ChunkTimes,
    Event,
    ScheduleResult,
    Structure,
    busy_times,
    durations,
    place,
    place_positional,
    replay,
)
from primus_ext.model.pipeline.periodic import Periodic, periodic_structure, simulate_periodic, stretch
from primus_ext.model.pipeline.zb import zb_h1, zb_h1_structure


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


def unpaired_ops(schedule: str, rank: int, pp: int, vpp: int, m: int, group: int,
                 extra: int = 0) -> frozenset[tuple[int, int, int]]:
    """The (kind, micro-batch, chunk) ops of rank ``rank`` that run without a partner micro-batch when
    ``extra`` (``overlap_moe_expert_parallel_comm``): its first ``unpaired_passes`` forwards and last as many
    backwards; none otherwise."""
    if not extra:
        return frozenset()
    order = rank_order(schedule, rank, pp, vpp, m, group, extra)
    n = unpaired_passes(schedule, pp, vpp, m, rank, group)
    forwards = [op for op in order if op[0] == FWD]
    backwards = [op for op in order if op[0] == BWD]
    return frozenset(forwards[:n] + backwards[len(backwards) - n:])


@lru_cache(maxsize=256)
def unpaired_counts(schedule: str, pp: int, vpp: int, m: int, group: int,
                    extra: int = 0) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Per rank and chunk: (forwards, backwards) that run without a partner micro-batch (``unpaired_ops``): the
    warm-up's and cool-down's, the same for every count past the transient (``pipeline.long``)."""
    if not simulated_directly(pp, vpp, m):  # past the transient: the counts of any long step
        reference = next(reference_plan(m, pp, vpp, group), None)
        return unpaired_counts(schedule, pp, vpp, reference[0], group, extra) if reference else \
            tuple(((0, 0),) * vpp for _ in range(pp))
    out = []
    for r in range(pp):
        ops = unpaired_ops(schedule, r, pp, vpp, m, group, extra)
        out.append(tuple((sum(1 for k, _, c in ops if k == FWD and c == chunk),
                          sum(1 for k, _, c in ops if k == BWD and c == chunk)) for chunk in range(vpp)))
    return tuple(out)


def unpaired_seconds(times: tuple[tuple[ChunkTimes, ...], ...], counts: tuple) -> tuple[float, ...]:
    """Per rank: what its unpaired passes add to its busy time (``unpaired_counts``)."""
    return tuple(sum(nf * c.fwd_unpaired + nb * c.bwd_unpaired for c, (nf, nb) in zip(row, n_row, strict=True))
                 for row, n_row in zip(times, counts, strict=True))


@lru_cache(maxsize=256)
def fixed_structure(schedule: str, pp: int, vpp: int, m: int, group: int, extra: int = 0) -> Structure:
    unpaired = [unpaired_ops(schedule, r, pp, vpp, m, group, extra) for r in range(pp)] if extra else None
    return place([rank_order(schedule, r, pp, vpp, m, group, extra) for r in range(pp)], pp, vpp, m, unpaired)


def simulate_fixed(schedule: str, times: tuple[tuple[ChunkTimes, ...], ...], m: int, p2p: tuple[float, ...],
           group: int, timeline: bool, extra: int = 0) -> ScheduleResult:
    pp, vpp = len(times), len(times[0])
    st = fixed_structure(schedule, pp, vpp, m, group, extra)
    unpaired = unpaired_seconds(times, unpaired_counts(schedule, pp, vpp, m, group, extra)) if extra else ()
    return replay(schedule, st, times, m, durations(times), p2p, timeline, unpaired)


# --------------------------------------------------------------------------- entry point
def _positional(schedule: str, pp: int, vpp: int, m: int, group: int, extra: int) -> Structure | None:
    """The ops in their periodic order (``ops.place_positional``); ``None`` when that order is not topological."""
    orders = [rank_order(schedule, r, pp, vpp, m, group, extra) for r in range(pp)]
    unpaired = [unpaired_ops(schedule, r, pp, vpp, m, group, extra) for r in range(pp)]
    return place_positional(orders, pp, vpp, m, unpaired)


def periodic_direct(schedule: str, pp: int, vpp: int, m: int, group: int, extra: int) -> Periodic:
    st = _positional(schedule, pp, vpp, m, group, extra) or fixed_structure(schedule, pp, vpp, m, group, extra)
    return periodic_structure(st.ops, st.steps, st.last, pp, vpp, group)


@lru_cache(maxsize=256)
def periodic_of(schedule: str, pp: int, vpp: int, m: int, group: int, extra: int) -> Periodic:
    """The shift structure for ``m`` micro-batches. Long runs are the structure of a short run with
    whole periods inserted (``stretch``), used when that rule reproduces the short run's next two
    lengths exactly; building the op order of a long run costs ~30 us per op in Python."""
    g = 1 if vpp == 1 else group
    short = m % g + g * max(1, -(-(2 * pp + 2 * g - m % g) // g))
    if m <= short + 4 * g:
        return periodic_direct(schedule, pp, vpp, m, group, extra)
    base = periodic_direct(schedule, pp, vpp, short, group, extra)
    for k in (1, 2):
        if stretch(base, k) != periodic_direct(schedule, pp, vpp, short + k * g, group, extra):
            return periodic_direct(schedule, pp, vpp, m, group, extra)
    return stretch(base, (m - short) // g)


def simulate_fast(schedule: str, times: tuple[tuple[ChunkTimes, ...], ...], m: int, p2p: tuple[float, ...],
                group: int, extra: int = 0) -> ScheduleResult:
    """``simulate_fixed`` without the timeline, extrapolating the periodic steady state (``pipeline.periodic``)."""
    pp, vpp = len(times), len(times[0])
    per = periodic_of(schedule, pp, vpp, m, group, extra)
    finish, critical = simulate_periodic(per, durations(times), (*p2p, 0.0))
    unpaired = unpaired_seconds(times, unpaired_counts(schedule, pp, vpp, m, group, extra)) if extra else ()
    return ScheduleResult(schedule=schedule, num_microbatches=m, makespan=max(finish),
                          busy=busy_times(times, m, unpaired), finish=finish,
                          critical_p2p=critical if any(p2p) else 0.0, unpaired=unpaired)


def worth_extrapolating(schedule: str, pp: int, vpp: int, m: int, group: int, extra: int) -> bool:
    """Whether the fast path beats the op-by-op loop. Measured on the DeepSeek-V3 tuner's calls: the
    repetition shows after about one period on interleaved schedules (the fast path wins from ~50 ops
    on), but only after up to ~PP periods on 1F1B (a slow wave crossing identical ranks), and each
    simulated op costs ~1.6x the plain loop's (it also carries the critical p2p)."""
    # 1F1B's positional order: invariant run from (PP+1)^2 to n - PP(PP-1), window 2PP-1, period 2PP ops;
    # skipping more than half of the n = 2*PP*m ops after a PP-period wait needs m > 4*PP + 3
    return vpp > 1 or m > 4 * pp + 3


@lru_cache(maxsize=8192)
def simulate_cached(schedule: str, times: tuple[tuple[ChunkTimes, ...], ...], m: int, p2p: tuple[float, ...],
                     group: int, extra: int) -> ScheduleResult:
    if schedule == "zb-h1":
        return zb_h1(times, m, p2p, False)
    if worth_extrapolating(schedule, len(times), len(times[0]), m, group, extra):
        return simulate_fast(schedule, times, m, p2p, group, extra)
    return simulate_fixed(schedule, times, m, p2p, group, False, extra)


def clear_schedule_cache() -> None:
    """Forget memoised schedule results (op orders stay: they depend on the structure only; ZB-H1's, chosen on
    the op times, go too)."""
    simulate_cached.cache_clear()
    zb_h1_structure.cache_clear()


def simulate(schedule: str, times: tuple[tuple[ChunkTimes, ...], ...], num_microbatches: int,
             p2p: tuple[float, ...] = (), *, microbatch_group_size_per_vp_stage: int | None = None,
             moe_a2a_overlap_warmup: bool = False, timeline: bool = False) -> ScheduleResult:
    """Simulate one step's forward/backward over ``num_microbatches`` micro-batches.

    ``times[rank][chunk]``: per-micro-batch chunk times; ``p2p[s]``: send/recv seconds between virtual
    stage s and s+1 (virtual stage = chunk * PP + rank), defaults to 0. ``timeline=True`` returns every
    op as an ``Event`` (not memoised); otherwise the result is memoised on the inputs.
    ``moe_a2a_overlap_warmup``: ``overlap_moe_expert_parallel_comm``'s combined 1F1B: Megatron's extra
    interleaved warm-up forward, and the passes without a partner micro-batch (``unpaired_ops``) take their
    chunk's ``fwd_unpaired`` / ``bwd_unpaired`` longer.
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
    extra = 1 if moe_a2a_overlap_warmup and schedule != "zb-h1" else 0
    if vpp == 1 and schedule == "interleaved":
        schedule = "1f1b"
    if schedule == "interleaved":
        problem = interleaving_problem(pp, num_microbatches, group)
        if problem:
            raise ValueError(problem)
    budget = budget_of(schedule)
    if not simulated_directly(pp, vpp, num_microbatches, budget):  # closed form within the op budget; no timeline
        return long_step(lambda k: simulate_cached(schedule, times, k, p2p, group, extra), num_microbatches,
                         pp, vpp, group, budget)
    if timeline:
        if schedule == "zb-h1":
            return zb_h1(times, num_microbatches, p2p, True)
        return simulate_fixed(schedule, times, num_microbatches, p2p, group, True, extra)
    return simulate_cached(schedule, times, num_microbatches, p2p, group, extra)


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


def unpaired_passes(schedule: str, pp: int, vpp: int, num_microbatches: int, rank: int,
                    group: int | None = None) -> int:
    """Forward chunk passes rank ``rank`` runs without a partner under Megatron's combined 1F1B
    (``overlap_moe_expert_parallel_comm``), and as many backward ones: their EP all-to-all has no other
    micro-batch's compute to hide behind.

    megatron-core ``pipeline_parallel/combined_1f1b.py``: without pipelining the first micro-batch's forward
    and the last one's backward run alone, every other forward beside the previous micro-batch's backward; the
    interleaved schedule pairs forward k + warm-up with backward k in its steady state, so its warm-up forwards
    ((PP-r-1)*2 + (VPP-1)*group + 1, the +1 the extra one the overlap schedules) and as many cool-down backwards
    run alone. Other schedules have no combined 1F1B (megatron-core asserts VPP > 1 when PP > 1): nothing pairs.
    """
    total = num_microbatches * vpp
    if pp == 1 and vpp == 1:
        return 1
    if schedule == "interleaved" and vpp > 1:
        return min((pp - rank - 1) * 2 + (vpp - 1) * (group or pp) + 1, total)
    return total


def uniform_times(pp: int, vpp: int, fwd: float, bwd: float, wgrad: float = 0.0) -> tuple[tuple[ChunkTimes, ...], ...]:
    """Equal chunk times on every rank (tests, quick estimates)."""
    chunk = ChunkTimes(fwd=fwd, bwd=bwd, wgrad=wgrad)
    return tuple(tuple(chunk for _ in range(vpp)) for _ in range(pp))


__all__ = ["ChunkTimes", "Event", "ScheduleResult", "interleaving_problem", "rank_order", "schedule_table", "simulate",
           "uniform_times", "unpaired_counts", "unpaired_ops", "unpaired_passes", "unpaired_seconds"]
