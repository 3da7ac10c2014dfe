"""ZB-V, V-half, V-min (pipeline.zbv) against hand-derived timelines, Qi et al. 2024 (arXiv:2405.15362) and the
orders Primus's schedulers build (zerobubble/scheduler/zbv.py, zbv_greedy.py), derived by reading them."""

import pytest

from primus_ext.model.pipeline import simulate, uniform_times
from primus_ext.model.pipeline.ops import BWD, FWD, WGRAD
from primus_ext.model.pipeline.registry import get_schedule
from primus_ext.model.pipeline.zbv import (
    block_order,
    block_slots,
    in_flight_chunks,
    simulate_v,
    slots_peak,
    squeeze,
    v_half_block,
    v_min_block,
    v_orders,
    v_problems,
)

V = ("zb-v", "v-half", "v-min")


def unit(pp):
    return uniform_times(pp, 2, 1.0, 2.0, 1.0)  # per chunk: F 1, input-grad B 1, W 1


def starts(result, rank):
    return " ".join(f"{e.kind}{e.chunk}.{e.microbatch}@{e.start:g}" for e in sorted(
        (e for e in result.events if e.rank == rank), key=lambda e: e.start))


def test_v_min_pp2_m4_timeline_by_hand():
    # V-Min block, P=2 (no gap: 3 does not divide 2): rank 0 slots F0 0, F1 3, B1 4, B0 7; rank 1 F0 1, F1 2,
    # B1 5, B0 6; + 6 per micro-batch. Peaks of the block: 2 held F->B, 3 F->W (rank 1: F0.0 F1.0 F0.1 before
    # its first W at 9). Squeeze, warm-up (before rank 0's B0.0 at 7): rank 0's F0.1 (slot 6) may go to a free
    # slot after F0.0: 1 and 2 would hold 3 F->B (F0.0 F0.1 F1.0), 5 holds 2 -> slot 5, W1.0 then takes 6.
    # Cool-down (after rank 0's F0.3 at 18): every op already sits right after its input. Free slots run a
    # waiting W, chunk 1's first. Replayed (start = max(rank free, input done)): r0 F0.0 0; r1 F0.0 1, F1.0 2
    # (the V's turn is local); r0 F1.0 3, B1.0 4 (last stage: its own F), F0.1 5, W1.0 6; r1 B1.0 5, B0.0 6;
    # r0 B0.0 7, W0.0 8; r1 F0.1 7, F1.1 8, W1.0 9, W0.0 10; r0 F1.1 9 ... a 6-slot period; at the end r1 B1.3
    # 23, B0.3 24, r0 B0.3 25, W0.3 26.
    r = simulate_v("v-min", unit(2), 4, timeline=True)
    assert starts(r, 0) == ("F0.0@0 F1.0@3 B1.0@4 F0.1@5 W1.0@6 B0.0@7 W0.0@8 F1.1@9 B1.1@10 W1.1@11 F0.2@12 "
                            "B0.1@13 W0.1@14 F1.2@15 B1.2@16 W1.2@17 F0.3@18 B0.2@19 W0.2@20 F1.3@21 B1.3@22 "
                            "W1.3@23 B0.3@25 W0.3@26")
    assert starts(r, 1) == ("F0.0@1 F1.0@2 B1.0@5 B0.0@6 F0.1@7 F1.1@8 W1.0@9 W0.0@10 B1.1@11 B0.1@12 F0.2@13 "
                            "F1.2@14 W1.1@15 W0.1@16 B1.2@17 B0.2@18 F0.3@19 F1.3@20 W1.2@21 W0.2@22 B1.3@23 "
                            "B0.3@24 W1.3@25 W0.3@26")
    assert r.makespan == 27.0  # busy 24: rank 0 idles 1-3 (waiting for the V to turn) and 24-25


def test_zb_v_pp2_m4_timeline_by_hand():
    # Greedy, cap 2P = 4 chunk-micro-batches in flight (an F of chunk 0 needs room for 2, of chunk 1 for 1),
    # at most 4 W deferred; a ready B first (chunk 0's first), then a ready F (chunk 1's first), then a W.
    # r0: F0.0 0, F0.1 1, F0.2 2 (3 in flight: no room for another chunk-0 F), F1.0 3 (r1 turned it at 2-3),
    # B1.0 4, F1.1 5, B1.1 6, B0.0 7 (r1's B0.0 6-7), F0.3 8 (2 in flight), B0.1 9, W1.0 10 (F1.2 not back
    # yet), F1.2 11, B1.2 12, F1.3 13, B1.3 14, W1.1 15, B0.2 16, W0.0 17, W0.1 18, W1.2 19, B0.3 20, then Ws.
    # r1: F0.0 1, F1.0 2, F0.1 3, F1.1 4 (4 in flight), B1.0 5, B0.0 6, B1.1 7, B0.1 8, F0.2 9, F1.2 10,
    # F0.3 11, F1.3 12, B1.2 13, then 5 W deferred > 4: W1.0 14, B0.2 15, W0.0 16, B1.3 17, W1.1 18, B0.3 19.
    r = simulate_v("zb-v", unit(2), 4, timeline=True)
    assert starts(r, 0) == ("F0.0@0 F0.1@1 F0.2@2 F1.0@3 B1.0@4 F1.1@5 B1.1@6 B0.0@7 F0.3@8 B0.1@9 W1.0@10 "
                            "F1.2@11 B1.2@12 F1.3@13 B1.3@14 W1.1@15 B0.2@16 W0.0@17 W0.1@18 W1.2@19 B0.3@20 "
                            "W1.3@21 W0.2@22 W0.3@23")
    assert starts(r, 1) == ("F0.0@1 F1.0@2 F0.1@3 F1.1@4 B1.0@5 B0.0@6 B1.1@7 B0.1@8 F0.2@9 F1.2@10 F0.3@11 "
                            "F1.3@12 B1.2@13 W1.0@14 B0.2@15 W0.0@16 B1.3@17 W1.1@18 B0.3@19 W0.1@20 W1.2@21 "
                            "W0.2@22 W1.3@23 W0.3@24")
    assert r.makespan == 25.0


def test_v_half_block_order_by_hand():
    # V-Half block, P=2 (gap 3: P even): rank 0 F0 0, F1 3P-2 = 4, B1 3P+3-1 = 8, B0 6P+3-2 = 13. Two
    # micro-batches: F0.0@0 F1.0@4 F0.1@6 B1.0@8 W1.0@9 F1.1@10 B0.0@13 B1.1@14 W1.1@15 W0.0@16 B0.1@19 +W0.1
    assert v_half_block(2)[0] == (0, 4, 8, 13)
    assert block_order(v_half_block(2)[0], 2) == [
        (FWD, 0, 0), (FWD, 0, 1), (FWD, 1, 0), (BWD, 0, 1), (WGRAD, 0, 1), (FWD, 1, 1), (BWD, 0, 0), (BWD, 1, 1),
        (WGRAD, 1, 1), (WGRAD, 0, 0), (BWD, 1, 0), (WGRAD, 1, 0)]


@pytest.mark.parametrize("pp,m", [(2, 4), (3, 6), (4, 8), (4, 16), (8, 32), (16, 64)])
def test_zb_v_bubble_is_the_fill_at_1f1b_memory(pp, m):
    # arXiv:2405.15362 table 1: ZB-V ~zero bubble at 1F1B's activation memory. A synchronous step keeps the fill,
    # (P-1) chunk forwards (half a stage each): ZB-V halves 1F1B-on-stages' first-F delay.
    r = simulate_v("zb-v", unit(pp), m)
    assert r.bubble_time == pytest.approx(pp - 1)
    one = simulate("1f1b", uniform_times(pp, 1, 2.0, 4.0), m)  # the same work on whole stages
    assert one.bubble_time == pytest.approx(6 * (pp - 1))
    assert [in_flight_chunks("zb-v", rank, pp, m) for rank in range(pp)] == [2 * pp] * pp  # = 1F1B's P stages
    assert get_schedule("zb-v").in_flight_microbatches(0, pp, 2, m) == get_schedule("1f1b").in_flight_microbatches(
        0, pp, 1, m) == pp


@pytest.mark.parametrize("pp", [8, 16, 32])
def test_v_half_and_v_min_memory_fractions(pp):
    # arXiv:2405.15362 sec. 3: V-Half ~1/2, V-Min ~1/3 of 1F1B's activations (2P chunk-micro-batches on rank 0),
    # asymptotically: a block's lifespans sum to 6P-1 (+3) resp. 4P (+2) slots over a 6-slot period, and the
    # peak adds at most one micro-batch begun before the oldest ends, so the fraction is 1/2 resp. 1/3 + O(1/P);
    # tolerance 1/P (measured: V-Half P+2 chunks, V-Min ceil(2P/3)+0..1).
    m = 2 * pp  # past the ramp: the steady state's memory
    for schedule, fraction in (("v-half", 1 / 2), ("v-min", 1 / 3)):
        peak = max(in_flight_chunks(schedule, rank, pp, m) for rank in range(pp))
        assert fraction <= peak / (2 * pp) <= fraction + 1 / pp + 1e-9, schedule
        block = (v_half_block if schedule == "v-half" else v_min_block)(pp)
        limit = [max(slots_peak(block_slots(b, m))[i] for b in block) for i in (0, 1)]
        squeezed = [slots_peak(slots) for slots in squeeze([block_slots(b, m) for b in block], m)]
        assert max(p[0] for p in squeezed) == limit[0] and max(p[1] for p in squeezed) <= limit[1]
        assert max(in_flight_chunks(schedule, rank, pp, m) for rank in range(pp)) == limit[0]


@pytest.mark.parametrize("pp,m", [(4, 16), (8, 32)])
def test_bubbles_order_zb_v_below_v_half_v_min_below_1f1b(pp, m):
    one = simulate("1f1b", uniform_times(pp, 1, 2.0, 4.0), m).bubble_time
    zbv, half, vmin = (simulate_v(s, unit(pp), m).bubble_time for s in V)
    assert zbv < half < vmin < one  # the paper's order: more memory, fewer bubbles (sec. 3, arXiv:2405.15362)
    # the building blocks' steady state has no bubble: more micro-batches add no idle time
    assert simulate_v("v-min", unit(pp), 2 * m).bubble_time == pytest.approx(vmin)
    assert simulate_v("v-half", unit(pp), 2 * m).bubble_time == pytest.approx(half)


def test_zb_v_warm_up_matches_primus_zbv():
    # Primus zbv.py (try_v_schedule), read for P=2, T_F=T_B=T_W, 2P chunks of memory: every stage puts F0.0;
    # the last stage turns F1.0; stage 0 adds chunk-0 forwards while 2 more fit and they end before F1.0 comes
    # back (F0.1, F0.2), then F1.0; stage 1 alternates F0.1, F1.1 until it has run as many forwards as stage 0
    # (4); then each round puts one B per stage (B1.0 on both) and one F (stage 0: F1.1). From there Primus
    # alternates one B and one F per round (stage 1 runs F0.2 next) where this greedy runs ready Bs first
    # (B0.0): the warm-up agrees, the steady state differs in order, not in memory or bubble.
    orders = v_orders("zb-v", unit(2), 4)
    assert orders[0][:6] == ((FWD, 0, 0), (FWD, 1, 0), (FWD, 2, 0), (FWD, 0, 1), (BWD, 0, 1), (FWD, 1, 1))
    assert orders[1][:5] == ((FWD, 0, 0), (FWD, 0, 1), (FWD, 1, 0), (FWD, 1, 1), (BWD, 0, 1))


def test_v_min_steady_state_matches_primus_pattern():
    # Primus zbv_greedy.py stable_pattern_v_min, P=4 (no gap): rank 0 at slots 0, 2P-1 = 7, 2P = 8, 4P-1 = 15,
    # i.e. 0, 1, 2, 3 mod 6: each period runs F0(k) F1(k-1) B1(k-1) B0(k-2), then the two Ws W1(k-1) W0(k-2)
    # (put_w: a free slot takes chunk 1's W first). Its reorder pass moves warm-up / cool-down ops only.
    assert v_min_block(4)[0] == (0, 7, 8, 15)
    order = list(v_orders("v-min", unit(4), 12)[0])
    k = 5
    start = order.index((FWD, k, 0))
    assert order[start:start + 6] == [(FWD, k, 0), (FWD, k - 1, 1), (BWD, k - 1, 1), (BWD, k - 2, 0),
                                      (WGRAD, k - 1, 1), (WGRAD, k - 2, 0)]
    assert v_min_block(3)[0] == (0, 5, 8, 13)  # 3 | P: the 2-slot gap keeps the four offsets distinct mod 6


@pytest.mark.parametrize("schedule", V)
def test_every_op_once_in_a_v(schedule):
    for pp, m in ((2, 3), (3, 7), (4, 8)):
        for order in v_orders(schedule, unit(pp), m):
            assert sorted(order) == sorted((k, mb, c) for k in (FWD, BWD, WGRAD) for mb in range(m) for c in (0, 1))
            assert all(order.index((BWD, mb, c)) < order.index((WGRAD, mb, c)) for mb in range(m) for c in (0, 1))


@pytest.mark.parametrize("schedule", V)
def test_the_turn_is_local_and_p2p_only_slows(schedule):
    pp, m = 3, 6
    base = simulate_v(schedule, unit(pp), m)
    turn = [0.0] * (2 * pp - 1)
    turn[pp - 1] = 5.0  # chunk 0 -> chunk 1 on rank P-1: no send/recv
    assert simulate_v(schedule, unit(pp), m, tuple(turn)).makespan == base.makespan
    slow = simulate_v(schedule, unit(pp), m, (0.3,) * (2 * pp - 1))
    assert slow.makespan > base.makespan and slow.critical_p2p > 0


def test_uneven_chunks_follow_the_v():
    # rank 0 holds the first and the last layers: a slow chunk 1 on rank 0 slows every V schedule
    from primus_ext.model.pipeline import ChunkTimes

    slow = list(unit(3))
    slow[0] = (slow[0][0], ChunkTimes(fwd=2.0, bwd=4.0, wgrad=2.0))
    for schedule in V:
        assert simulate_v(schedule, tuple(slow), 6).makespan > simulate_v(schedule, unit(3), 6).makespan


def test_legality():
    for schedule in V:
        assert v_problems(schedule, 4, None, 8) == [] == v_problems(schedule, 4, 2, 1)
        assert "VPP=4" in " ".join(v_problems(schedule, 4, 4, 8))
        assert "PP >= 2" in " ".join(v_problems(schedule, 1, None, 8))
        assert get_schedule(schedule).legality(4, 3, 8)
    with pytest.raises(ValueError, match="2 chunks"):
        simulate_v("zb-v", uniform_times(2, 1, 1.0, 2.0, 1.0), 4)


@pytest.mark.parametrize("schedule", V)
def test_registered_v_schedules(schedule):
    s = get_schedule(schedule)
    assert s.chunk_placement == "v" and s.chunks_per_rank(None) == 2 and s.splits_wgrad
    assert [s.stage_of(r, c, 4) for c in (0, 1) for r in range(4)] == [0, 1, 2, 3, 7, 6, 5, 4]
    assert s.simulate(unit(3), 6).makespan == simulate_v(schedule, unit(3), 6).makespan
    assert sum(s.chunk_in_flight(0, 3, 2, 6)) == in_flight_chunks(schedule, 0, 3, 6)
    assert s.resolve(4, None) is s and s.resolve(1, None).name == "1f1b"
    assert len(s.rank_order(1, 3, 2, 6)) == 3 * 2 * 6
