"""Power-capped GPUs: the cube law f ~ P^(1/3) scales tensor peaks, nothing else."""

import pytest

from primus_ext.hardware import load_gpu
from primus_ext.hardware.power import clock_scale, power_capped


def test_cube_law_clock_ratio():
    # hand-derived: (500/700)^(1/3) = 0.8939
    assert clock_scale(500.0, 700.0) == pytest.approx(0.8939, abs=1e-4)
    assert clock_scale(700.0, 700.0) == 1.0 and clock_scale(800.0, 700.0) == 1.0  # no overclock
    assert clock_scale(500.0, 0.0) == 1.0  # rated power unknown: no change


def test_power_capped_scales_peaks_only():
    h100 = load_gpu("h100")
    capped = power_capped(h100, 500.0)
    assert capped.bf16_dense_tflops == pytest.approx(989.0 * 0.8939, rel=1e-4)
    assert capped.fp8_dense_tflops / capped.bf16_dense_tflops == pytest.approx(h100.fp8_dense_tflops / 989.0)
    assert capped.hbm_bandwidth_bytes_per_s == h100.hbm_bandwidth_bytes_per_s
    assert capped.nic_bandwidth_bytes_per_s == h100.nic_bandwidth_bytes_per_s
    assert capped.efficiency == h100.efficiency and capped.family == h100.family and capped.tdp_w == 500.0
    assert power_capped(h100, 700.0) is h100
