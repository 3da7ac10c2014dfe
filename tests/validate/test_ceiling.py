"""Bounds the measurements impose on any projection that is a function of the configurations as read."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from primus_ext.validate.ceiling import forced_misses, p90_floor, spearman_ceiling
from primus_ext.validate.run import RowResult, summarize
from primus_ext.validate.stats import percentile, spearman


def _weak_orders(items):
    """Every ordering of ``items`` into tied blocks (ordered set partitions)."""
    if not items:
        yield []
        return
    for size in range(1, len(items) + 1):
        for first in itertools.combinations(items, size):
            rest = [x for x in items if x not in first]
            for tail in _weak_orders(rest):
                yield [first, *tail]


def _brute_force_ceiling(measured, classes):
    """The best rho over every projection constant within classes, by enumerating all weak orders."""
    best = -math.inf
    for order in _weak_orders(sorted(set(classes))):
        position = {c: float(p) for p, block in enumerate(order) for c in block}
        rho = spearman(measured, [position[c] for c in classes])
        if not math.isnan(rho):
            best = max(best, rho)
    return best


def test_distinct_configurations_allow_a_perfect_ranking():
    assert spearman_ceiling([1.0, 3.0, 2.0], ["a", "b", "c"]) == pytest.approx(1.0)
    assert p90_floor([1.0, 3.0, 2.0], ["a", "b", "c"]) == 0.0


def test_one_configuration_measured_twice_caps_the_ranking():
    # a < b measured, but a and b are one configuration: projections tie them. By hand, ranks of
    # measured [1, 2, 3] and of the best tie-respecting projection [1.5, 1.5, 3]: rho = 0.866
    rho = spearman_ceiling([10.0, 12.0, 20.0], ["x", "x", "y"])
    assert rho == pytest.approx(math.sqrt(3) / 2)
    assert spearman([10.0, 12.0, 20.0], [1.0, 1.0, 2.0]) == pytest.approx(rho)


def test_ceiling_equals_the_best_weak_order():
    """Including cases where tying two configurations beats every strict order of them."""
    rng = random.Random(3)
    tie_wins = 0
    for _ in range(150):
        n = rng.randint(3, 9)
        classes = [rng.randrange(rng.randint(2, 5)) for _ in range(n)]
        if len(set(classes)) < 2:
            continue
        measured = [float(rng.randint(1, 6)) + rng.choice((0.0, rng.random())) for _ in range(n)]
        expected = _brute_force_ceiling(measured, classes)
        assert spearman_ceiling(measured, classes) == pytest.approx(expected, abs=1e-12)
        strict = max(spearman(measured, [float(order.index(c)) for c in classes])
                     for order in itertools.permutations(sorted(set(classes))))
        tie_wins += expected > strict + 1e-9
    assert tie_wins > 0


def test_many_configurations():
    rng = random.Random(11)
    measured = [rng.uniform(1, 10) for _ in range(24)]
    classes = [i // 2 for i in range(24)]  # 12 configurations measured twice each
    ceiling = spearman_ceiling(measured, classes)
    assert ceiling < 1.0
    for _ in range(500):  # no class-constant projection beats it
        value = [rng.random() for _ in range(12)]
        assert spearman(measured, [value[c] for c in classes]) <= ceiling + 1e-12
    by_mean = sorted(range(12), key=lambda c: measured[2 * c] + measured[2 * c + 1])
    assert spearman(measured, [float(by_mean.index(c)) for c in classes]) <= ceiling + 1e-12


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
    assert floor == pytest.approx(20.0, abs=1e-6) and floor <= 20.0
    errors = [20.0] * 6  # the projection 120 / 12 / 1.2 reaches it exactly
    assert percentile(errors, 90) >= floor


def test_p90_floor_is_below_every_class_constant_projection():
    rng = random.Random(7)
    measured = [rng.uniform(1, 10) for _ in range(30)]
    classes = [rng.randrange(12) for _ in range(30)]
    floor = p90_floor(measured, classes)
    assert floor > 0
    for _ in range(300):
        value = {c: rng.uniform(1, 10) for c in set(classes)}
        errors = [abs(value[c] / m - 1) * 100 for m, c in zip(measured, classes, strict=True)]
        assert percentile(errors, 90) >= floor


def test_summary_reports_ceilings_and_floor():
    def row(i, config, measured, projected):
        return RowResult(index=i, model="m", gpu="g", num_gpus=8, precision="bf16",
                         measured_tokens_per_sec_per_gpu=measured, projected_tokens_per_sec_per_gpu=projected,
                         error_pct=(projected - measured) / measured * 100, config=config)

    rows = [row(0, "x", 10.0, 11.0), row(1, "x", 12.0, 11.0), row(2, "y", 20.0, 19.0), row(3, "z", 5.0, 5.0)]
    s = summarize(rows)
    assert s.spearman_ceiling_by_group["m | g | bf16"] == pytest.approx(
        _brute_force_ceiling([10.0, 12.0, 20.0, 5.0], ["x", "x", "y", "z"]))
    assert s.spearman_by_group["m | g | bf16"] <= s.spearman_ceiling_by_group["m | g | bf16"] + 1e-12
    # n = 4: position floor(2.7) = 2, one row may exceed; only the pair (10, 12) forces a miss (9.1 % at
    # 11) and one of its two rows may be that row -> floor 0
    assert s.p90_floor_abs_error_pct == 0.0
