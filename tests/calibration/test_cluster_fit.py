"""The cluster environment's fit (``calibration.cluster_fit``) on synthetic steps whose truth is known: which factors
it frees, that it recovers them, and the refusals (not identifiable, no factor the runs depend on, a range's edge).

    python -m pytest -q tests/calibration/test_cluster_fit.py
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from primus_ext.calibration.cluster_fit import ClusterFitError, ClusterRun, fit_environment, sensitive
from primus_ext.hardware import load_gpu

GPU = load_gpu("mi355x")
LINK = GPU.efficiency.scaleup_link


def linear(parts: list[tuple[float, float]]):
    """Runs whose step is ``k * kernels + links * profile_link / link`` (kernels and links in seconds at the profile):
    the projection's arithmetic with no overlap, and no scale-out or overlap dependence."""

    def step_of(i: int, values: Mapping[str, float]) -> float:
        kernels, links = parts[i]
        return values.get("kernels", 1.0) * kernels + links * LINK / values.get("scaleup_link", LINK)

    return step_of


def runs_at(parts: list[tuple[float, float]], truth: Mapping[str, float]) -> list[ClusterRun]:
    measured = linear(parts)
    return [ClusterRun(name=f"run{i}.log", configuration=f"c{i}", measured_s=measured(i, truth), spread=0.01)
            for i in range(len(parts))]


def test_one_log_fits_the_links_alone_and_says_what_it_holds():
    parts = [(0.25, 0.02)]
    fit = fit_environment(runs_at(parts, {"scaleup_link": 0.05}), linear(parts), GPU)
    assert set(fit.values) == {"scaleup_link"} and fit.values["scaleup_link"] == pytest.approx(0.05, rel=1e-4)
    assert "kernels stay the board's" in fit.held["kernels"]
    assert "no run crosses a scale-up domain" in fit.held["scaleout_link"]
    assert "no run overlaps" in fit.held["overlap"]
    assert fit.residual < 1e-6 and fit.after_s[0] == pytest.approx(fit.measured_s[0], rel=1e-6)


def test_two_models_of_different_mixes_fit_links_and_kernels():
    parts = [(0.25, 0.002), (6.0, 2.0)]  # a compute-bound model, a communication-bound one
    truth = {"scaleup_link": 0.08, "kernels": 1.3}
    fit = fit_environment(runs_at(parts, truth), linear(parts), GPU)
    assert fit.values == pytest.approx(truth, rel=1e-3)
    assert all(e < 0.25 for e in fit.standard_errors.values())
    # the second model's run logged again: still two configurations, two factors
    again = ClusterRun(name="again.log", configuration="c1", measured_s=linear(parts)(1, truth), spread=0.01)
    twice = [*runs_at(parts, truth), again]
    assert set(fit_environment(twice, linear([*parts, parts[1]]), GPU).values) == {"scaleup_link", "kernels"}


def test_runs_of_one_mix_cannot_tell_kernels_from_links():
    parts = [(0.25, 0.01), (0.5, 0.02)]  # the same split between kernels and links
    with pytest.raises(ClusterFitError, match="not identifiable") as err:
        fit_environment(runs_at(parts, {"scaleup_link": 0.1, "kernels": 1.2}), linear(parts), GPU)
    assert "a slow kernel from a slow link" in str(err.value)


def test_more_factors_than_configurations_and_unknown_or_idle_factors_are_refused():
    parts = [(0.25, 0.02)]
    runs = runs_at(parts, {"scaleup_link": 0.05})
    with pytest.raises(ClusterFitError, match="2 factors from 1 configuration"):
        fit_environment(runs, linear(parts), GPU, factors=("scaleup_link", "kernels"))
    with pytest.raises(ClusterFitError, match="not a cluster factor"):
        fit_environment(runs, linear(parts), GPU, factors=("nvlink",))
    with pytest.raises(ClusterFitError, match="do not depend on it"):
        fit_environment(runs, linear(parts), GPU, factors=("overlap",))


def test_runs_without_collectives_and_a_link_at_its_range_edge_are_refused():
    compute_only = [(0.25, 0.0)]
    found, held = sensitive(runs_at(compute_only, {}), linear(compute_only), GPU)
    assert found == ["kernels"] and set(held) == {"scaleup_link", "scaleout_link", "overlap"}
    with pytest.raises(ClusterFitError, match="depend on none"):
        fit_environment([ClusterRun(name="a.log", configuration="a", measured_s=1.0)],
                        lambda i, v: 1.0, GPU)  # a step no factor moves
    parts = [(0.25, 0.001)]  # 1 ms of links cannot make a 10 s step
    with pytest.raises(ClusterFitError, match="edge of its physical range"):
        fit_environment([ClusterRun(name="slow.log", configuration="a", measured_s=10.0)], linear(parts), GPU)
