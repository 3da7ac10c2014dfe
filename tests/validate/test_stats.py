"""Statistics against hand-computed values (and numpy/scipy conventions)."""

import math

import pytest

from primus_ext.validate.stats import kendall_tau_b, median, percentile, spearman


def test_percentiles_match_numpy_linear():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert median(values) == 3.0
    assert percentile(values, 90) == pytest.approx(7.6)  # numpy.percentile([1,2,3,4,10], 90)
    assert math.isnan(median([]))


def test_spearman_and_kendall():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # scipy.stats.spearmanr([1,2,3,4,5],[5,6,7,8,7]) = 0.8207826816681233 (ties averaged)
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(0.8207826816681233)
    # scipy.stats.kendalltau([12,2,1,12,2],[1,4,7,1,0]) = -0.4714045207910316 (tau-b)
    assert kendall_tau_b([12, 2, 1, 12, 2], [1, 4, 7, 1, 0]) == pytest.approx(-0.4714045207910316)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
