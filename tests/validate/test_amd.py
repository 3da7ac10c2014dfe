"""AMD boards calibrated on AMD rows only: knobs limited by configurations, siblings carried by sustained clock,
held-out folds by submission and by board, a band as wide as the held-out error."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from primus_ext.hardware import load_gpu
from primus_ext.specs import Efficiency
from primus_ext.validate.amd import (
    KNOBS,
    START,
    apply_all,
    carry_to_sibling,
    configurations,
    fit_board,
    fit_environment,
    is_amd,
    set_knobs,
)
from primus_ext.validate.holdout import group_of, leave_one_out
from tests.validate.validate_rows import runs_of

VALIDATION = Path(__file__).resolve().parents[3] / "shared" / "validation"


def _fp8_projector(run):
    """A stand-in projection: throughput proportional to the FP8 GEMM fraction (what the compute knob moves)."""
    return 10_000.0 * run.system.gpu.efficiency.fp8_gemm_max


def test_one_configuration_pins_one_knob(tmp_path):
    rows = "".join(f"MLPerf,2025,M,8192,FP8,MI300X,8,1,1,,1,,,8,1,8,,{v},,,,\n" for v in (2700, 2750, 2800))
    runs = runs_of(tmp_path, rows)
    assert all(is_amd(r) for r in runs) and configurations(runs) == 1
    fit = fit_board(runs, _fp8_projector)
    assert fit.knobs == ("compute",)
    assert fit.efficiency.fp8_gemm_max == pytest.approx(0.275, rel=0.01)  # the middle row: 2750 / 10 000
    start = START  # the other fractions move with it; what no AMD row constrains stays at the start
    assert fit.efficiency.gemm_max / fit.efficiency.fp8_gemm_max == pytest.approx(start.gemm_max / start.fp8_gemm_max)
    assert "AMD rows only" in fit.efficiency.calibration and fit.efficiency.scaleup_link == start.scaleup_link


def test_knobs_stay_inside_their_physical_caps():
    eff = set_knobs(Efficiency(), KNOBS, [1.3, 2.0])
    assert eff.gemm_max <= 0.95 and eff.attention <= 0.65


def test_siblings_carry_by_the_sustained_clock_ratio():
    eff = Efficiency(gemm_max=0.6, fp8_gemm_max=0.5, attention=0.4)
    to_350 = carry_to_sibling(eff, load_gpu("mi355x"), load_gpu("mi350x"))
    assert to_350.fp8_gemm_max / 0.5 == pytest.approx((1000 / 1400) ** (1 / 3) / (2300 / 2516.6), rel=1e-6)
    to_300 = carry_to_sibling(eff, load_gpu("mi325x"), load_gpu("mi300x"))
    assert to_300.gemm_max / 0.6 == pytest.approx(0.75 ** (1 / 3))
    assert carry_to_sibling(eff, load_gpu("mi300x"), load_gpu("mi325x")) == eff  # more power: no headroom assumed


def test_a_held_out_board_takes_its_sibling(tmp_path):
    runs = runs_of(tmp_path, "MLPerf,2025,M,8192,FP8,MI300X,8,1,1,,1,,,8,1,8,,2000,,,,\n")
    fitted = replace(Efficiency(), fp8_gemm_max=0.4)
    (carried,) = apply_all(runs, {"mi325x": (fitted, 11, 0.01)})
    assert carried.system.gpu.efficiency.fp8_gemm_max == pytest.approx(0.4 * 0.75 ** (1 / 3))
    assert group_of(carried, "gpu") == "mi300x" and group_of(carried, "submission") == "row 0"


def test_environment_links_fitted_with_the_board_held(tmp_path):
    runs = runs_of(tmp_path, "Primus,2026,M,4096,BF16,MI355X,8,1,1,,1,,,8,1,64,,9000,,,,\n")
    board = replace(Efficiency(), gemm_max=0.6)

    def link_bound(run):
        return 100_000.0 * run.system.gpu.efficiency.scaleup_link

    env, loss = fit_environment(runs, link_bound, board)
    assert env.scaleup_link == pytest.approx(0.09, rel=0.01) and loss < 0.01
    assert env.gemm_max == 0.6 and env.overlap == board.overlap  # one row: one knob, the link; the board held


def test_the_band_widens_where_a_board_rests_on_few_runs():
    from primus_ext.projection.project import EFFICIENCY_RANGE, band_range

    assert band_range(load_gpu("h100")) == EFFICIENCY_RANGE
    for board in ("mi300x", "mi325x", "mi350x", "mi355x"):
        gpu = load_gpu(board)
        assert gpu.vendor == "amd" and band_range(gpu) > EFFICIENCY_RANGE
        # compute fractions fitted on AMD rows, not the NVIDIA prior's (its values only where no AMD row says)
        assert gpu.efficiency.calibration.startswith("fitted compute") and "AMD rows only" in gpu.efficiency.calibration


@pytest.mark.skipif(not (VALIDATION / "mlperf_training.csv").exists(), reason="shared/validation not present")
def test_mlperf_amd_rows_leave_one_submission_out():
    """Issue 45's target: AMD rows held out one submission at a time, median <= 5 %, worst <= 12 %."""
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.hardware_csv import read_hardware
    from primus_ext.validate.run import analytic_projector
    from primus_ext.validate.runs import read_runs

    runs = read_runs(VALIDATION / "mlperf_training.csv", read_archs(VALIDATION / "model_archs.csv"),
                     read_hardware(VALIDATION / "hardware_specs.csv"))
    report = leave_one_out(runs, analytic_projector, by="submission", only=is_amd)
    assert report.summary.n_projected == 22
    assert report.summary.median_abs_error_pct <= 5.0 and report.summary.max_abs_error_pct <= 12.0
