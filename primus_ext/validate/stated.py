"""Efficiencies a GPU profile states as measured on the hardware (``Efficiency.measured``: kernel
microbenchmarks, not fits to published runs), and how the calibration keeps them.

    >>> check_measured({"hopper": rows})                # one set of measured values per GPU family
    >>> unmeasured({"attention": 0.5, "hbm": 0.8}, eff)  # the values a fit may set on eff
    >>> with_measured(fitted, profile)                  # a fitted block as written into profile
"""

from __future__ import annotations

from dataclasses import replace

from primus_ext.errors import Problem, RecipeError
from primus_ext.specs import Efficiency
from primus_ext.validate.runs import RunRow


def unmeasured(values: dict[str, float], efficiency: Efficiency) -> dict[str, float]:
    """``values`` without the parameters ``efficiency`` states as measured (never overwritten by a fit)."""
    return {k: v for k, v in values.items() if k not in efficiency.measured}


def _stated(efficiency: Efficiency) -> tuple[tuple[str, float], ...]:
    return tuple(sorted((m, getattr(efficiency, m)) for m in efficiency.measured))


def check_measured(families: dict[str, list[RunRow]]) -> None:
    """A family's profiles must state the same measured values: its fit (one block for every profile of the
    family) starts from its first row's profile."""
    problems = []
    for name, members in families.items():
        stated = {(m.gpu, _stated(m.system.gpu.efficiency)) for m in members}  # type: ignore[union-attr]
        if len({s for _, s in stated}) > 1:
            problems.append(Problem(
                path=f"efficiency.measured ({name})", value=sorted(stated),
                message=f"the profiles of GPU family {name} state different measured efficiencies",
                fix="state the same measured names and values in every profile of the family"))
    if problems:
        raise RecipeError(problems=problems, source="GPU profiles", what="invalid")


def with_measured(fitted: Efficiency, profile: Efficiency) -> Efficiency:
    """``fitted`` as written into ``profile``: the values ``profile`` states as measured, and their names, kept
    (a pooled prior is fitted without them)."""
    extra = [m for m in profile.measured if m not in fitted.measured]
    note = "".join(f"; {m} {getattr(profile, m):.4g} as measured (kept from the profile, in place of the prior's "
                   "value)" for m in extra)
    return replace(fitted, **{m: getattr(profile, m) for m in profile.measured}, measured=profile.measured,
                   calibration=fitted.calibration + note)


__all__ = ["check_measured", "unmeasured", "with_measured"]
