"""Error and rank statistics for validation (pure Python: no scipy dependency).

Spearman's rho is Pearson's correlation of average ranks (ties share the mean rank); Kendall's
tau is tau-b (Kendall 1945), which corrects for ties in either variable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default 'linear' method), q in [0, 100]."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50.0)


def ranks(values: Sequence[float]) -> list[float]:
    """Average ranks (1-based; ties share the mean rank)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        mean_rank = (i + j) / 2.0 + 1.0
        for k in range(i, j + 1):
            ranks[order[k]] = mean_rank
        i = j + 1
    return ranks


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    n = len(x)
    if n < 2:
        return math.nan
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return math.nan
    return sxy / math.sqrt(sxx * syy)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (NaN when either side is constant)."""
    return pearson(ranks(x), ranks(y))


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b (``scipy.stats.kendalltau``, O(n log n): a CSV of 2 000 rows of one group took 0.75 CPU-s
    over all pairs); NaN when either side is constant or there are fewer than two values."""
    import warnings

    from scipy.stats import kendalltau

    if len(x) < 2 or len(set(x)) < 2 or len(set(y)) < 2:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(kendalltau(x, y, variant="b").statistic)
