"""Leave-one-model-out cross-validation of the per-GPU calibration, one process per fold when asked.

    >>> report = leave_one_model_out(runs, analytic_projector, jobs=4)

Each model's rows are projected with efficiencies fitted (``calibrate.fit_by_gpu``, from the plain defaults,
or the ``fit`` given: a variant of the calibration to compare, ``benchmarks/calibration_variants.py``) on the
other models' rows only; the values a profile states as measured (``Efficiency.measured``) are kept as stated.
The folds are independent: ``jobs`` > 1 runs them in worker processes when the projector and the fit can be
pickled (module-level functions, as ``analytic_projector`` is, or partials of them; a lambda or closure runs the
folds serially).
"""

from __future__ import annotations

import multiprocessing
import pickle
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from primus_ext.errors import PrimusExtError
from primus_ext.specs import Efficiency
from primus_ext.validate.efficiency_fit import apply_fits, fit_by_gpu, usable
from primus_ext.validate.run import Projector, RowResult, ValidationReport, _result, summarize
from primus_ext.validate.runs import RunRow

FoldFit = Callable[[Sequence[RunRow], Projector], dict[str, tuple[Efficiency, int, float]]]
"""Fits per GPU family from training rows, as ``calibrate.fit_by_gpu`` returns them."""


def held_out_fold(model: str, runs: Sequence[RunRow], projector: Projector,
                  fit: FoldFit = fit_by_gpu) -> list[RowResult]:
    """``model``'s rows projected with the efficiencies ``fit`` fitted on the other models' rows."""
    train = [r for r in usable(runs) if r.model_name != model]
    fits = fit(train, projector)
    rows = []
    for run in apply_fits([r for r in usable(runs) if r.model_name == model], fits):
        try:
            rows.append(_result(run, projector(run)))
        except PrimusExtError as err:
            rows.append(_result(run, None, f"projection refused: {err}"))
    return rows


def _picklable(obj: object) -> bool:
    try:
        pickle.dumps(obj)
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True


def leave_one_model_out(runs: Sequence[RunRow], projector: Projector, *, fit: FoldFit = fit_by_gpu,
                        progress: Callable[[int, int, str], None] | None = None, jobs: int = 1,
                        held_out: Callable[[RunRow], bool] | None = None) -> ValidationReport:
    """Each model's rows projected with efficiencies fitted on the other models' rows only; ``jobs`` folds at
    a time (same result whatever ``jobs``). ``progress(folds done, folds, model)`` after each fold (in the
    order they finish). ``held_out``: only the models with a row it accepts are folds (and reported); every fit
    still trains on all the other models' rows, so a fold's figures equal the full run's."""
    models = sorted({r.model_name for r in usable(runs) if held_out is None or held_out(r)})
    rows: list[RowResult] = []
    if jobs > 1 and not _picklable((projector, fit)):
        jobs = 1  # a lambda or closure cannot reach a worker process
    if jobs <= 1 or len(models) <= 1:
        for i, model in enumerate(models):
            rows += held_out_fold(model, runs, projector, fit)
            if progress:
                progress(i + 1, len(models), model)
    else:
        # fork on Linux (no re-import per worker); elsewhere the platform's default (spawn on macOS, where fork
        # is unsafe). Either way each task's arguments are pickled: the projector and the fit must be module-level.
        context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else None)
        pool = ProcessPoolExecutor(max_workers=min(jobs, len(models)), mp_context=context)
        try:
            futures = {pool.submit(held_out_fold, model, runs, projector, fit): model for model in models}
            for i, done in enumerate(as_completed(futures)):
                rows += done.result()
                if progress:
                    progress(i + 1, len(models), futures[done])
        except BaseException:  # a failed fold or Ctrl-C: do not wait for the queued folds
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    rows += [_result(r, None) for r in runs if r.model is None and held_out is None]
    rows.sort(key=lambda r: r.index)
    return ValidationReport(rows=tuple(rows), summary=summarize(rows), label="leave-one-model-out")
