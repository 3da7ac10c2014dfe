"""What the measurements themselves allow: bounds for any projection of the configurations as read.

Rows whose specs are identical (same model, execution and system as the reader builds them: e.g. one
configuration measured on several software releases) get the same projection from any function of those
specs. Where their measurements differ, no such projection can be exact::

    spearman_ceiling(measured, classes)  # the best Spearman rho a group can reach
    p90_floor(measured, classes)         # the lowest p90 |error| %% the whole set can reach

``classes[i]`` names row i's configuration. Pure functions; the validation summary reports both next to
the reached figures so that a shortfall can be split into model error and disagreement in the data.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from itertools import permutations

from primus_ext.validate.stats import spearman

EXHAUSTIVE_CLASSES = 7
"""Up to this many distinct configurations in a group every order of them is tried (7! = 5 040); above
it the classes are ordered by their mean measured value (a lower bound of the ceiling)."""


def _by_class(classes: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    members: dict[Hashable, list[int]] = {}
    for i, c in enumerate(classes):
        members.setdefault(c, []).append(i)
    return members


def spearman_ceiling(measured: Sequence[float], classes: Sequence[Hashable]) -> float:
    """The highest Spearman rho between ``measured`` and projections that are equal within each class
    (NaN when the measurements are constant or there is a single class)."""
    members = _by_class(classes)
    if len(members) < 2:
        return math.nan
    groups = list(members.values())

    def rho(order: Sequence[int]) -> float:
        projected = [0.0] * len(measured)
        for position, g in enumerate(order):
            for i in groups[g]:
                projected[i] = float(position)
        return spearman(measured, projected)

    if len(groups) <= EXHAUSTIVE_CLASSES:
        best = max((rho(order) for order in permutations(range(len(groups)))),
                   key=lambda r: -math.inf if math.isnan(r) else r)
        return best
    means = [sum(measured[i] for i in g) / len(g) for g in groups]
    return rho(sorted(range(len(groups)), key=means.__getitem__))


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
    """Lower bound (in %) of the p90 |error| of any projection equal within each class: the p90 (linear
    interpolation, as ``stats.percentile``) is at least the error of the row at position floor(0.9 (n-1))
    in ascending order, so at most n - 1 - floor(0.9 (n-1)) rows may exceed it. Bisection on t."""
    n = len(measured)
    if n == 0:
        return math.nan
    allowed = n - 1 - math.floor(0.9 * (n - 1))
    if forced_misses(measured, classes, 0.0) <= allowed:
        return 0.0
    lo, hi = 0.0, 1.0
    while forced_misses(measured, classes, hi) > allowed:
        hi *= 2
    for _ in range(40):
        mid = (lo + hi) / 2
        if forced_misses(measured, classes, mid) <= allowed:
            hi = mid
        else:
            lo = mid
    return hi * 100.0
