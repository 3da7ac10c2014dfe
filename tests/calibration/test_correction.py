"""The correction's fit: one run -> a kernel factor; several -> factor + fixed overhead; physical bounds."""

import math

import pytest

from primus_ext.calibration.correction import (
    K_MAX,
    Correction,
    CorrectionError,
    StepParts,
    fit_correction,
    memory_factor,
)


def test_one_run_puts_everything_in_the_kernel_factor():
    parts = StepParts(kernels_s=0.8, links_s=0.2, mfu=0.4)
    c = fit_correction([parts], [1.4])
    assert c.overhead_s == 0.0 and c.scope == "kernels"
    assert c.kernel_factor == pytest.approx((1.4 - 0.2) / 0.8)
    assert c.step(parts) == pytest.approx(1.4)


def test_two_runs_of_different_size_separate_factor_and_overhead():
    true_k, true_c = 1.5, 0.05
    runs = [StepParts(kernels_s=k, links_s=0.1, mfu=0.3) for k in (0.4, 0.8, 1.6)]
    measured = [true_k * p.kernels_s + p.links_s + true_c for p in runs]
    c = fit_correction(runs, measured, [0.01, 0.01, 0.01])
    assert c.kernel_factor == pytest.approx(true_k, rel=1e-6)
    assert c.overhead_s == pytest.approx(true_c, rel=1e-6)
    assert c.spread == pytest.approx(0.01)  # residual ~0: the runs' own spread
    assert c.runs == 3


def test_overhead_is_never_negative():
    runs = [StepParts(kernels_s=k, links_s=0.0, mfu=0.3) for k in (0.5, 1.0)]
    c = fit_correction(runs, [0.5 * 2.0 - 0.2, 1.0 * 2.0 - 0.2])  # a negative intercept fits best
    assert c.overhead_s == 0.0 and c.kernel_factor > 0


def test_links_slower_than_the_run_scale_the_whole_step():
    parts = StepParts(kernels_s=0.2, links_s=1.0, mfu=0.1)
    c = fit_correction([parts], [0.9])
    assert c.scope == "step" and c.step(parts) == pytest.approx(0.9)


def test_unphysical_factor_is_refused_with_the_figures():
    with pytest.raises(CorrectionError, match="outside the physical range"):
        fit_correction([StepParts(kernels_s=0.01, links_s=0.0, mfu=0.2)], [0.01 * (K_MAX * 2)])


def test_corrected_mfu_above_peak_is_refused():
    with pytest.raises(CorrectionError, match="MFU"):
        fit_correction([StepParts(kernels_s=1.0, links_s=0.0, mfu=0.6)], [0.5])


def test_non_positive_measured_step_is_refused():
    with pytest.raises(CorrectionError):
        fit_correction([StepParts(kernels_s=1.0, links_s=0.0)], [-1.0])


def test_memory_factor_bounds():
    assert memory_factor(1.2e9, 1.0e9)[0] == pytest.approx(1.2)
    factor, why = memory_factor(10e9, 1e9)
    assert factor is None and "outside" in why


def test_round_trip_and_refusal_of_non_finite():
    c = Correction(kernel_factor=1.3, overhead_s=0.01, spread=0.02, memory_factor=1.1, runs=2)
    assert Correction.from_dict(c.to_dict()) == c
    with pytest.raises(ValueError):
        Correction.from_dict({**c.to_dict(), "kernel_factor": math.nan})
