"""Fit a cluster's environment (``calibration.environment``) on real runs of one or more models on it.

    fit = fit_environment(runs, step_of, gpu)        # ClusterFit: values, held factors, per-log steps, standard errors
    fit = fit_environment(runs, step_of, gpu, factors=("scaleup_link", "kernels"))   # the factors named

``step_of(i, values)`` is run ``i``'s projected step (seconds) with the environment ``values`` on its profile; the
caller re-projects (``projection.evaluate``), this module only fits. Least squares on log(projected / measured) step
(``scipy.optimize.least_squares``, each factor inside its physical range: ``environment.physical_range``).

Which factors are fitted (the rule, said in every record):

1. a factor no run's step depends on is held at the profile and said (the scale-out links of runs inside one node,
   the overlap of runs that overlap nothing): moving it changes no projected step (``SENSITIVITY``);
2. of the others, in the order of ``environment.FACTORS`` (scale-up links, scale-out links, kernels, overlap), as many
   as the runs have distinct configurations (model and layout: each pins one number; several logs of one
   configuration pin the same one). One log fits the links alone, with the kernels held at the profile (the board's
   fit on published runs); logs of two models of different compute / communication mixes fit links and kernels;
3. identifiable or refused: the fit's standard error of each factor, propagated from the runs' own step spread
   (``MIN_SPREAD`` at least) through the Jacobian, must stay below ``MAX_STANDARD_ERROR``; runs whose steps split
   between kernels and links in the same proportion cannot tell a slow kernel from a slow link, and are refused with
   that sentence. A link or kernel factor the fit pushes to its range's edge is refused too (it found no value).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primus_ext.calibration.correction import CorrectionError
from primus_ext.calibration.environment import FACTORS, describe_value, physical_range, profile_value
from primus_ext.specs import GPUSpec

StepOf = Callable[[int, Mapping[str, float]], float]
"""Run index, environment values -> projected step seconds."""

MIN_SPREAD = 0.02
"""Smallest relative step uncertainty a run carries into the standard errors: two runs of one recipe differ by ~1-2 %
step to step (clocks, data; ``calibration.apply.MIN_BAND``)."""
MAX_STANDARD_ERROR = 0.25
"""Largest one-standard-error uncertainty of a fitted factor (relative for links and kernels, absolute for the
overlap) a cluster record may rest on: beyond it two calibrations of the same cluster from equally noisy runs would
differ by more than x1.4 in that factor (two standard errors), a guess rather than a measurement."""
SENSITIVITY = 1e-6
"""Relative step change (moving a factor from the profile's value to its range's edge) below which no run depends on
it: held at the profile."""
LOG_FACTORS = ("scaleup_link", "scaleout_link", "kernels")
"""Fitted in log space (multiplicative quantities); the overlap is fitted as it is (a share in [0, 1])."""
EDGE_REFUSED = ("scaleup_link", "scaleout_link", "kernels")
"""Factors whose range's edge is the fit's, not physics' (a link at 1/200 of its datasheet, kernels x20): a fit that
ends there found no value. The overlap's edges (0: nothing hidden, 1: all) are physical and may be the answer."""


@dataclass(frozen=True, kw_only=True)
class ClusterRun:
    """One logged run as the fit sees it."""

    name: str
    """The log (for sentences)."""
    configuration: str
    """Identity of its model and layout: runs of one configuration pin one number together."""
    measured_s: float
    spread: float = 0.0
    """Relative spread of the measured step (``logs.stats``)."""


@dataclass(frozen=True, kw_only=True)
class ClusterFit:
    values: dict[str, float]
    """The fitted factors (``environment.FACTORS`` names) and their values."""
    held: dict[str, str]
    """Factor -> why it is held at the profile."""
    standard_errors: dict[str, float]
    before_s: tuple[float, ...]
    """Each run's projected step on the profile."""
    after_s: tuple[float, ...]
    """... with ``values``."""
    measured_s: tuple[float, ...]
    rule: str
    """How the fitted factors were chosen (one sentence, for the record and the report)."""

    @property
    def residual(self) -> float:
        """Largest |log(projected / measured)| left after the fit (0 when as many factors as runs)."""
        return max((abs(math.log(a / m)) for a, m in zip(self.after_s, self.measured_s, strict=True)), default=0.0)


class ClusterFitError(CorrectionError):
    """The runs cannot fit a cluster environment (no factor they depend on, not identifiable, out of range)."""


def _to_x(name: str, value: float) -> float:
    return math.log(value) if name in LOG_FACTORS else value


def _from_x(name: str, x: float) -> float:
    return math.exp(x) if name in LOG_FACTORS else x


def sensitive(runs: Sequence[ClusterRun], step_of: StepOf, gpu: GPUSpec) -> tuple[list[str], dict[str, str]]:
    """The factors some run's step depends on (``FACTORS`` order), and why each other one is held."""
    base = [step_of(i, {}) for i in range(len(runs))]
    found, held = [], {}
    for name in FACTORS:
        low, high = physical_range(name, gpu)
        profile = profile_value(name, gpu)
        probe = low if abs(profile - low) >= abs(high - profile) else high  # the farther edge
        moved = [step_of(i, {name: probe}) for i in range(len(runs))]
        if any(abs(m / b - 1.0) > SENSITIVITY for m, b in zip(moved, base, strict=True)):
            found.append(name)
        else:
            held[name] = {"scaleup_link": "no run has a collective inside a scale-up domain",
                          "scaleout_link": "no run crosses a scale-up domain",
                          "kernels": "every layer cost of the runs is measured (the timing store), none analytic",
                          "overlap": "no run overlaps a collective with compute"}[name]
    return found, held


def fit_environment(runs: Sequence[ClusterRun], step_of: StepOf, gpu: GPUSpec, *,
                    factors: Sequence[str] | None = None) -> ClusterFit:
    """The environment that best maps the runs' projected steps onto their measured ones (module docstring)."""
    import numpy as np
    from scipy.optimize import least_squares

    if not runs:
        raise ClusterFitError("no run to fit")
    found, held = sensitive(runs, step_of, gpu)
    configurations = len({r.configuration for r in runs})
    if factors:
        unknown = [f for f in factors if f not in FACTORS]
        if unknown:
            raise ClusterFitError(f"--factors {', '.join(unknown)}: not a cluster factor (one of {', '.join(FACTORS)})")
        idle = [f for f in factors if f not in found]
        if idle:
            raise ClusterFitError(f"--factors {', '.join(idle)}: the logs' steps do not depend on it "
                                  f"({'; '.join(held[f] for f in idle)}); it cannot be fitted from them")
        free = list(dict.fromkeys(factors))
        rule = f"fitted the factors asked (--factors {','.join(free)})"
        held.update({n: "not among --factors" for n in found if n not in free})
        if len(free) > configurations:
            raise ClusterFitError(
                f"{len(free)} factors from {configurations} configuration(s) of runs: each configuration pins one "
                "number, so the fit is not identifiable; give logs of as many models or layouts as factors")
    else:
        if not found:
            raise ClusterFitError(
                "the logs' steps depend on none of the cluster's factors (" + "; ".join(held.values()) + "): a cluster "
                "record needs runs that communicate; calibrate without --scope cluster for a per-model record")
        free = found[:configurations]
        rest = found[configurations:]
        rule = (f"{len(free)} factor(s) from {configurations} configuration(s) of runs (one per configuration, "
                f"links first): {', '.join(free)}")
        for name in rest:
            held[name] = (f"{configurations} configuration(s) of runs pin {configurations} factor(s), links first"
                          + ("; the kernels stay the board's, fitted on published runs" if name == "kernels"
                             else ""))
    names = list(free)
    bounds = [tuple(_to_x(n, v) for v in physical_range(n, gpu)) for n in names]
    lo = np.array([b[0] for b in bounds])
    hi = np.array([b[1] for b in bounds])
    x0 = np.clip(np.array([_to_x(n, profile_value(n, gpu)) for n in names]), lo + 1e-9, hi - 1e-9)
    measured = np.array([r.measured_s for r in runs])

    def values_at(x: Sequence[float]) -> dict[str, float]:
        return {n: _from_x(n, float(v)) for n, v in zip(names, x, strict=True)}

    def residuals(x: np.ndarray) -> np.ndarray:
        at = values_at(x)
        return np.log(np.array([step_of(i, at) for i in range(len(runs))]) / measured)

    result = least_squares(residuals, x0, bounds=(lo, hi), diff_step=1e-4, x_scale=1.0)
    values = values_at(result.x)
    for i, n in enumerate(names):
        if n in EDGE_REFUSED and (result.x[i] - lo[i] < 1e-3 or hi[i] - result.x[i] < 1e-3):
            low, high = physical_range(n, gpu)
            raise ClusterFitError(
                f"the logs need {describe_value(n, values[n], gpu)}, at the edge of its physical range "
                f"[{low:.4g}, {high:.4g}]: no cluster environment explains them (check each recipe against its log; "
                "a cost the projection does not model is not a property of the cluster)")
    jac = _jacobian(residuals, result.x, lo, hi)
    errors = _standard_errors(jac, runs, names)
    loose = {n: e for n, e in errors.items() if not e <= MAX_STANDARD_ERROR}
    if loose:
        shares = "; ".join(f"{Path(r.name).name} " + ", ".join(f"{n} {jac[i][j]:+.2f}"
                                                              for j, n in enumerate(names))
                           for i, r in enumerate(runs))
        raise ClusterFitError(
            "not identifiable: the logs pin " + ", ".join(
                f"{n} only to +-{e:.0%}" if math.isfinite(e) else f"{n} not apart from the others"
                for n, e in loose.items())
            + f" (one standard error from their step spreads, at most +-{MAX_STANDARD_ERROR:.0%} stored). Their "
            f"steps split between the factors in too similar proportions (d log step / d factor: {shares}): one "
            "factor cannot be told from another (a slow kernel from a slow link, a slow link from a lost overlap). "
            "Give logs of models or layouts whose steps split differently, or fewer --factors")
    after = tuple(float(s) for s in np.exp(residuals(result.x)) * measured)
    before = tuple(step_of(i, {}) for i in range(len(runs)))
    return ClusterFit(values=values, held=held, standard_errors=errors, before_s=before, after_s=after,
                      measured_s=tuple(float(m) for m in measured), rule=rule)


def _jacobian(residuals: Callable[[Any], Any], x: Any, lo: Any, hi: Any) -> Any:
    """d residual / d x at ``x`` by one-sided differences pointing into the box (``least_squares``'s own ``jac`` is
    modified where a bound is active: it reads 0 for a factor resting on its edge, such as an overlap of 0)."""
    import numpy as np

    base = residuals(x)
    out = np.zeros((len(base), len(x)))
    for j in range(len(x)):
        h = 1e-4 * max(1.0, abs(float(x[j])))
        if x[j] + h > hi[j]:
            h = -h
        moved = np.array(x, dtype=float)
        moved[j] += h
        out[:, j] = (residuals(moved) - base) / h
    return out


def _standard_errors(jac: object, runs: Sequence[ClusterRun], names: Sequence[str]) -> dict[str, float]:
    """One standard error per factor (log units for links and kernels, absolute for the overlap): the runs' relative
    step uncertainty (their spread, ``MIN_SPREAD`` at least) through the fit's Jacobian; inf when singular."""
    import numpy as np

    j = np.asarray(jac, dtype=float)
    sigma = np.array([max(MIN_SPREAD, r.spread if math.isfinite(r.spread) else MIN_SPREAD) for r in runs])
    weighted = j / sigma[:, None]
    info = weighted.T @ weighted
    if np.linalg.matrix_rank(info, tol=1e-10 * max(1.0, float(np.abs(info).max()))) < len(names):
        return dict.fromkeys(names, math.inf)
    cov = np.linalg.inv(info)
    return {n: float(math.sqrt(max(0.0, cov[i, i]))) for i, n in enumerate(names)}
