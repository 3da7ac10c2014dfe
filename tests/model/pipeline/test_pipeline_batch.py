"""The compiled batch simulator equals the reference simulator (``pipeline.simulate``) configuration by
configuration: per-rank finish times and the critical path's send/recv seconds; long runs extrapolate the
periodic steady state (fewer ops simulated) and still equal the op-by-op simulation (``timeline=True``)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from primus_ext.model.pipeline import ChunkTimes, interleaving_problem, simulate
from primus_ext.model.pipeline.batch import simulate_many, simulated_ops

CASES = [("1f1b", 1, 1, 6, 0), ("1f1b", 4, 1, 16, 0), ("1f1b", 8, 1, 40, 0), ("interleaved", 4, 2, 16, 0),
         ("interleaved", 4, 3, 12, 0), ("interleaved", 8, 4, 32, 0), ("interleaved", 4, 4, 16, 1),
         ("interleaved", 2, 8, 10, 0), ("1f1b", 1, 1, 6, 1), ("1f1b", 4, 1, 16, 1)]


def _times(row: np.ndarray, pp: int, vpp: int) -> tuple[tuple[ChunkTimes, ...], ...]:
    """Chunk times from a durations row: forwards, backwards (and with EP overlap weight-grads, unpaired
    forwards and backwards: ``pipeline.ops.duration_slot``)."""
    stages = pp * vpp

    def chunk(i: int) -> ChunkTimes:
        fwd, bwd = row[i], row[stages + i]
        if len(row) == 2 * stages:
            return ChunkTimes(fwd=fwd, bwd=bwd)
        return ChunkTimes(fwd=fwd, bwd=bwd, wgrad=row[2 * stages + i], fwd_unpaired=row[3 * stages + i] - fwd,
                          bwd_unpaired=row[4 * stages + i] - bwd)

    return tuple(tuple(chunk(r * vpp + c) for c in range(vpp)) for r in range(pp))


def _with_unpaired(durations: np.ndarray, rng: random.Random) -> np.ndarray:
    """Forwards and backwards + zero weight-grads + unpaired passes up to 0.5 s longer (the EP overlap's slots)."""
    n, two = durations.shape
    stages = two // 2
    extra = np.array([[rng.choice((0.0, rng.uniform(0.0, 0.5))) for _ in range(two)] for _ in range(n)])
    return np.concatenate((durations, np.zeros((n, stages)), durations + extra), axis=1)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-pp{c[1]}v{c[2]}m{c[3]}x{c[4]}")
def test_equals_reference_simulator(case):
    schedule, pp, vpp, m, extra = case
    rng = random.Random(pp * 100 + vpp * 10 + m)
    stages = pp * vpp
    n = 12
    # random times, then equal times (ties: the rank's own predecessor binds), p2p zero / small / large
    durations = np.array([[rng.uniform(0.5, 2.0) for _ in range(2 * stages)] for _ in range(n - 2)]
                         + [[1.0] * stages + [2.0] * stages] * 2)
    p2p = np.array([[rng.choice((0.0, 0.01, 0.4)) for _ in range(stages - 1)] for _ in range(n - 1)]
                   + [[0.0] * (stages - 1)]).reshape(n, stages - 1)
    if extra:
        durations = _with_unpaired(durations, rng)
    finish, critical = simulate_many(schedule, pp, vpp, m, durations, p2p, extra=extra)
    assert finish.shape == (n, pp) and critical.shape == (n,)
    for k in range(n):
        want = simulate(schedule, _times(durations[k], pp, vpp), m, tuple(p2p[k]), moe_a2a_overlap_warmup=bool(extra))
        assert tuple(finish[k]) == pytest.approx(want.finish, rel=1e-12)
        assert critical[k] == pytest.approx(want.critical_p2p, rel=1e-9, abs=1e-12)


LONG = [("1f1b", 4, 1, 64, 0), ("1f1b", 8, 1, 200, 0), ("interleaved", 4, 2, 64, 0), ("interleaved", 8, 4, 96, 1),
        ("interleaved", 4, 2, 64, 1), ("1f1b", 1, 1, 64, 1)]


def _long_inputs(pp: int, vpp: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random times with zero / small / large p2p; equal times without and with p2p; realistic uneven ends."""
    rng = random.Random(seed)
    stages = pp * vpp
    durations = [[rng.uniform(0.5, 2.0) for _ in range(2 * stages)] for _ in range(6)]
    durations += [[1.0] * stages + [2.0] * stages] * 2
    body = [0.010] * stages + [0.021] * stages
    body[0], body[stages - 1], body[stages], body[-1] = 0.013, 0.016, 0.025, 0.030  # embedding, loss
    durations += [body] * 2
    p2p = [[rng.choice((0.0, 0.01, 0.4)) for _ in range(stages - 1)] for _ in range(5)] + [[0.0] * (stages - 1)]
    p2p += [[0.0] * (stages - 1), [0.05] * (stages - 1), [0.0] * (stages - 1), [1e-4] * (stages - 1)]
    return np.array(durations), np.array(p2p).reshape(len(p2p), stages - 1)


@pytest.mark.parametrize("case", LONG, ids=lambda c: f"{c[0]}-pp{c[1]}v{c[2]}m{c[3]}x{c[4]}")
def test_long_runs_extrapolate_and_equal_the_op_by_op_simulation(case):
    schedule, pp, vpp, m, extra = case
    durations, p2p = _long_inputs(pp, vpp, pp * 100 + vpp * 10 + m)
    if extra:
        durations = _with_unpaired(durations, random.Random(m))
    finish, critical = simulate_many(schedule, pp, vpp, m, durations, p2p, extra=extra)
    ops = simulated_ops(schedule, pp, vpp, m, durations, p2p, extra=extra)
    # every configuration extrapolated the periodic steady state: under half of its ops simulated
    assert ops.shape == (len(durations),) and ops.max() < pp * vpp * m
    for k in range(len(durations)):
        times = _times(durations[k], pp, vpp)
        for timeline in (False, True):  # the scalar fast path, then the op-by-op simulation (``simulate_fixed``)
            want = simulate(schedule, times, m, tuple(p2p[k]), moe_a2a_overlap_warmup=bool(extra), timeline=timeline)
            assert tuple(finish[k]) == pytest.approx(want.finish, rel=1e-9)
            assert critical[k] == pytest.approx(want.critical_p2p, rel=1e-9, abs=1e-12)


def test_random_structures_equal_the_reference():
    """Random PP / VPP / group sizes / micro-batch counts (both paths: extrapolated and every op)."""
    rng = random.Random(11)
    for _ in range(40):
        pp, vpp = rng.randint(1, 8), rng.choice((1, 2, 3))
        group = rng.randint(pp, 2 * pp) if vpp > 1 else pp
        m = group * rng.randint(1, 8) if vpp > 1 else rng.randint(1, 80)
        if vpp > 1 and interleaving_problem(pp, m, group):
            continue
        extra = rng.randint(0, 1) if vpp > 1 or pp == 1 else 0
        schedule, stages = ("interleaved" if vpp > 1 else "1f1b"), pp * vpp
        durations = np.array([[rng.randint(1, 40) / 64 for _ in range(2 * stages)], [1.0] * stages + [2.0] * stages,
                              [rng.uniform(0.01, 3.0) for _ in range(2 * stages)]])
        if extra:
            durations = _with_unpaired(durations, rng)
        p2p = np.array([[rng.choice((0.0, 0.125, rng.uniform(0.0, 0.5))) for _ in range(stages - 1)]
                        for _ in range(3)]).reshape(3, stages - 1)
        finish, critical = simulate_many(schedule, pp, vpp, m, durations, p2p, group=group, extra=extra)
        for k in range(3):
            want = simulate(schedule, _times(durations[k], pp, vpp), m, tuple(p2p[k]),
                            microbatch_group_size_per_vp_stage=group, moe_a2a_overlap_warmup=bool(extra))
            assert tuple(finish[k]) == pytest.approx(want.finish, rel=1e-12)
            assert critical[k] == pytest.approx(want.critical_p2p, rel=1e-9, abs=1e-12)


def test_simulated_op_counts():
    """Short 1F1B runs (m <= 4 PP + 3) simulate every op, as ``pipeline.simulate``; a long uniform 1F1B run
    simulates the transient, a few periods and the drain: far fewer than its 2 * PP * m ops."""
    pp = 4
    durations, p2p = np.array([[1.0] * pp + [2.0] * pp]), np.zeros((1, pp - 1))
    assert simulated_ops("1f1b", pp, 1, 4 * pp + 3, durations, p2p).tolist() == [2 * pp * (4 * pp + 3)]
    m = 1000
    ops = simulated_ops("1f1b", pp, 1, m, durations, p2p)
    assert 0 < ops[0] < 200 < 2 * pp * m
    finish, _ = simulate_many("1f1b", pp, 1, m, durations, p2p)
    assert finish.max() == pytest.approx((m + pp - 1) * 3.0, rel=1e-12)


def test_uniform_1f1b_bubble_is_the_closed_form():
    pp, m, f, b = 4, 8, 1.0, 2.0
    durations = np.array([[f] * pp + [b] * pp])
    finish, critical = simulate_many("1f1b", pp, 1, m, durations, np.zeros((1, pp - 1)))
    assert finish.max() == pytest.approx((m + pp - 1) * (f + b))  # bubble (p-1)/m of the busy time
    assert critical[0] == 0.0


def test_refuses_bad_input():
    with pytest.raises(ValueError, match="fixed orders"):
        simulate_many("zb-h1", 2, 1, 4, np.ones((1, 4)), np.zeros((1, 1)))
    with pytest.raises(ValueError, match="need durations"):
        simulate_many("1f1b", 2, 1, 4, np.ones((1, 3)), np.zeros((1, 1)))
    finish, critical = simulate_many("1f1b", 2, 1, 4, np.ones((0, 4)), np.zeros((0, 1)))
    assert finish.shape == (0, 2) and critical.shape == (0,)
