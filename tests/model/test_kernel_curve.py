"""Attention on the GPU family's kernel curves: windows, head dims, the profile's level, the fitted data file."""

import importlib.util
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from primus_ext.errors import RecipeError
from primus_ext.hardware import load_gpu
from primus_ext.hardware.curves import CURVES_FILE, _all_curves
from primus_ext.model import kernel_curve
from primus_ext.model.roofline import core_attention_seconds, curve_level
from primus_ext.specs.system import AttentionCurve

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO.parent / "shared" / "kernels" / "kernel_measurements.csv"


def efficiency_of(gpu, *, keys, head_dim, tokens=4096, heads=64):
    """Fused attention's achieved fraction of the BF16 peak, forward + backward, in the roofline's FLOP count."""
    width = 2 * head_dim
    fwd, bwd = core_attention_seconds(tokens * heads, width, keys, head_dim, gpu)
    flops = 2.0 * tokens * heads * width * keys * 3.5
    return flops / ((fwd + bwd) * gpu.peak_tflops("bf16") * 1e12)


def test_sliding_window_of_128_runs_far_below_full_causal_on_blackwell():
    """cuDNN on GB200 (shared/kernels): ~7 % of peak at window 128, ~26 % at 1 024, ~50 % causal at 8k."""
    gpu = load_gpu("gb200")
    full = efficiency_of(gpu, keys=4096, head_dim=64, tokens=8192)
    w128 = efficiency_of(gpu, keys=128 - 128 * 128 / (2 * 8192), head_dim=64, tokens=8192)
    w1024 = efficiency_of(gpu, keys=1024 - 1024 * 1024 / (2 * 8192), head_dim=64, tokens=8192)
    assert w128 < w1024 < full
    assert 0.03 < w128 < 0.12 and full / w128 > 4


def test_narrow_heads_run_below_wide_ones_and_the_law_holds_without_curves():
    gpu = load_gpu("gb200")
    assert efficiency_of(gpu, keys=2048, head_dim=64) < 0.85 * efficiency_of(gpu, keys=2048, head_dim=128)
    plain = replace(gpu, kernel_curves=None)
    fwd, bwd = core_attention_seconds(4096 * 64, 256, 2048, 128, plain)
    assert bwd == pytest.approx(2.5 * fwd)


def test_the_profile_level_scales_the_curve_and_equals_it_at_its_own_reference():
    gpu = load_gpu("gb200")
    ref = kernel_curve.reference_efficiency(gpu.kernel_curves)
    at_ref = replace(gpu, efficiency=replace(gpu.efficiency, attention=ref))
    assert curve_level(at_ref) == pytest.approx(1.0)
    # at the reference shape the achieved efficiency is the reference value
    assert efficiency_of(at_ref, keys=2048, head_dim=128, tokens=4096, heads=4096) == pytest.approx(ref, rel=1e-3)
    slower = replace(gpu, efficiency=replace(gpu.efficiency, attention=ref / 2))
    assert sum(core_attention_seconds(1e6, 256, 2048, 128, slower)) == pytest.approx(
        2 * sum(core_attention_seconds(1e6, 256, 2048, 128, at_ref)), rel=1e-6)


def test_an_unmeasured_head_dim_takes_the_other_directions_ratio_then_the_law():
    fwd = AttentionCurve(head_dims=(64, 128), efficiencies=(0.3, 0.6), row_keys=0.0, latency_s=0.0)
    bwd = AttentionCurve(head_dims=(128,), efficiencies=(0.4,), row_keys=0.0, latency_s=0.0)
    assert kernel_curve.efficiency(bwd, 64, fwd) == pytest.approx(0.2)
    assert kernel_curve.efficiency(bwd, 64) == pytest.approx(0.4 * (64 / 160) / (128 / 224))
    assert kernel_curve.efficiency(fwd, 128) == 0.6


def test_mla_heads_price_their_own_kernel_on_mi300x():
    """Primus-Turbo's MLA (192 / 128) backward on MI300X runs at ~0.1 of peak against ~0.3 at 128 (shared/kernels)."""
    gpu = load_gpu("mi300x")
    _, mla = core_attention_seconds(4096 * 32, 320, 2048, 192, gpu)
    _, gqa = core_attention_seconds(4096 * 32, 256, 2048, 128, gpu)
    assert mla / gqa > 2.0 * 320 / 256


def _moe_parts(gpu, precision):
    from primus_ext.model.analytic import layer_parts
    from primus_ext.model.layers import rank_shapes
    from primus_ext.specs import ExecutionSpec, ModelSpec

    model = ModelSpec(num_layers=2, hidden_size=2048, ffn_hidden_size=0, num_attention_heads=16, num_query_groups=16,
                      kv_channels=128, vocab_size=32000, num_experts=64, moe_router_topk=6, moe_ffn_hidden_size=1408,
                      moe_layer_pattern=(True, True))
    shape = rank_shapes(model, ExecutionSpec(expert_model_parallel_size=8, seq_length=4096, micro_batch_size=2,
                                             precision=precision))["moe"]
    return layer_parts(shape, gpu)


def test_mi300x_fp8_grouped_gemm_backward_runs_below_bf16_as_measured():
    """Primus-Turbo on MI300X (shared/kernels): FP8 grouped-GEMM backward at small-MoE expert shapes 4-6x slower
    than BF16; the forward about as fast."""
    gpu = load_gpu("mi300x")
    bf16, fp8 = _moe_parts(gpu, "bf16"), _moe_parts(gpu, "fp8")
    back = (fp8.dgrad["moe"] + fp8.wgrad["moe"]) / (bf16.dgrad["moe"] + bf16.wgrad["moe"])
    assert 3.0 < back < 8.0
    assert 0.5 < fp8.fwd["moe"] / bf16.fwd["moe"] < 2.0
    assert fp8.dgrad["moe"] == pytest.approx(fp8.wgrad["moe"])


def test_a_family_without_grouped_curves_keeps_the_dense_law():
    gpu = load_gpu("h100")
    assert gpu.kernel_curves.grouped_curve("bf16", "fwd") is None
    parts = _moe_parts(gpu, "bf16")
    assert parts.dgrad["moe"] == pytest.approx(parts.fwd["moe"]) == pytest.approx(parts.wgrad["moe"])


def test_a_broken_curve_file_is_an_error_naming_it(tmp_path):
    bad = tmp_path / "kernel_curves.yaml"
    bad.write_text(yaml.safe_dump({"attention": {"x": {"fwd": {"efficiency_by_head_dim": {64: 1.5},
                                                                "row_keys": 1.0, "latency_s": 0.0}}}}))
    with pytest.raises(RecipeError) as err:
        _all_curves(bad)
    assert "attention.x.fwd" in str(err.value) and "fit_kernel_curves" in str(err.value)


@pytest.mark.skipif(not KERNELS.is_file(), reason="needs ../shared/kernels (the public kernel measurements)")
def test_the_shipped_curves_are_what_the_fit_gives_on_the_measurements():
    spec = importlib.util.spec_from_file_location("fit_kernel_curves", REPO / "benchmarks" / "fit_kernel_curves.py")
    fit = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = fit  # its dataclasses look their module up
    spec.loader.exec_module(fit)
    fitted = fit.kernel_curves(fit.read_rows(KERNELS))
    shipped = yaml.safe_load(CURVES_FILE.read_text())["attention"]
    assert set(fitted) == set(shipped)
    for family, dirs in fitted.items():
        for direction, curve in dirs.items():
            got = shipped[family][direction]
            assert got["efficiency_by_head_dim"] == pytest.approx(curve["efficiency_by_head_dim"], rel=1e-3)
            assert math.isclose(got["row_keys"], curve["row_keys"], rel_tol=1e-3, abs_tol=0.5)
