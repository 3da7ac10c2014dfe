"""DualPipe / DualPipeV (DeepSeek-V3 report arXiv:2412.19437 sec. 3.2.1, table 2): hand-derived timelines, the
report's bubble and memory, the op order against torch's ``ScheduleDualPipeV``, legality and the registry."""

import itertools

import pytest

from primus_ext.errors import PrimusExtError
from primus_ext.model.pipeline import ChunkTimes, uniform_times
from primus_ext.model.pipeline.dualpipe import (
    F_AND_B,
    IGRAD,
    dualpipe_problems,
    in_flight_by_chunk,
    in_flight_chunks,
    in_flight_stages,
    model_copies,
    op_order,
    simulate_dualpipe,
)
from primus_ext.model.pipeline.ops import BWD, FWD, WGRAD
from primus_ext.model.pipeline.registry import get_schedule

F, B, W = 1.0, 2.0, 1.0  # input-grad B - W = 1, an overlapped pair F&B = F + B = 3


def starts(result, rank):
    """(kind, chunk, micro-batch, start) of a rank's ops in time order (a pair's two halves share the start)."""
    return [(e.kind, e.chunk, e.microbatch, e.start) for e in sorted(
        (e for e in result.events if e.rank == rank), key=lambda e: (e.start, e.kind != "F"))]


def test_dualpipe_pp2_m4_hand_timeline():
    # PP=2: both ranks are middle ranks (h=0, H=1), 2 micro-batches per direction. Rank 0 holds copy 0 = stage 0
    # of direction 0 (micro-batches 0, 1) and copy 1 = stage 1, the last, of direction 1 (micro-batches 2, 3);
    # rank 1 the mirror. Steps: 2: F0 F1 | 4: F0, B1 apart (middle rank), then F1&B0 | 6: B1, input-grad B0 | 8: W.
    # rank 0: F(0,mb0) 0-1; F(1,mb2) needs rank 1's F(1,mb2) [0-1] -> 1-2; F(0,mb1) 2-3; B(1,mb2) (its loss) 3-5;
    #   F(1,mb3)&B(0,mb0): inputs at 3 and 5 (rank 1's B(0,mb0) 3-5) -> 5-8; B(1,mb3) 8-10; input-grad B(0,mb1)
    #   needs rank 1's B(0,mb1) [8-10] -> 10-11; W 11-12. Rank 1 is the mirror image: no bubble ((PP/2-1) = 0).
    r = simulate_dualpipe("dualpipe", uniform_times(2, 2, F, B, W), 4, timeline=True)
    assert starts(r, 0) == [("F", 0, 0, 0.0), ("F", 1, 2, 1.0), ("F", 0, 1, 2.0), ("B", 1, 2, 3.0),
                            ("F", 1, 3, 5.0), ("B", 0, 0, 5.0), ("B", 1, 3, 8.0), ("B", 0, 1, 10.0), ("W", 0, 1, 11.0)]
    assert starts(r, 1) == [("F", 1, 2, 0.0), ("F", 0, 0, 1.0), ("F", 1, 3, 2.0), ("B", 0, 0, 3.0),
                            ("F", 0, 1, 5.0), ("B", 1, 2, 5.0), ("B", 0, 1, 8.0), ("B", 1, 3, 10.0), ("W", 1, 3, 11.0)]
    assert r.makespan == 12.0 and r.busy == (12.0, 12.0) and r.num_microbatches == 4


def test_dualpipev_pp2_m4_hand_timeline():
    # V: rank 0 holds stages 0 and 3 (the loss), rank 1 stages 1 and 2. Rank 0 (h=0, H=2): 1: F0 F0 | 2: F0 F1 |
    # 3: I1 W F1 | 4: F0&B1, F1&B0 | 5: B1, F1&B0 | 6: B1, I0 | 7: W, I0 | 8: W. Rank 1 (h=1, the middle/last rank):
    # 2: (F0 F1) x2 | 4: F0, B1 apart, F1&B0, F0&B1, F1&B0 | 6: B1 B0, I1 I0 | 8: W W.
    # rank 0: F(s0) mb0-2 at 0, 1, 2; F(s3,mb0) needs rank 1's F(s2,mb0) [2-3] -> 3-4; I 4-5; W 5-6; F(s3,mb1) needs
    #   F(s2,mb1) [4-5] -> 6-7; F(s0,mb3)&B(s3,mb1) 7-10; F(s3,mb2)&B(s0,mb0) waits for rank 1's pair [8-11] -> 11-14;
    #   B(s3,mb2) 14-16; F(s3,mb3)&B(s0,mb1) waits for rank 1 [14-17] -> 17-20; B(s3,mb3) 20-22; I(s0,mb2) needs
    #   rank 1's B(s1,mb2) [19-21] -> 22-23; W 23-24; I(s0,mb3) needs rank 1's I(s1,mb3) [23-24] -> 24-25; W 25-26.
    # rank 1: F(s1,mb0) 1-2, F(s2,mb0) 2-3, F(s1,mb1) 3-4, F(s2,mb1) 4-5, F(s1,mb2) 5-6; B(s2,mb0) needs rank 0's
    #   I(s3,mb0) [4-5] -> 6-8; F(s2,mb2)&B(s1,mb0) 8-11; F(s1,mb3)&B(s2,mb1) needs rank 0's pair [7-10] -> 11-14;
    #   F(s2,mb3)&B(s1,mb1) 14-17; B(s2,mb2) (rank 0's B(s3,mb2) ends 16) 17-19; B(s1,mb2) 19-21; I(s2,mb3) needs
    #   rank 0's B(s3,mb3) [20-22] -> 22-23; I(s1,mb3) 23-24; W 24-25; W 25-26.
    # Makespan 26, busy 4 * (F + B) * 2 chunks = 24: bubble 2 = (PP_stages/2 - 1)(F&B + B - 3W) = 1 * (3 + 2 - 3).
    r = simulate_dualpipe("dualpipev", uniform_times(2, 2, F, B, W), 4, timeline=True)
    assert [t for *_, t in starts(r, 0)] == [0, 1, 2, 3, 4, 5, 6, 7, 7, 11, 11, 14, 17, 17, 20, 22, 23, 24, 25]
    assert [(k, c, mb) for k, c, mb, _ in starts(r, 0)] == [
        ("F", 0, 0), ("F", 0, 1), ("F", 0, 2), ("F", 1, 0), ("B", 1, 0), ("W", 1, 0), ("F", 1, 1), ("F", 0, 3),
        ("B", 1, 1), ("F", 1, 2), ("B", 0, 0), ("B", 1, 2), ("F", 1, 3), ("B", 0, 1), ("B", 1, 3), ("B", 0, 2),
        ("W", 0, 2), ("B", 0, 3), ("W", 0, 3)]
    assert [t for *_, t in starts(r, 1)] == [1, 2, 3, 4, 5, 6, 8, 8, 11, 11, 14, 14, 17, 19, 22, 23, 24, 25]
    assert r.makespan == 26.0 and r.busy == (24.0, 24.0) and r.bubble_time == 2.0


@pytest.mark.parametrize("schedule", ["dualpipe", "dualpipev"])
@pytest.mark.parametrize("pp", [2, 4, 6, 8])
def test_bubble_is_the_reports_closed_form(schedule, pp):
    """Report table 2: DualPipe's bubble (PP/2-1)(F&B + B - 3W); the DualPipe README gives DualPipeV the same with
    PP its 2*PP stages, i.e. (PP-1)(...). It holds exactly on uniform stages without p2p when the input-grad
    B - W equals F and W <= F (the figure's proportions); with W > F the bubble stays at (H-1)*2F."""
    big_h = pp // 2 if schedule == "dualpipe" else pp
    for m, (f, w) in itertools.product((2 * pp, 2 * pp + 2, 4 * pp), ((1.0, 1.0), (1.0, 0.5), (2.0, 0.3), (1.0, 0.0))):
        b = f + w
        r = simulate_dualpipe(schedule, uniform_times(pp, 2, f, b, w), m)
        assert r.bubble_time == pytest.approx((big_h - 1) * ((f + b) + b - 3 * w))
        assert r.busy[0] == pytest.approx((m if schedule == "dualpipev" else m // 2) * 2 * (f + b))
    wide = simulate_dualpipe(schedule, uniform_times(pp, 2, 1.0, 3.0, 2.0), 2 * pp)
    assert wide.bubble_time == pytest.approx((big_h - 1) * 2.0)


def test_dualpipe_bubble_below_1f1b_and_zb_h1():
    # report table 2 at PP=8, F=1, B=2, W=1, 20 micro-batches (the README figure's shape): 1F1B (PP-1)(F+B) = 21,
    # ZB1P (PP-1)(F+B-2W) = 7, DualPipe (PP/2-1)(F&B+B-3W) = 3*(3+2-3) = 6; the first two from this package's
    # simulator (schedules.simulate), on the same stages
    from primus_ext.model.pipeline import simulate

    pp, m = 8, 20
    dual = simulate_dualpipe("dualpipe", uniform_times(pp, 2, F, B, W), m).bubble_time
    one = simulate("1f1b", uniform_times(pp, 1, F, B, W), m).bubble_time
    zb = simulate("zb-h1", uniform_times(pp, 1, F, B, W), m).bubble_time
    assert (dual, zb, one) == pytest.approx((6.0, 7.0, 21.0))


@pytest.mark.parametrize(("schedule", "pp", "m"), [("dualpipe", 2, 4), ("dualpipe", 4, 8), ("dualpipe", 8, 20),
                                                   ("dualpipev", 2, 4), ("dualpipev", 4, 9), ("dualpipev", 8, 16)])
def test_peak_in_flight_activations(schedule, pp, m):
    # report table 2: PP+1 activations per DualPipe device (its chunks are whole stages); the README: PP+1 for
    # DualPipeV too with PP its 2*PP half-size stages, i.e. 2*PP+1 chunks = PP + 1/2 whole stages
    for rank in range(pp):
        if schedule == "dualpipe":
            assert in_flight_chunks(schedule, rank, pp, m) == pp + 1 == in_flight_stages(schedule, rank, pp, m)
        else:
            assert in_flight_chunks(schedule, rank, pp, m) == 2 * pp + 1
            assert in_flight_stages(schedule, rank, pp, m) == pp + 0.5
        # per chunk: DualPipe's copies hold what a 1F1B stage holds (stage r of direction 0: PP - r; stage PP-1-r of
        # direction 1: r + 1); DualPipeV's chunk 0 its 2(PP-r-1) + (r+1) warm-up forwards + the steady state's one
        expected = (pp - rank, rank + 1) if schedule == "dualpipe" else (2 * pp - rank, rank + 1)
        assert in_flight_by_chunk(schedule, rank, pp, m) == expected
        assert get_schedule(schedule).chunk_in_flight(rank, pp, 1, m) == expected
        assert get_schedule(schedule).in_flight_microbatches(rank, pp, 1, m) == in_flight_stages(schedule, rank, pp, m)


def test_parameter_copies():
    # report table 2: DualPipe 2x parameters; DualPipeV 1x (one model cut in 2*PP chunks)
    assert model_copies("dualpipe") == get_schedule("dualpipe").model_copies == 2
    assert model_copies("dualpipev") == get_schedule("dualpipev").model_copies == 1


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (2, 5), (4, 8), (4, 11), (8, 16), (8, 20)])
def test_dualpipev_order_is_torchs(pp, m):
    """torch 2.13 ``ScheduleDualPipeV`` (after deepseek-ai/DualPipe's dualpipev.py) builds the same per-rank order:
    stage indices, micro-batches, overlapped pairs, input-grad-only backwards and the W queue."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    from types import SimpleNamespace

    build = getattr(getattr(schedules, "ScheduleDualPipeV", None), "_calculate_single_rank_operations", None)
    if build is None:
        pytest.skip("this torch has no ScheduleDualPipeV")
    names = {FWD: "FORWARD", BWD: "FULL_BACKWARD", IGRAD: "BACKWARD_INPUT", WGRAD: "BACKWARD_WEIGHT"}

    def ours(r, kind, mb, chunk):
        return (r if chunk == 0 else 2 * pp - 1 - r, names[kind], mb)

    for r in range(pp):
        theirs = []
        for a in build(SimpleNamespace(pp_group_size=pp, _n_microbatches=m), r):
            subs = a.sub_actions or (a,)
            theirs.append(tuple((s.stage_index, s.computation_type.name, s.microbatch_index) for s in subs))
        mine = [(ours(r, FWD, op[1], op[2]), ours(r, BWD, op[3], op[4])) if op[0] == F_AND_B
                else (ours(r, *op),) for op in op_order("dualpipev", r, pp, m)]
        assert mine == theirs


def test_dualpipe_rank_runs_the_dualpipev_steps_of_its_half():
    # DualPipe on 2P ranks: rank h and rank 2P-1-h run DualPipeV's rank-h steps on P ranks with half the batches
    for p, m in ((2, 8), (4, 16), (4, 20)):
        for h in range(p):
            v = [op[0] for op in op_order("dualpipev", h, p, m // 2)]
            assert [op[0] for op in op_order("dualpipe", h, 2 * p, m)] == v
            assert [op[0] for op in op_order("dualpipe", 2 * p - 1 - h, 2 * p, m)] == v


def test_every_pass_runs_once_and_waits_for_its_inputs():
    for schedule, pp, m in (("dualpipe", 4, 10), ("dualpipev", 4, 9)):
        n = m // 2 if schedule == "dualpipe" else m
        r = simulate_dualpipe(schedule, uniform_times(pp, 2, 1.0, 2.0, 0.5), m, timeline=True)
        for kind in "FB":
            assert len({(e.rank, e.chunk, e.microbatch) for e in r.events if e.kind == kind}) == 2 * pp * n
        for rank in range(pp):  # one op at a time per rank; a pair's halves share their span
            spans = sorted({(e.start, e.end) for e in r.events if e.rank == rank})
            assert all(a[1] <= b[0] + 1e-12 for a, b in itertools.pairwise(spans))
        assert max(e.end for e in r.events) == pytest.approx(r.makespan)
        assert {e.kind for e in r.events if e.overlapped} == {"F", "B"}


def test_p2p_and_unpaired_passes_slow_it_down():
    pp, m = 4, 8
    base = simulate_dualpipe("dualpipe", uniform_times(pp, 2, 1.0, 2.0, 1.0), m)
    previous = base.makespan
    for eps in (1e-6, 0.1, 0.5):
        r = simulate_dualpipe("dualpipe", uniform_times(pp, 2, 1.0, 2.0, 1.0), m, (eps,) * (pp - 1))
        assert previous <= r.makespan <= base.makespan + r.critical_p2p + 1e-9
        assert 0 < r.critical_p2p <= 2 * m * (pp - 1) * eps + 1e-12
        previous = r.makespan
    # passes alone expose their all-to-all: each adds its *_unpaired, overlapped pairs add nothing
    chunk = ChunkTimes(fwd=1.0, bwd=2.0, wgrad=1.0, fwd_unpaired=0.25, bwd_unpaired=0.5)
    slow = simulate_dualpipe("dualpipe", tuple((chunk, chunk) for _ in range(pp)), m)
    alone = [sum(1 for op in op_order("dualpipe", 0, pp, m) if op[0] == k) for k in (FWD, BWD, IGRAD)]
    assert slow.unpaired[0] == pytest.approx(0.25 * alone[0] + 0.5 * (alone[1] + alone[2]))
    assert slow.busy[0] == pytest.approx(base.busy[0] + slow.unpaired[0])
    assert slow.makespan > base.makespan


def test_legality():
    assert dualpipe_problems("dualpipe", 4, 1, 8) == [] == dualpipe_problems("dualpipev", 4, None, 9)
    assert any("even PP" in p for p in dualpipe_problems("dualpipe", 3, 1, 12))
    assert any("even count" in p for p in dualpipe_problems("dualpipe", 4, 1, 9))
    assert any("2*PP = 8" in p for p in dualpipe_problems("dualpipe", 4, 1, 6))
    assert any("2*PP = 8" in p for p in dualpipe_problems("dualpipev", 4, 1, 7))
    assert dualpipe_problems("dualpipev", 4, 2, 8) == []  # a layout of 2*PP stages implies VPP 2: the V itself
    assert any("VPP" in p for p in dualpipe_problems("dualpipev", 4, 4, 8))
    assert any("VPP" in p for p in dualpipe_problems("dualpipe", 4, 2, 8))
    assert get_schedule("dualpipe").legality(4, 1, 6) == dualpipe_problems("dualpipe", 4, 1, 6)
    with pytest.raises(PrimusExtError, match="2\\*PP"):
        simulate_dualpipe("dualpipev", uniform_times(4, 2, 1.0, 2.0), 6)
    with pytest.raises(PrimusExtError, match="two chunk times"):
        simulate_dualpipe("dualpipe", uniform_times(4, 1, 1.0, 2.0), 8)


def test_registry_runs_it():
    s = get_schedule("dualpipev")
    r = s.simulate(uniform_times(2, 2, F, B, W), 4)
    assert r.makespan == 26.0 and s.chunks_per_rank(None) == 2 and s.stage_of(0, 1, 2) == 3
    assert get_schedule("dualpipe").stage_of(0, 1, 4) == 3
    order = s.rank_order(0, 2, 1, 4)  # pairs as F then B, input-grad B as B: 8 F, 8 B, a W per input-grad B
    kinds = [k for k, _, _ in order]
    assert (kinds.count(FWD), kinds.count(BWD)) == (8, 8)
    assert kinds.count(WGRAD) == sum(1 for op in op_order("dualpipev", 0, 2, 4) if op[0] == IGRAD) == 3
