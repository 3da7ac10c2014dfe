"""ZB-H2 (pipeline.zb2) against a hand-derived timeline and Qi et al. 2023 (arXiv:2401.10241) sec. 3 / table 1."""

import pytest

from primus_ext.model.pipeline import ChunkTimes, simulate, uniform_times
from primus_ext.model.pipeline.ops import BWD, FWD, WGRAD
from primus_ext.model.pipeline.registry import get_schedule
from primus_ext.model.pipeline.zb2 import (
    zb_h2,
    zb_h2_in_flight,
    zb_h2_orders,
    zb_h2_problems,
    zb_h2_wgrad_held,
)

UNIT = uniform_times  # uniform_times(pp, 1, F, B + W, W): B here is the whole backward


def starts(result, rank):
    return " ".join(f"{e.kind}{e.microbatch}@{e.start:g}" for e in sorted(
        (e for e in result.events if e.rank == rank), key=lambda e: e.start))


def test_pp2_m4_timeline_by_hand():
    # T_F = T_B = T_W = 1. Caps: rank 0 holds 2P-1 = 3 forwards, rank 1 one; rank r defers at most P-1+r Ws
    # (r0: 1, r1: 2) and runs its oldest W first when it holds more; else a ready B, else a ready F, else a W.
    # t0 r0 F0.  t1 r0 F1, r1 F0 (arrived 1).  t2 r0 F2 (3 in flight), r1 B0 (its own F0 done).
    # t3 r0 B0 (r1's B0 arrived 3), r1 F1.  t4 r0 F3 (B1 not there; 2 in flight < 3), r1 B1.
    # t5 r0 B1 (arrived 5), r1 F2.  t6 r0 holds 2 Ws > 1: W0; r1 B2.  t7 r0 B2; r1 holds 3 > 2: W0.
    # t8 r0 W1 (2 > 1); r1 F3.  t9 r0 W2 (nothing else ready), r1 B3.  t10 r0 B3, r1 W1.  t11 r0 W3, r1 W2.
    # t12 r1 W3 -> makespan 13 = 3m + (P-1).
    r = zb_h2(UNIT(2, 1, 1.0, 2.0, 1.0), 4, timeline=True)
    assert starts(r, 0) == "F0@0 F1@1 F2@2 B0@3 F3@4 B1@5 W0@6 B2@7 W1@8 W2@9 B3@10 W3@11"
    assert starts(r, 1) == "F0@1 B0@2 F1@3 B1@4 F2@5 B2@6 W0@7 F3@8 B3@9 W1@10 W2@11 W3@12"
    assert r.makespan == 13.0


@pytest.mark.parametrize("pp,m", [(2, 4), (3, 6), (4, 12), (4, 16), (8, 32)])
def test_uniform_bubble_is_the_fill_alone(pp, m):
    # Qi et al. table 1 at T_F = T_B = T_W: 1F1B (p-1)*3T, ZB-H1 (p-1)T, ZB-H2 ~0. A synchronous step cannot
    # hide the fill (the last rank's first F starts (p-1)T_F in); the paper's 0 needs its sec. 4 optimizer
    # post-validation. So here: exactly (p-1)*T_F, the last rank busy from its first F to the end.
    r = zb_h2(UNIT(pp, 1, 1.0, 2.0, 1.0), m, timeline=True)
    assert r.makespan == pytest.approx(3 * m + (pp - 1))
    assert r.bubble_time == pytest.approx(pp - 1)
    assert min(e.start for e in r.events if e.rank == pp - 1) == pytest.approx(pp - 1)
    assert simulate("1f1b", UNIT(pp, 1, 1.0, 2.0), m).bubble_time == pytest.approx(3 * (pp - 1))


@pytest.mark.parametrize("pp,m", [(4, 16), (8, 32)])
def test_h2_beats_h1_when_b_outweighs_w(pp, m):
    # table 1: ZB-H1 (p-1)(T_F+T_B-T_W); ZB-H2's extra warm-up forwards and deferred tail Ws hide the
    # (T_B-T_W) part too, leaving the fill (p-1)T_F alone
    times = UNIT(pp, 1, 1.0, 3.0, 1.0)  # F 1, input-grad B 2, W 1
    h1, h2 = simulate("zb-h1", times, m), zb_h2(times, m)
    assert h1.bubble_time == pytest.approx((pp - 1) * (1.0 + 2.0 - 1.0))
    assert h2.bubble_time == pytest.approx((pp - 1) * 1.0)


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 16), (8, 32)])
def test_in_flight_is_2p_minus_1_on_rank_0(pp, m):
    # sec. 3: ZB-H2 holds up to 2P-1 micro-batches (table 1 memory (2p-1)M_B); rank r 2(P-r)-1, the last one 1
    assert [zb_h2_in_flight(r, pp, m) for r in range(pp)] == [2 * (pp - r) - 1 for r in range(pp)]
    assert all(zb_h2_wgrad_held(r, pp, m) <= pp + r for r in range(pp))
    schedule = get_schedule("zb-h2")
    assert schedule.in_flight_microbatches(0, pp, 1, m) == 2 * pp - 1
    assert get_schedule("1f1b").in_flight_microbatches(0, pp, 1, m) == pp


def test_few_microbatches_cap_the_in_flight_count():
    assert [zb_h2_in_flight(r, 4, 2) for r in range(4)] == [2, 2, 2, 1]


def test_every_op_once_and_b_before_w():
    for pp, m in ((3, 5), (4, 9)):
        for rank, order in enumerate(zb_h2_orders(UNIT(pp, 1, 1.0, 2.0, 1.0), m)):
            assert sorted(order) == sorted((k, mb, 0) for k in (FWD, BWD, WGRAD) for mb in range(m)), rank
            assert all(order.index((BWD, mb, 0)) < order.index((WGRAD, mb, 0)) for mb in range(m))


def test_p2p_only_slows_it_down():
    times = (ChunkTimes(fwd=1.2, bwd=2.0, wgrad=0.9), ChunkTimes(fwd=1.0, bwd=2.4, wgrad=1.1),
             ChunkTimes(fwd=0.8, bwd=1.9, wgrad=0.7), ChunkTimes(fwd=1.5, bwd=2.6, wgrad=1.2))
    times = tuple((c,) for c in times)
    base = zb_h2(times, 12)
    previous = base.makespan
    for eps in (1e-6, 0.05, 0.2, 0.5):
        r = zb_h2(times, 12, (eps,) * 3)
        assert r.makespan >= previous - 1e-9
        assert r.critical_p2p <= 2 * 3 * eps * 12 + 1e-9
        previous = r.makespan
    assert base.busy == pytest.approx(tuple(12 * (c[0].bwd + c[0].fwd) for c in times))


def test_legality():
    assert zb_h2_problems(4, None, 8) == [] == zb_h2_problems(4, 1, 1)
    assert "VPP=2" in zb_h2_problems(4, 2, 8)[0]
    assert "PP >= 2" in zb_h2_problems(1, 1, 8)[0]
    assert get_schedule("zb-h2").legality(2, 3, 4)
    with pytest.raises(ValueError, match="one-chunk"):
        zb_h2(UNIT(2, 2, 1.0, 2.0, 1.0), 4)


def test_registered_schedule_runs_the_same_core():
    schedule = get_schedule("zb-h2")
    assert schedule.splits_wgrad and schedule.label == "ZB-H2"
    times = UNIT(3, 1, 1.0, 2.0, 1.0)
    assert schedule.simulate(times, 6).makespan == zb_h2(times, 6).makespan == 3 * 6 + 2
    assert schedule.rank_order(0, 3, 1, 6)[:5] == [(FWD, 0, 0), (FWD, 1, 0), (FWD, 2, 0), (FWD, 3, 0), (FWD, 4, 0)]
    assert schedule.resolve(1, None).name == "1f1b"
