"""Validation rows grouped by configuration, and the bounds on the work of fitting them.

    Distinct.of(runs)          # each (model, execution, system) once, with the slot of every row
    fit_problem(runs, "r.csv", folds=19)   # None, or why --fit / --cv would be too much work
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from primus_ext.errors import Problem
from primus_ext.validate.runs import RunRow


def usable(runs: Sequence[RunRow]) -> list[RunRow]:
    return [r for r in runs if r.model is not None and r.system is not None]


MAX_FIT_CONFIGURATIONS = 1_000
"""The most distinct configurations ``--fit`` takes: a fit projects each one ~90 times, ~0.5 CPU-s per configuration
(the development set's 109: 55 CPU-s on this project's 2-core machine, 2026-12-07), so 1 000 is ~8 CPU-minutes. The
whole published record this project validates on is ~200 runs; a larger table is refused before any work (issue 56:
bounded work whatever the input)."""
MAX_CV_FITS = 20_000
"""The most configuration-fits ``--cv`` takes: one fit per fold over the configurations, folds x distinct
configurations at ~0.5 CPU-s each (the development set's 19 model folds x 109 configurations: 2 071, ~23 CPU-minutes
on one core), so at most ~3 CPU-hours; a table of folds that repeat one run (2 000 submission folds) counts each."""


def fit_problem(runs: Sequence[RunRow], source: str, folds: int = 0) -> Problem | None:
    """Why ``runs`` are too many to fit: more than ``MAX_FIT_CONFIGURATIONS`` distinct configurations, or, for a
    cross-validation of ``folds`` folds, more than ``MAX_CV_FITS`` configuration-fits; else None."""
    n = len(Distinct.of(usable(runs)).firsts)
    if n > MAX_FIT_CONFIGURATIONS:
        return Problem(path=source, message=f"{n:,} distinct run configurations to fit; --fit and --cv take at most "
                                            f"{MAX_FIT_CONFIGURATIONS:,} (~0.5 CPU-s each, per fit)",
                       fix="fit on a sample of the rows, or validate without --fit / --cv")
    if folds * n > MAX_CV_FITS:
        return Problem(path=source, message=f"--cv would fit {folds:,} folds x {n:,} distinct configurations "
                                            f"({folds * n:,} configuration-fits, ~0.5 CPU-s each); it takes at most "
                                            f"{MAX_CV_FITS:,}",
                       fix="cross-validate on a sample of the rows, or hold out a coarser group (--holdout model "
                           "or gpu)")
    return None


@dataclass(frozen=True)
class Distinct:
    """Rows grouped by configuration once, for a fit that scores them many times: each (model, execution, system) is
    projected once per evaluation (a 2 000-row copy of one run took 77 CPU-s to fit, projected per row; issue 56)."""

    rows: tuple[RunRow, ...]
    firsts: tuple[RunRow, ...]
    """One row of each configuration, in order of first appearance."""
    slots: tuple[int, ...]
    """The index in ``firsts`` of each row's configuration."""

    @staticmethod
    def of(runs: Sequence[RunRow] | Distinct) -> Distinct:
        if isinstance(runs, Distinct):
            return runs
        seen: dict[tuple, int] = {}
        firsts: list[RunRow] = []
        slots = []
        for run in runs:
            key = run.configuration
            if key not in seen:
                seen[key] = len(firsts)
                firsts.append(run)
            slots.append(seen[key])
        return Distinct(rows=tuple(runs), firsts=tuple(firsts), slots=tuple(slots))
