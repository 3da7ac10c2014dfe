"""Nelder-Mead in the unit box: finds interior minima, stops at bounds, walks a curved valley."""

import pytest

from primus_ext.validate.search import nelder_mead


def test_finds_an_interior_minimum_of_a_quadratic():
    x, fx, evals = nelder_mead(lambda u: (u[0] - 0.3) ** 2 + 4 * (u[1] - 0.7) ** 2, [0.9, 0.1], max_evals=400,
                               tol=1e-12)
    assert x == pytest.approx([0.3, 0.7], abs=1e-3) and fx < 1e-6 and evals <= 400


def test_never_leaves_the_unit_box_and_stops_at_the_bound():
    seen = []

    def f(u):
        seen.append(list(u))
        return (u[0] - 1.7) ** 2 + (u[1] + 0.4) ** 2  # the unconstrained minimum is outside the box

    x, _, _ = nelder_mead(f, [0.5, 0.5], max_evals=300, tol=1e-12)
    assert all(0.0 <= v <= 1.0 for point in seen for v in point)
    assert x == pytest.approx([1.0, 0.0], abs=1e-3)


def test_walks_a_curved_valley_that_coordinate_steps_crawl_along():
    def rosenbrock(u):  # Rosenbrock's banana on [0, 2]^2: its minimum (1, 1) is u = (0.5, 0.5)
        x, y = 2 * u[0], 2 * u[1]
        return (1 - x) ** 2 + 100 * (y - x * x) ** 2

    x, fx, _ = nelder_mead(rosenbrock, [0.1, 0.9], max_evals=2000, tol=1e-14)
    assert fx < 1e-6 and x == pytest.approx([0.5, 0.5], abs=1e-2)


def test_respects_the_evaluation_budget_and_handles_no_parameters():
    calls = []
    nelder_mead(lambda u: calls.append(1) or sum(u), [0.5] * 4, max_evals=20)
    assert len(calls) <= 20 + 4  # a shrink finishes its vertices
    assert nelder_mead(lambda u: 3.0, []) == ([], 3.0, 1)
