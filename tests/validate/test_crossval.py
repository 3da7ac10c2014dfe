"""Leave-one-model-out cross-validation: every row once, the same figures serially and in worker processes."""

from __future__ import annotations

from test_efficiency_fit import fake_projector, rows

from primus_ext.specs import Efficiency
from primus_ext.validate.crossval import held_out_fold, leave_one_model_out


def test_lomo_reports_every_row_once():
    report = leave_one_model_out(rows(Efficiency(gemm_max=0.5)), fake_projector)
    assert [r.index for r in report.rows] == list(range(9))
    assert report.summary.median_abs_error_pct < 2.0


def test_folds_in_worker_processes_give_the_serial_result():
    runs = rows(Efficiency(gemm_max=0.5, attention=0.3), models=("A", "B", "C", "D"))
    calls: list[tuple[int, int, str]] = []
    serial = leave_one_model_out(runs, fake_projector)
    parallel = leave_one_model_out(runs, fake_projector, jobs=2, progress=lambda *call: calls.append(call))
    assert parallel.rows == serial.rows
    # one call per finished fold, counting up to the number of folds
    assert [c[:2] for c in calls] == [(1, 4), (2, 4), (3, 4), (4, 4)] and {c[2] for c in calls} == set("ABCD")
    assert [r.index for r in held_out_fold("B", runs, fake_projector)] == [3, 4, 5]


def test_a_projector_that_cannot_reach_a_worker_runs_the_folds_serially():
    runs = rows(Efficiency(gemm_max=0.5))
    report = leave_one_model_out(runs, lambda run: fake_projector(run), jobs=2)  # a lambda: not picklable
    assert report.rows == leave_one_model_out(runs, fake_projector).rows


def broken_projector(run):
    raise RuntimeError("a broken profile")


def test_a_failing_fold_raises_its_error():
    import pytest

    with pytest.raises(RuntimeError, match="a broken profile"):
        leave_one_model_out(rows(Efficiency()), broken_projector, jobs=2)


def fit_recording_models(train, projector, seen):
    from primus_ext.validate.efficiency_fit import fit_by_gpu

    seen.append(sorted({r.model_name for r in train}))
    return fit_by_gpu(train, projector)


def test_a_given_fit_sees_only_the_other_models_rows():
    seen: list[list[str]] = []
    runs = rows(Efficiency(gemm_max=0.5))
    report = leave_one_model_out(runs, fake_projector, fit=lambda t, p: fit_recording_models(t, p, seen))
    assert seen == [["B", "C"], ["A", "C"], ["A", "B"]]
    assert report.rows == leave_one_model_out(runs, fake_projector).rows


def test_the_shared_nic_fit_of_a_fold_never_projects_the_held_out_model():
    """Two families: each fold also fits the NIC efficiency on all families' training rows together; the
    held-out model's rows are projected once each, after the fit, and never during it."""
    from test_efficiency_fit import _two_families, link_projector

    runs = _two_families()
    calls: list[str] = []

    def spy(run):
        calls.append(run.model_name)
        return link_projector(run)

    rows_a = held_out_fold("A", runs, spy)
    assert len(rows_a) == 6 and calls.count("A") == 6 and calls[-6:] == ["A"] * 6
    assert all(r.error_pct is not None for r in rows_a)


def is_model_b(run) -> bool:
    return run.model_name == "B"


def test_held_out_limits_the_folds_but_not_what_each_fold_trains_on():
    """``validate --cv --moe-only``: only the chosen models are folds (and reported); each fold still fits on every
    other model's rows, so a chosen fold's figures equal those of the full run."""
    seen: list[list[str]] = []
    runs = rows(Efficiency(gemm_max=0.5))
    only_b = leave_one_model_out(runs, fake_projector, held_out=is_model_b,
                                 fit=lambda t, p: fit_recording_models(t, p, seen))
    assert seen == [["A", "C"]]
    full = {r.index: r for r in leave_one_model_out(runs, fake_projector).rows}
    assert [r.index for r in only_b.rows] == [3, 4, 5]
    assert all(r == full[r.index] for r in only_b.rows)
