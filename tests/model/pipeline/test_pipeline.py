"""Pipeline simulator vs the closed-form bubbles, megatron-core's schedule table, and ZB-H1's paper bubble."""

import itertools

import pytest

from primus_ext.model.pipeline import (
    ChunkTimes,
    rank_order,
    schedule_table,
    simulate,
    uniform_times,
    unpaired_ops,
    unpaired_passes,
)
from primus_ext.model.pipeline.ops import BWD, FWD


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 16), (8, 32)])
def test_1f1b_bubble_is_p_minus_1_over_m(pp, m):
    r = simulate("1f1b", uniform_times(pp, 1, 1.0, 2.0), m)
    assert r.bubble_fraction == pytest.approx((pp - 1) / m)
    assert r.makespan == pytest.approx((m + pp - 1) * 3.0)


@pytest.mark.parametrize("pp,v,m", [(2, 2, 4), (4, 2, 8), (4, 4, 16), (8, 2, 16)])
def test_interleaved_bubble_is_p_minus_1_over_vm(pp, v, m):
    r = simulate("interleaved", uniform_times(pp, v, 1.0 / v, 2.0 / v), m)
    assert r.bubble_fraction == pytest.approx((pp - 1) / (v * m))


def test_schedule_table_matches_megatron_core():
    from megatron.core.pipeline_parallel.schedules import get_schedule_table

    for m, chunks, group in [(8, 2, 4), (5, 2, 2), (12, 3, 4), (6, 4, 8)]:
        assert schedule_table(m, chunks, group) == list(get_schedule_table(m, chunks, group))


def test_every_rank_runs_every_op_once():
    for schedule, v in (("1f1b", 1), ("interleaved", 3)):
        for rank in range(4):
            order = rank_order(schedule, rank, 4, v, 8, 4)
            assert len(order) == len(set(order)) == 2 * 8 * v


def test_zero_bubble_h1_beats_1f1b_with_the_papers_bubble():
    pp, m = 4, 12
    one = simulate("1f1b", uniform_times(pp, 1, 1.0, 2.0, 1.0), m)
    zb = simulate("zb-h1", uniform_times(pp, 1, 1.0, 2.0, 1.0), m)
    assert zb.makespan < one.makespan
    # Qi et al. 2023, table 1: 1F1B bubble (p-1)(F+B+W), ZB-H1 (p-1)(F+B-W); here F=B=W=1
    assert one.bubble_time == pytest.approx((pp - 1) * 3.0)
    assert zb.bubble_time == pytest.approx((pp - 1) * 1.0)
    timeline = simulate("zb-h1", uniform_times(pp, 1, 1.0, 2.0, 1.0), m, timeline=True)
    assert len(timeline.events) == 3 * pp * m


def test_uneven_stages_and_p2p_slow_the_pipeline():
    even = simulate("1f1b", uniform_times(4, 1, 1.0, 2.0), 16)
    heavy = list(uniform_times(4, 1, 1.0, 2.0))
    heavy[3] = (ChunkTimes(fwd=1.5, bwd=3.0),)
    uneven = simulate("1f1b", tuple(heavy), 16)
    assert uneven.makespan > even.makespan
    assert uneven.busy[3] == max(uneven.busy)
    # the slowest stage sets the steady state: makespan >= m * its per-micro-batch time
    assert uneven.makespan >= 16 * 4.5
    with_p2p = simulate("1f1b", uniform_times(4, 1, 1.0, 2.0), 16, (0.1, 0.1, 0.1))
    # at least the fill (3 forward links) and drain (3 backward links) see every send/recv
    assert with_p2p.makespan >= even.makespan + 2 * 3 * 0.1 - 1e-9
    slower = simulate("1f1b", uniform_times(4, 1, 1.0, 2.0), 16, (0.2, 0.2, 0.2))
    assert slower.makespan > with_p2p.makespan


def test_timeline_events_are_consistent():
    r = simulate("interleaved", uniform_times(2, 2, 0.5, 1.0), 4, timeline=True)
    assert len(r.events) == 2 * 2 * 2 * 4
    for rank in range(2):
        ev = sorted((e for e in r.events if e.rank == rank), key=lambda e: e.start)
        assert all(a.end <= b.start + 1e-12 for a, b in itertools.pairwise(ev))
    assert max(e.end for e in r.events) == pytest.approx(r.makespan)


def test_bad_inputs():
    with pytest.raises(ValueError):
        simulate("gpipe", uniform_times(2, 1, 1, 1), 4)
    with pytest.raises(ValueError):
        simulate("zb-h1", uniform_times(2, 2, 1, 1), 4)


def test_interleaving_needs_whole_groups_like_megatron():
    from primus_ext.model.pipeline import interleaving_problem

    assert interleaving_problem(4, 8) == ""
    assert interleaving_problem(4, 10)  # last group of 2 < PP
    assert interleaving_problem(4, 2)  # fewer micro-batches than PP
    assert interleaving_problem(4, 9, 5) == "" and simulate("interleaved", uniform_times(4, 2, 1, 2), 9,
                                                            microbatch_group_size_per_vp_stage=5).makespan > 0
    with pytest.raises(ValueError, match="last group"):
        simulate("interleaved", uniform_times(4, 2, 1, 2), 10)


def test_zero_bubble_defers_at_most_rank_w_passes():
    r = simulate("zb-h1", uniform_times(4, 1, 1.0, 2.0, 1.0), 8, timeline=True)
    for rank in range(4):
        pending = worst = 0
        for e in sorted((e for e in r.events if e.rank == rank), key=lambda e: e.start):
            pending += {"B": 1, "W": -1}.get(e.kind, 0)
            worst = max(worst, pending)
        assert worst <= rank + 1  # the B just run + at most `rank` deferred


def test_moe_overlap_adds_one_interleaved_warmup_forward():
    plain = rank_order("interleaved", 0, 4, 2, 8, 4)
    extra = rank_order("interleaved", 0, 4, 2, 8, 4, extra_warmup=1)
    first_b = [o[0] for o in plain].index(1)
    assert [o[0] for o in extra].index(1) == first_b + 1
    r = simulate("interleaved", uniform_times(4, 2, 0.5, 1.0), 8, moe_a2a_overlap_warmup=True)
    assert r.makespan >= simulate("interleaved", uniform_times(4, 2, 0.5, 1.0), 8).makespan - 1e-9


@pytest.mark.parametrize("pp,m", [(4, 8), (8, 16)])
def test_zero_bubble_is_continuous_in_the_p2p_time(pp, m):
    # ZB-H1 runs a fixed op order (Qi et al. 2023): a B arriving an epsilon late waits, it does not lose its
    # slot to a whole W (before: +7 time units for p2p = 1e-6 at PP=8)
    times = uniform_times(pp, 1, 1.0, 2.0, 1.0)
    base = simulate("zb-h1", times, m)
    order = [(e.rank, e.kind, e.microbatch) for e in simulate("zb-h1", times, m, timeline=True).events]
    previous = base.makespan
    for eps in (1e-9, 1e-6, 1e-3, 0.01, 0.1, 0.5):
        r = simulate("zb-h1", times, m, (eps,) * (pp - 1))
        total = 2 * m * eps * (pp - 1)
        assert previous <= r.makespan <= base.makespan + r.critical_p2p + 1e-9
        assert 0.0 <= r.critical_p2p <= total + 1e-12
        previous = r.makespan
    assert simulate("zb-h1", times, m, (1e-9,) * (pp - 1)).makespan == pytest.approx(base.makespan, abs=1e-7)
    late = simulate("zb-h1", times, m, (1e-6,) * (pp - 1), timeline=True).events
    assert [(e.rank, e.kind, e.microbatch) for e in late] == order


def test_zero_bubble_p2p_on_uneven_stages_stays_bounded():
    times = (ChunkTimes(fwd=1.2, bwd=2.0, wgrad=0.9), ChunkTimes(fwd=1.0, bwd=2.4, wgrad=1.1),
             ChunkTimes(fwd=0.8, bwd=1.9, wgrad=0.7), ChunkTimes(fwd=1.5, bwd=2.6, wgrad=1.2))
    times = tuple((c,) for c in times)
    base = simulate("zb-h1", times, 12)
    for eps in (1e-7, 0.05, 0.3):
        r = simulate("zb-h1", times, 12, (eps, 2 * eps, eps))
        assert 0.0 <= r.makespan - base.makespan <= r.critical_p2p + 1e-9
        assert r.critical_p2p <= 2 * 12 * 4 * eps + 1e-12


@pytest.mark.parametrize(("pp", "vpp", "m"), [(2, 2, 4), (4, 2, 8), (4, 3, 8), (8, 4, 16), (8, 2, 24)])
def test_unpaired_passes_are_the_warmup_forwards_of_the_overlap_schedule(pp, vpp, m):
    """Under EP overlap the interleaved schedule's steady state runs each forward beside a backward; the rest,
    the warm-up forwards (one extra) and as many cool-down backwards, run alone. The count is megatron-core's own
    warm-up (``get_pp_rank_microbatches`` with the overlap, every pass when all are in the warm-up), and it is read
    off the op order too: every pair is a forward directly followed by a backward (while the warm-up leaves a
    steady state of two or more pairs: with one or none the order looks the same, see the next test)."""
    from types import SimpleNamespace

    from megatron.core.pipeline_parallel.schedules import get_pp_rank_microbatches

    for rank in range(pp):
        comm = SimpleNamespace(pp_group=SimpleNamespace(size=lambda: pp, rank=lambda r=rank: r),
                               virtual_pipeline_model_parallel_size=vpp)
        total, _, warmup, _ = get_pp_rank_microbatches(m, vpp, pp, overlap_moe_expert_parallel_comm=True,
                                                       p2p_communicator=comm)
        assert unpaired_passes("interleaved", pp, vpp, m, rank) == min(warmup, total)
        order = rank_order("interleaved", rank, pp, vpp, m, pp, extra_warmup=1)
        pairs = sum(1 for a, b in itertools.pairwise(order) if a[0] == FWD and b[0] == BWD)
        assert sum(1 for op in order if op[0] == BWD) == m * vpp
        assert unpaired_passes("interleaved", pp, vpp, m, rank) == m * vpp - pairs


def test_unpaired_passes_when_the_warm_up_takes_every_forward():
    # PP=4, VPP=2, 4 micro-batches: rank 0's warm-up 3*2 + 4 + 1 = 11 > 8 passes, nothing pairs; rank 2's
    # 1*2 + 4 + 1 = 7 leaves one steady-state pair (megatron-core get_pp_rank_microbatches)
    assert unpaired_passes("interleaved", 4, 2, 4, 0) == 8
    assert unpaired_passes("interleaved", 4, 2, 4, 2) == 7


def test_unpaired_passes_without_pipelining_and_without_combined_1f1b():
    assert unpaired_passes("1f1b", 1, 1, 8, 0) == 1      # first forward, last backward
    assert unpaired_passes("1f1b", 1, 1, 1, 0) == 1
    assert unpaired_passes("1f1b", 4, 1, 8, 0) == 8      # megatron-core has no combined 1F1B here


def test_unpaired_passes_take_their_longer_time_in_the_schedule():
    """Without pipelining the first forward and the last backward run alone: the step grows by exactly their
    extra time; interleaved, the warm-up forwards and cool-down backwards are the longer ops of the timeline."""
    m, f, b, xf, xb = 6, 1.0, 2.0, 0.25, 0.5
    chunk = ChunkTimes(fwd=f, bwd=b, fwd_unpaired=xf, bwd_unpaired=xb)
    plain = simulate("1f1b", ((chunk,),), m)
    alone = simulate("1f1b", ((chunk,),), m, moe_a2a_overlap_warmup=True)
    assert plain.makespan == pytest.approx(m * (f + b))
    assert alone.makespan == pytest.approx(m * (f + b) + xf + xb) == pytest.approx(alone.busy[0])
    pp, vpp, m = 4, 2, 8
    times = tuple(tuple(chunk for _ in range(vpp)) for _ in range(pp))
    for timeline in (True, False):
        result = simulate("interleaved", times, m, moe_a2a_overlap_warmup=True, timeline=timeline)
        for r in range(pp):
            n = unpaired_passes("interleaved", pp, vpp, m, r)
            assert result.busy[r] == pytest.approx(m * vpp * (f + b) + n * (xf + xb))
        if timeline:
            longer = [e for e in result.events if e.end - e.start > (f if e.kind == "F" else b) + 1e-12]
            assert len(longer) == 2 * sum(unpaired_passes("interleaved", pp, vpp, m, r) for r in range(pp))
            assert max(e.end for e in result.events) == pytest.approx(result.makespan)
            fast = result
        else:
            assert result.makespan == pytest.approx(fast.makespan)


def test_the_unpaired_passes_are_the_warm_up_forwards_and_the_cool_down_backwards():
    """Rank 0 of PP4 / VPP2 / 8 micro-batches: its first warm-up-many forwards and its last as many backwards
    (megatron-core's cool-down), not any other backwards."""
    pp, vpp, m = 4, 2, 8
    order = rank_order("interleaved", 0, pp, vpp, m, pp, extra_warmup=1)
    n = unpaired_passes("interleaved", pp, vpp, m, 0)
    forwards = [op for op in order if op[0] == FWD]
    backwards = [op for op in order if op[0] == BWD]
    assert unpaired_ops("interleaved", 0, pp, vpp, m, pp, 1) == frozenset(forwards[:n] + backwards[-n:])
    assert {(mb, c) for k, mb, c in unpaired_ops("interleaved", 0, pp, vpp, m, pp, 1) if k == BWD} == {
        (1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (6, 1), (7, 1), (4, 0), (5, 0), (6, 0), (7, 0)}
    chunk = ChunkTimes(fwd=1.0, bwd=2.0, fwd_unpaired=0.25, bwd_unpaired=0.5)
    times = tuple(tuple(chunk for _ in range(vpp)) for _ in range(pp))
    result = simulate("interleaved", times, m, moe_a2a_overlap_warmup=True, timeline=True)
    long_b = {(e.microbatch, e.chunk) for e in result.events if e.rank == 0 and e.kind == "B" and e.end - e.start > 2.0}
    assert long_b == {(mb, c) for k, mb, c in unpaired_ops("interleaved", 0, pp, vpp, m, pp, 1) if k == BWD}
    assert unpaired_ops("interleaved", 0, pp, vpp, m, pp, 0) == frozenset()
