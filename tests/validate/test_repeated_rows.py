"""Issue 56, part 4 (the campaign's ``csv/runs-size``): a measurements CSV that repeats one run thousands of times is
projected, banded and fitted once per configuration, with the figures of a per-row projection (``validate`` on a
2 000-row copy took 4.8 CPU-s and ``--fit`` 77 before; the generated case asks under 5)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from primus_ext.specs import Efficiency
from primus_ext.validate.archs import read_archs
from primus_ext.validate.distinct import Distinct
from primus_ext.validate.efficiency_fit import fit_efficiency, log_errors, with_efficiency
from primus_ext.validate.offsets import one_run_offset
from primus_ext.validate.run import RowResult, ValidationReport, project_rows, summarize
from primus_ext.validate.runs import RunRow, read_runs
from primus_ext.validate.stats import kendall_tau_b

ARCH = ("name,num_layers,hidden,ffn_hidden,num_heads,num_kv_heads,vocab,num_experts,topk,moe_ffn_hidden,"
        "shared_experts,first_k_dense,mla(yes/no),notes\nM,8,1024,4096,16,4,32000,,,,,,no,\n")
HEADER = ("source,source_date,model,seq_len,precision,gpu,num_gpus,tp,pp,vpp,cp,ep,etp,dp,mbs,gbs,extra_flags,"
          "tokens_per_sec_per_gpu,tflops_per_gpu,mfu,step_time_s,notes\n")
ROW = "S,2025,M,4096,BF16,H100,16,1,1,,1,,,16,1,64,,{tokens},,,,\n"
OTHER = "S,2025,M,4096,BF16,H100,16,1,1,,1,,,16,2,64,,900,,,,\n"  # micro-batch 2: another configuration


class Counting:
    """A projector that counts its calls and prices a row by its micro-batch and the GEMM efficiency."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, run: RunRow) -> float:
        self.calls += 1
        assert run.system is not None and run.execution is not None
        return 1000.0 * run.system.gpu.efficiency.gemm_max * run.execution.micro_batch_size


def _rows(folder: Path, copies: int) -> list[RunRow]:
    folder.mkdir(exist_ok=True)
    (folder / "a.csv").write_text(ARCH)
    (folder / "r.csv").write_text(HEADER + "".join(ROW.format(tokens=500 + i % 3) for i in range(copies)) + OTHER)
    runs = read_runs(folder / "r.csv", read_archs(folder / "a.csv"))
    assert all(r.model is not None for r in runs)
    return runs


def test_rows_of_one_configuration_are_projected_once(tmp_path: Path) -> None:
    projector = Counting()
    rows = project_rows(_rows(tmp_path, 2000), projector)
    assert projector.calls == 2
    assert [r.projected_tokens_per_sec_per_gpu for r in rows[:3]] == [rows[0].projected_tokens_per_sec_per_gpu] * 3
    assert rows[-1].projected_tokens_per_sec_per_gpu == 2 * rows[0].projected_tokens_per_sec_per_gpu


def test_log_errors_are_those_of_each_row_in_row_order(tmp_path: Path) -> None:
    runs = _rows(tmp_path, 50)
    projector = Counting()
    errors = log_errors(runs, projector, Efficiency())
    assert projector.calls == 2
    assert [r.index for r, _ in errors] == [r.index for r in runs]
    per_row = [math.log(Counting()(with_efficiency(r, Efficiency())) / r.measured_tokens_per_sec_per_gpu) for r in runs]
    assert [e for _, e in errors] == pytest.approx(per_row, rel=0, abs=1e-12)
    assert len(Distinct.of(runs).firsts) == 2


def test_a_fit_over_copies_projects_each_configuration_once_per_evaluation(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import primus_ext.validate.efficiency_fit as fit

    evaluations = []
    objective = fit.objective
    monkeypatch.setattr(fit, "objective", lambda *a, **k: evaluations.append(1) or objective(*a, **k))
    projector = Counting()
    fit_efficiency(_rows(tmp_path, 2000), projector, Efficiency())
    assert len(evaluations) > 10
    assert projector.calls == 2 * len(evaluations)  # two configurations, 2 001 rows


def _result(index: int, group: str, measured: float, projected: float) -> RowResult:
    return RowResult(index=index, model=group, gpu="H100", num_gpus=8, precision="BF16",
                     measured_tokens_per_sec_per_gpu=measured, projected_tokens_per_sec_per_gpu=projected,
                     error_pct=100.0 * (projected / measured - 1))


def test_one_run_offset_is_the_mean_over_the_other_anchors() -> None:
    rows = [_result(0, "g", 100, 120), _result(1, "g", 200, 180), _result(2, "g", 50, 70), _result(3, "h", 10, 11)]
    report = one_run_offset(ValidationReport(rows=tuple(rows), summary=summarize(rows)))
    by = {r.index: r for r in report.rows}
    for row in rows[:3]:
        others = [a for a in rows[:3] if a.index != row.index]
        want = 100 * sum((row.projected_tokens_per_sec_per_gpu * a.measured_tokens_per_sec_per_gpu
                          / a.projected_tokens_per_sec_per_gpu - row.measured_tokens_per_sec_per_gpu)
                         / row.measured_tokens_per_sec_per_gpu for a in others) / len(others)
        assert by[row.index].error_pct == pytest.approx(want, rel=1e-12)
    assert by[3].error_pct is None  # alone in its group: nothing to calibrate from


def test_kendall_tau_b_matches_the_pairwise_definition() -> None:
    x, y = [1, 2, 2, 3, 5, 4, 4], [1, 3, 2, 2, 6, 4, 5]
    c = d = tx = ty = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif (dx > 0) == (dy > 0):
                c += 1
            else:
                d += 1
    assert kendall_tau_b(x, y) == pytest.approx((c - d) / math.sqrt((c + d + tx) * (c + d + ty)), rel=1e-12)
    assert math.isnan(kendall_tau_b([1, 1, 1], [1, 2, 3])) and math.isnan(kendall_tau_b([1], [2]))


def test_a_fit_over_more_configurations_than_the_bound_is_refused_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from primus_ext.cli import main
    from primus_ext.validate import distinct

    monkeypatch.setattr(distinct, "MAX_FIT_CONFIGURATIONS", 20)
    (tmp_path / "a.csv").write_text(ARCH)
    rows = "".join(ROW.format(tokens=500).replace(",64,,", f",{16 * (i + 1)},,") for i in range(21))
    (tmp_path / "r.csv").write_text(HEADER + rows + ROW.format(tokens=501))  # 21 configurations, 22 rows
    for flag in ("--fit", "--cv"):
        code = main(["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv"), flag])
        err = capsys.readouterr()
        assert code == 2 and "21 distinct run configurations" in err.err and "Traceback" not in err.err
        assert "rows projected" not in err.out  # refused before the in-sample report
    assert main(["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv")]) == 0


def test_a_cross_validation_over_too_many_configuration_fits_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``--cv`` fits once per fold: 6 submission folds x 3 configurations = 18 configuration-fits, over a cap of 10
    (a 2 000-row copy of one run held out by submission is 2 000 fits)."""
    from primus_ext.cli import main
    from primus_ext.validate import distinct

    monkeypatch.setattr(distinct, "MAX_CV_FITS", 10)
    (tmp_path / "a.csv").write_text(ARCH)
    rows = "".join(ROW.format(tokens=500 + i).replace(",64,,", f",{16 * (i % 3 + 1)},,") for i in range(6))
    (tmp_path / "r.csv").write_text(HEADER + rows)
    args = ["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv"), "--cv"]
    assert main([*args, "--holdout", "submission"]) == 2
    err = capsys.readouterr().err
    assert "6 folds x 3 distinct configurations" in err and "Traceback" not in err
    assert main([*args, "--holdout", "gpu"]) == 0  # one fold: 3 configuration-fits
