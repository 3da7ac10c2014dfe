"""Derivative-free minimisation: the efficiency calibration's one-dimensional search and its polish step.

``golden_section`` narrows a bracket of one coordinate by the golden ratio (Kiefer 1953, Proc. AMS 4(3)).

``nelder_mead`` is the downhill simplex of Nelder & Mead (1965, Computer Journal 7(4)) with the
standard coefficients (reflection 1, expansion 2, contraction 1/2, shrink 1/2; Lagarias et al. 1998,
SIAM J. Optim. 9(1), eq. 2.1), contracting inside only (the original method; Lagarias et al.
also contract outside when the reflected point lies between the second-worst and the worst). Points
are clipped into [0, 1]^n before ``f`` sees them, so a parameter never leaves its physical bounds. It
follows the calibration's coordinate-wise search, which finds the basin but crawls along valleys where
parameters trade off against each other (e.g. the BF16 GEMM fraction against the FP8 one, tied by
their ratio bound).

Pure Python: no scipy dependency.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

REFLECT, EXPAND, CONTRACT, SHRINK = 1.0, 2.0, 0.5, 0.5
GOLDEN = (math.sqrt(5) - 1) / 2


def golden_section(f: Callable[[float], float], lo: float, hi: float, steps: int) -> float:
    """The middle of ``[lo, hi]`` after ``steps`` golden-section narrowings towards a minimum of ``f``."""
    for _ in range(steps):
        a, b = hi - GOLDEN * (hi - lo), lo + GOLDEN * (hi - lo)
        if f(a) <= f(b):
            hi = b
        else:
            lo = a
    return (lo + hi) / 2


def _clip(x: Sequence[float]) -> list[float]:
    return [min(1.0, max(0.0, v)) for v in x]


def nelder_mead(
    f: Callable[[list[float]], float], x0: Sequence[float], *, step: float = 0.1, max_evals: int = 300,
    tol: float = 1e-5,
) -> tuple[list[float], float, int]:
    """Minimise ``f`` over [0, 1]^n from ``x0``. Returns (best point, its value, evaluations used).

    The initial simplex is ``x0`` and one vertex ``step`` away along each axis (inward at an upper
    bound). Stops after ``max_evals`` evaluations or when the simplex's values span less than ``tol``."""
    n = len(x0)
    if n == 0:
        return [], f([]), 1
    start = _clip(x0)
    simplex = [start]
    for i in range(n):
        vertex = list(start)
        vertex[i] += step if vertex[i] + step <= 1.0 else -step
        simplex.append(vertex)
    values = [f(v) for v in simplex]
    evals = n + 1

    def at(point: list[float]) -> tuple[list[float], float]:
        nonlocal evals
        evals += 1
        clipped = _clip(point)
        return clipped, f(clipped)

    while evals < max_evals:
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < tol:
            break
        worst = simplex[-1]
        centroid = [sum(v[j] for v in simplex[:-1]) / n for j in range(n)]
        reflected, f_r = at([c + REFLECT * (c - w) for c, w in zip(centroid, worst, strict=True)])
        if f_r < values[0]:
            expanded, f_e = at([c + EXPAND * (c - w) for c, w in zip(centroid, worst, strict=True)])
            simplex[-1], values[-1] = (expanded, f_e) if f_e < f_r else (reflected, f_r)
        elif f_r < values[-2]:
            simplex[-1], values[-1] = reflected, f_r
        else:
            contracted, f_c = at([c + CONTRACT * (w - c) for c, w in zip(centroid, worst, strict=True)])
            if f_c < values[-1]:
                simplex[-1], values[-1] = contracted, f_c
            else:  # shrink every vertex towards the best one
                best = simplex[0]
                for i in range(1, n + 1):
                    simplex[i], values[i] = at([b + SHRINK * (v - b) for b, v in zip(best, simplex[i], strict=True)])
    i = min(range(n + 1), key=values.__getitem__)
    return simplex[i], values[i], evals


__all__ = ["nelder_mead"]
