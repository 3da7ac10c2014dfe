"""Held-out validation by any grouping: each group's rows projected with efficiencies fitted on the other rows.

    report = leave_one_out(runs, analytic_projector, by="submission")   # one row (one MLPerf submission) at a time
    report = leave_one_out(runs, analytic_projector, by="gpu")          # one board / GPU type at a time
    report = leave_one_out(runs, analytic_projector, by="model")        # as ``crossval.leave_one_model_out``

The fit is ``amd.fit_all`` (NVIDIA families on their rows, AMD boards on theirs) and its application
``amd.apply_all``: a held-out AMD board takes its family sibling's fit carried by the sustained-clock ratio
(``amd.carry_to_sibling``), which is how a board without runs of its own (MI350X) is projected. Serial: each AMD
fit projects one row per configuration per evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

from primus_ext.errors import PrimusExtError
from primus_ext.validate.amd import apply_all, board_of, fit_all, is_amd
from primus_ext.validate.efficiency_fit import usable
from primus_ext.validate.run import Projector, RowResult, ValidationReport, _result, summarize
from primus_ext.validate.runs import RunRow

Holdout = Literal["model", "submission", "gpu"]
LABELS = {"model": "leave-one-model-out", "submission": "leave-one-submission-out", "gpu": "leave-one-GPU-out"}


def group_of(run: RunRow, by: Holdout) -> str:
    """The group a row is held out with: its model, its own row (one submission), or its board / GPU type."""
    if by == "model":
        return run.model_name
    if by == "submission":
        return f"row {run.index}"
    return board_of(run) if is_amd(run) else (run.system.name if run.system else run.gpu)


def leave_one_out(runs: Sequence[RunRow], projector: Projector, *, by: Holdout = "submission",
                  only: Callable[[RunRow], bool] | None = None,
                  progress: Callable[[int, int, str], None] | None = None) -> ValidationReport:
    """Every usable row (of ``only``, when given) projected with the fit on the rows outside its group."""
    rows_in = usable(runs)
    scored = [r for r in rows_in if only is None or only(r)]
    groups = sorted({group_of(r, by) for r in scored})
    results: list[RowResult] = []
    for i, group in enumerate(groups):
        train = [r for r in rows_in if group_of(r, by) != group]
        fits = fit_all(train, projector)
        held = [r for r in scored if group_of(r, by) == group]
        for original, run in zip(held, apply_all(held, fits), strict=True):
            try:
                result = _result(run, projector(run))
            except PrimusExtError as err:
                result = _result(run, None, f"projection refused: {err}")
            # rows of one configuration stay one configuration for the data's bounds, whatever their folds fitted
            results.append(replace(result, config=_result(original, None).config))
        if progress:
            progress(i + 1, len(groups), group)
    results.sort(key=lambda r: r.index)
    return ValidationReport(rows=tuple(results), summary=summarize(results), label=LABELS[by])


__all__ = ["LABELS", "group_of", "leave_one_out"]
