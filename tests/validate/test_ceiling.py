"""Bounds the measurements impose on any projection that is a function of the configurations as read."""

from __future__ import annotations

import math
import random

import pytest

from primus_ext.validate.ceiling import forced_misses, p90_floor, spearman_ceiling
from primus_ext.validate.run import RowResult, summarize
from primus_ext.validate.stats import percentile, spearman


def test_distinct_configurations_allow_a_perfect_ranking():
    assert spearman_ceiling([1.0, 3.0, 2.0], ["a", "b", "c"]) == pytest.approx(1.0)
    assert p90_floor([1.0, 3.0, 2.0], ["a", "b", "c"]) == 0.0


def test_one_configuration_measured_twice_caps_the_ranking():
    # a < b measured, but a and b are one configuration: projections tie them. By hand, ranks of
    # measured [1, 2, 3] and of the best tie-respecting projection [1.5, 1.5, 3]: rho = 0.866
    rho = spearman_ceiling([10.0, 12.0, 20.0], ["x", "x", "y"])
    assert rho == pytest.approx(math.sqrt(3) / 2)
    assert spearman([10.0, 12.0, 20.0], [1.0, 1.0, 2.0]) == pytest.approx(rho)


def test_ceiling_is_the_best_over_random_tie_respecting_projections():
    rng = random.Random(3)
    measured = [rng.uniform(1, 10) for _ in range(9)]
    classes = [0, 0, 1, 2, 2, 2, 3, 4, 4]
    ceiling = spearman_ceiling(measured, classes)
    for _ in range(300):
        value = {c: rng.random() for c in set(classes)}
        assert spearman(measured, [value[c] for c in classes]) <= ceiling + 1e-12


def test_forced_misses_and_p90_floor_by_hand():
    # one configuration measured at 100 and 150: the best single value 120 misses both by 20 %
    measured, classes = [100.0, 150.0], ["x", "x"]
    assert forced_misses(measured, classes, 0.19) == 1 and forced_misses(measured, classes, 0.2001) == 0
    # ten distinct rows + that pair: n = 12, positions 0..11; the p90 row is position floor(9.9) = 9,
    # so two rows may exceed the floor: the pair alone is then free -> floor 0
    more = [float(i + 1) for i in range(10)]
    assert p90_floor(measured + more, classes + [f"r{i}" for i in range(10)]) == 0.0
    # three such pairs among 6 rows: positions 0..5, floor(4.5) = 4, one row may exceed: one miss per pair
    # is forced, so at least two pairs keep a miss above the floor -> floor = 20 %
    pairs = [100.0, 150.0, 10.0, 15.0, 1.0, 1.5]
    floor = p90_floor(pairs, ["a", "a", "b", "b", "c", "c"])
    assert floor == pytest.approx(20.0, abs=1e-6)
    errors = [20.0] * 6  # the projection 120 / 12 / 1.2 reaches it exactly
    assert percentile(errors, 90) >= floor - 1e-6


def test_summary_reports_ceilings_and_floor():
    def row(i, config, measured, projected):
        return RowResult(index=i, model="m", gpu="g", num_gpus=8, precision="bf16",
                         measured_tokens_per_sec_per_gpu=measured, projected_tokens_per_sec_per_gpu=projected,
                         error_pct=(projected - measured) / measured * 100, config=config)

    rows = [row(0, "x", 10.0, 11.0), row(1, "x", 12.0, 11.0), row(2, "y", 20.0, 19.0)]
    s = summarize(rows)
    assert s.spearman_ceiling_by_group["m | g | bf16"] == pytest.approx(math.sqrt(3) / 2)
    assert s.spearman_by_group["m | g | bf16"] <= s.spearman_ceiling_by_group["m | g | bf16"] + 1e-12
    assert s.p90_floor_abs_error_pct >= 0.0
