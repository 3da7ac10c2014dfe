"""What the measurements themselves allow: bounds for any projection of the configurations as read.

Rows whose specs are identical (same model, execution and system as the reader builds them: e.g. one
configuration measured on several software releases) get the same projection from any function of those
specs. Where their measurements differ, no such projection can be exact::

    spearman_ceiling(measured, classes)  # the best Spearman rho a group can reach
    p90_floor(measured, classes)         # a lower bound of the p90 |error| % over the whole set

``classes[i]`` names row i's configuration. Pure functions; the validation summary reports both next to
the reached figures so that a shortfall can be split into model error and disagreement in the data.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

from primus_ext.validate.stats import ranks, spearman

MERGE_SEARCH_CLASSES = 14
"""Up to this many distinct configurations in a group every merge of neighbours is tried (2^13 orders);
above it only the strict order, a lower bound of the ceiling."""


def _by_class(classes: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    members: dict[Hashable, list[int]] = {}
    for i, c in enumerate(classes):
        members.setdefault(c, []).append(i)
    return members


def spearman_ceiling(measured: Sequence[float], classes: Sequence[Hashable]) -> float:
    """The highest Spearman rho between ``measured`` and projections that are equal within each class
    (NaN when the measurements are constant or there is a single class).

    Projections may also tie different classes. For a fixed grouping into tied blocks, the projected ranks'
    spread depends only on the block sizes, so the best strict order of blocks sorts them by mean measured
    rank (an exchange argument, as in Smith's rule). Every merge of neighbours in that order is tried; that
    this reaches the best of all weak orders is not proven here but checked against an enumeration of them
    (tests/validate/test_ceiling.py). Above ``MERGE_SEARCH_CLASSES`` classes the value is a lower bound."""
    members = _by_class(classes)
    if len(members) < 2:
        return math.nan
    rank = ranks(measured)
    groups = sorted(members.values(), key=lambda g: sum(rank[i] for i in g) / len(g))
    k = len(groups)
    best = math.nan
    for mask in range(2 ** (k - 1) if k <= MERGE_SEARCH_CLASSES else 1):
        projected, position = [0.0] * len(measured), 0
        for j, g in enumerate(groups):
            tied_to_previous = j > 0 and (mask >> (j - 1)) & 1
            if j > 0 and not tied_to_previous:
                position += 1
            for i in g:
                projected[i] = float(position)
        rho = spearman(measured, projected)
        if not math.isnan(rho) and (math.isnan(best) or rho > best):
            best = rho
    return best


def _fits_within(values: Sequence[float], t: float) -> int:
    """Most members one projection p keeps within |p/m - 1| <= t (max overlap of [m(1-t), m(1+t)])."""
    events = sorted([(m * (1 - t), 0) for m in values] + [(m * (1 + t), 1) for m in values])
    best = inside = 0
    for _, kind in events:  # at equal positions an opening (0) sorts before a closing (1): closed intervals
        inside += 1 if kind == 0 else -1
        best = max(best, inside)
    return best


def forced_misses(measured: Sequence[float], classes: Sequence[Hashable], t: float) -> int:
    """Rows that must have |error| > t (as a fraction) under any projection equal within each class."""
    return sum(len(g) - _fits_within([measured[i] for i in g], t) for g in _by_class(classes).values())


def p90_floor(measured: Sequence[float], classes: Sequence[Hashable]) -> float:
    """A lower bound (in %) of the p90 |error| of any projection equal within each class. The p90 (linear
    interpolation, as ``stats.percentile``) is at least the error of the row at position floor(0.9 (n-1))
    in ascending order, so at most n - 1 - floor(0.9 (n-1)) rows may exceed it: the bound is the largest
    threshold more rows than that must exceed (bisection; the lower end is returned)."""
    n = len(measured)
    if n == 0:
        return math.nan
    allowed = n - 1 - math.floor(0.9 * (n - 1))
    if forced_misses(measured, classes, 0.0) <= allowed:
        return 0.0
    lo, hi = 0.0, 1.0
    while forced_misses(measured, classes, hi) > allowed:
        lo, hi = hi, hi * 2
    for _ in range(40):
        mid = (lo + hi) / 2
        if forced_misses(measured, classes, mid) <= allowed:
            hi = mid
        else:
            lo = mid
    return lo * 100.0
