"""The extrapolated steady state (``pipeline.periodic``) equals the op-by-op simulation (``simulate_fixed``)."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import primus_ext.model.pipeline.periodic as periodic
from primus_ext.model.pipeline.schedules import (
    ChunkTimes,
    interleaving_problem,
    simulate,
    simulate_fast,
    simulate_fixed,
    uniform_times,
)


def _same(fast, full, exact: bool) -> None:
    tol = 0.0 if exact else 1e-9 * full.makespan
    assert fast.busy == full.busy
    assert fast.makespan == pytest.approx(full.makespan, rel=0, abs=tol)
    assert fast.finish == pytest.approx(full.finish, rel=0, abs=tol)
    assert fast.critical_p2p == pytest.approx(full.critical_p2p, rel=0, abs=tol)


@st.composite
def pipelines(draw, exact: bool):
    pp = draw(st.integers(1, 6))
    vpp = draw(st.integers(1, 3))
    group = draw(st.integers(pp, 2 * pp)) if vpp > 1 else pp
    periods = draw(st.integers(1, 10))
    m = group * periods if vpp > 1 else draw(st.integers(1, 48))
    if vpp > 1 and interleaving_problem(pp, m, group):
        m = group * max(periods, 1)
    # exact: multiples of 1/64 s, so every sum is exact and ties resolve alike in both simulators
    value = st.integers(1, 40).map(lambda k: k / 64) if exact else st.floats(0.01, 3.0)
    distinct = draw(st.lists(st.tuples(value, value), min_size=1, max_size=3))
    times = tuple(tuple(ChunkTimes(fwd=f, bwd=b) for f, b in (draw(st.sampled_from(distinct)) for _ in range(vpp)))
                  for _ in range(pp))
    comm = st.integers(0, 8).map(lambda k: k / 64) if exact else st.floats(0.0, 0.5)
    p2p = tuple(draw(comm) for _ in range(pp * vpp - 1))
    extra = draw(st.integers(0, 1)) if vpp > 1 else 0
    return ("interleaved" if vpp > 1 else "1f1b"), times, m, p2p, group, extra


@settings(max_examples=150, deadline=None)
@given(pipelines(exact=True))
def test_periodic_equals_full_simulation_exact_times(case):
    schedule, times, m, p2p, group, extra = case
    _same(simulate_fast(schedule, times, m, p2p, group, extra),
          simulate_fixed(schedule, times, m, p2p, group, False, extra), exact=True)


@settings(max_examples=100, deadline=None)
@given(pipelines(exact=False))
def test_periodic_equals_full_simulation_float_times(case):
    schedule, times, m, p2p, group, extra = case
    _same(simulate_fast(schedule, times, m, p2p, group, extra),
          simulate_fixed(schedule, times, m, p2p, group, False, extra), exact=False)


@pytest.mark.parametrize("schedule,pp,vpp,m", [("1f1b", 8, 1, 256), ("1f1b", 16, 1, 128), ("interleaved", 4, 4, 64),
                                                ("interleaved", 8, 2, 96)])
def test_long_runs_jump_and_match(schedule, pp, vpp, m, monkeypatch):
    """Realistic shapes: uneven first/last stages, p2p, a long steady state that is extrapolated."""
    rng = random.Random(pp * 100 + vpp * 10 + m)
    body = ChunkTimes(fwd=0.010 + rng.random() * 1e-3, bwd=0.021 + rng.random() * 1e-3)
    times = [[body] * vpp for _ in range(pp)]
    times[0][0] = ChunkTimes(fwd=0.013, bwd=0.025)  # embedding
    times[-1][-1] = ChunkTimes(fwd=0.016, bwd=0.030)  # output + loss
    times = tuple(tuple(row) for row in times)
    p2p = tuple(1e-4 * (1 + (s % pp == pp - 1)) for s in range(pp * vpp - 1))
    jumps = []
    original = periodic._jump
    monkeypatch.setattr(periodic, "_jump", lambda *a: jumps.append(a[4]) or original(*a))
    fast = simulate_fast(schedule, times, m, p2p, pp, 0)
    assert jumps, "the steady state was not extrapolated"
    _same(fast, simulate_fixed(schedule, times, m, p2p, pp, False, 0), exact=False)


def test_closed_forms_hold_on_the_fast_path():
    """simulate() without a timeline takes the fast path: the (p-1)/m and (p-1)/(v*m) bubbles still hold."""
    for pp, m in ((4, 64), (8, 256)):
        r = simulate("1f1b", uniform_times(pp, 1, 1.0, 2.0), m)
        assert r.bubble_fraction == pytest.approx((pp - 1) / m)
    r = simulate("interleaved", uniform_times(4, 4, 0.25, 0.5), 128)
    assert r.bubble_fraction == pytest.approx(3 / (4 * 128))


def test_stretched_structures_equal_the_directly_built_ones():
    """Long runs reuse a short run's structure with whole periods inserted: identical to building them."""
    from primus_ext.model.pipeline.schedules import periodic_direct, periodic_of

    for args in [("1f1b", 8, 1, 200, 8, 0), ("1f1b", 5, 1, 77, 5, 0), ("interleaved", 4, 3, 96, 4, 0),
                 ("interleaved", 4, 2, 90, 6, 1), ("interleaved", 3, 2, 64, 4, 0)]:
        assert periodic_of.__wrapped__(*args) == periodic_direct(*args), args


@pytest.mark.parametrize("pp,m", [(2, 12), (4, 40), (8, 64), (16, 100)])
def test_1f1b_shift_structure_has_the_shape_the_gate_assumes(pp, m):
    """``worth_extrapolating``'s 1F1B rule rests on these (hand-derived from the op orders)."""
    from primus_ext.model.pipeline.schedules import periodic_of

    per = periodic_of("1f1b", pp, 1, m, pp, 0)
    assert (per.start, per.window, per.shift) == ((pp + 1) ** 2, 2 * pp - 1, 2 * pp)
    assert per.end == 2 * pp * m - pp * (pp - 1)
