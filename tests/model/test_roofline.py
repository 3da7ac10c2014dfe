"""Analytic roofline: GEMM FLOPs agree with the model-FLOPs formula; efficiency, TP split and recompute behave."""

from dataclasses import replace

import pytest

from primus_ext.hardware import load_gpu
from primus_ext.model.analytic import AnalyticCosts, analytic_cost, layer_parts
from primus_ext.model.layers import rank_shapes
from primus_ext.model.macs import attention_core_macs, attention_linear_macs, dense_mlp_macs, logits_macs
from primus_ext.model.roofline import attention_efficiency, gemm_efficiency, gemm_seconds
from primus_ext.specs import Efficiency, ExecutionSpec, ModelSpec

MODEL = ModelSpec(num_layers=4, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16, num_query_groups=4,
                  kv_channels=64, vocab_size=32000)


def flat_gpu():
    """Constant GEMM efficiency so that seconds convert back to FLOPs exactly; attention on the head-dim law (no
    kernel curves: ``tests/model/test_kernel_curve.py`` covers those)."""
    gpu = load_gpu("h100")
    return replace(gpu, efficiency=Efficiency(gemm_max=0.5, gemm_half_size_flops=0.0, attention=0.5),
                   kernel_curves=None)


def test_gemm_efficiency_half_point():
    gpu = load_gpu("h100")
    eff = gpu.efficiency
    assert gemm_efficiency(eff.gemm_half_size_flops, gpu) == pytest.approx(eff.gemm_max / 2)
    assert gemm_efficiency(1e15, gpu) == pytest.approx(eff.gemm_max, rel=1e-4)


def test_fp8_speeds_small_gemms_less_than_large_ones():
    """One fixed time per GEMM in both precisions (H200 kernel sweep: FP8 / BF16 ~1.9x large, ~1x small)."""
    gpu = load_gpu("h100")
    eff = gpu.efficiency

    def seconds(flops, precision):
        return flops / (gpu.peak_tflops(precision) * 1e12 * gemm_efficiency(flops, gpu, precision))

    fixed = eff.gemm_half_size_flops / (eff.gemm_max * gpu.bf16_dense_tflops * 1e12)
    for precision in ("bf16", "fp8"):
        top = eff.gemm_max if precision == "bf16" else eff.fp8_gemm_max
        assert seconds(1e9, precision) == pytest.approx(1e9 / (gpu.peak_tflops(precision) * 1e12 * top) + fixed)
    large = seconds(1e14, "bf16") / seconds(1e14, "fp8")
    small = seconds(1e10, "bf16") / seconds(1e10, "fp8")
    assert large > 1.7 and small < 0.8 * large


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_gemm_flops_equal_model_formula(tp):
    gpu = flat_gpu()
    ex = ExecutionSpec(tensor_model_parallel_size=tp, seq_length=2048, micro_batch_size=2)
    shapes = rank_shapes(MODEL, ex)
    rate = gpu.peak_tflops("bf16") * 1e12 * 0.5
    parts = layer_parts(shapes["dense"], gpu)
    tokens = 2 * 2048
    linear = sum(v for k, v in parts.fwd.items() if k in ("attn_linear", "mlp")) * rate
    assert linear == pytest.approx(2 * tokens * (attention_linear_macs(MODEL) + dense_mlp_macs(MODEL)) / tp)
    core = parts.fwd["core_attn"] * gpu.peak_tflops("bf16") * 1e12 * attention_efficiency(MODEL.kv_channels, gpu)
    assert core == pytest.approx(2 * tokens * attention_core_macs(MODEL, 2048) / tp)
    logits = layer_parts(shapes["output"], gpu).fwd["logits"] * rate
    assert logits == pytest.approx(2 * tokens * logits_macs(MODEL) / tp, rel=0.01)  # padded to 128*TP
    # backward GEMMs: data-grad + weight-grad, each the forward's FLOPs
    assert parts.wgrad["mlp"] == pytest.approx(parts.fwd["mlp"])
    assert parts.dgrad["core_attn"] == pytest.approx(2.5 * parts.fwd["core_attn"])


def no_host_floor(gpu):
    """``gpu`` with the host floor off (``Efficiency.host_factor`` 0): the roofline's device time alone."""
    return replace(gpu, efficiency=replace(gpu.efficiency, host_factor=0.0))


def test_costs_shrink_with_tp_and_recompute_adds_forward():
    gpu = no_host_floor(load_gpu("h100"))
    one = analytic_cost(rank_shapes(MODEL, ExecutionSpec(seq_length=4096))["dense"], gpu)
    two = analytic_cost(rank_shapes(MODEL, ExecutionSpec(seq_length=4096, tensor_model_parallel_size=2))["dense"], gpu)
    assert two.fwd_ms < one.fwd_ms and two.params < one.params
    assert one.source == "analytic" and one.wgrad_ms < one.bwd_ms
    full = analytic_cost(rank_shapes(MODEL, ExecutionSpec(seq_length=4096, recompute_granularity="full"))["dense"], gpu)
    assert full.recompute_ms == pytest.approx(full.fwd_ms)
    sel = analytic_cost(rank_shapes(MODEL, ExecutionSpec(seq_length=4096, recompute_granularity="selective"))["dense"],
                        gpu)
    assert 0 < sel.recompute_ms < full.recompute_ms
    assert AnalyticCosts(gpu=gpu).cost(rank_shapes(MODEL, ExecutionSpec())["embedding"]).fwd_ms > 0


def test_moe_routing_imbalance_slows_experts():
    moe = ModelSpec(**{**MODEL.__dict__, "num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 1024,
                       "moe_layer_pattern": (True,) * 4})
    gpu = no_host_floor(load_gpu("h100"))
    shape = rank_shapes(moe, ExecutionSpec(expert_model_parallel_size=4, seq_length=4096))["moe"]
    balanced = analytic_cost(shape, gpu)
    skewed = analytic_cost(replace(shape, moe_imbalance=1.5), gpu)
    assert skewed.fwd_ms > balanced.fwd_ms


def test_skinny_gemm_is_memory_bound_square_gemm_is_not():
    """Roofline: a GEMM with few rows (an MoE expert with few tokens) takes at least the HBM time of its
    operands; a large square GEMM is math-bound (NVIDIA GPU performance background guide)."""
    from primus_ext.model.roofline import gemm_bytes, gemm_seconds

    gpu = flat_gpu()
    hbm = gpu.hbm_bandwidth_bytes_per_s * gpu.efficiency.hbm
    m, n, k = 16, 4096, 4096  # weights dominate: 16*4096 + 4096*4096 bf16 elements read, 16*4096 written
    assert gemm_bytes(m, n, k, "bf16") == 2 * (m * k + k * n) + 2 * m * n
    assert gemm_bytes(m, n, k, "fp8") == (m * k + k * n) + 2 * m * n
    assert gemm_seconds(m, n, k, gpu, "bf16") == pytest.approx(gemm_bytes(m, n, k, "bf16") / hbm)
    assert gemm_seconds(m, n, k, gpu, "bf16", count=3) == pytest.approx(3 * gemm_bytes(m, n, k, "bf16") / hbm)
    big = 8192
    math_s = 2 * big**3 / (gpu.peak_tflops("bf16") * 1e12 * 0.5)
    assert gemm_seconds(big, big, big, gpu, "bf16") == pytest.approx(math_s)


def test_attention_efficiency_by_head_dim():
    """FlashAttention-3 (Shah et al. 2024, fig. 5): 64-wide heads reach ~0.7x the TFLOP/s of 128-wide
    ones, 256-wide ones more; the calibrated ``attention`` is the 128-wide value."""
    gpu = flat_gpu()
    assert attention_efficiency(128, gpu) == pytest.approx(0.5)
    assert attention_efficiency(64, gpu) / attention_efficiency(128, gpu) == pytest.approx(0.70, abs=0.01)
    assert 1.1 < attention_efficiency(256, gpu) / attention_efficiency(128, gpu) < 1.35
    narrow = replace(MODEL, kv_channels=32, num_attention_heads=32)  # same FLOPs per token, narrower heads
    shapes = [rank_shapes(m, ExecutionSpec(seq_length=2048))["dense"] for m in (MODEL, narrow)]
    t64, t32 = (layer_parts(s, gpu).fwd["core_attn"] for s in shapes)
    assert t32 / t64 == pytest.approx(attention_efficiency(64, gpu) / attention_efficiency(32, gpu))


def test_flash_attention_2_runs_core_attention_at_its_published_fraction_of_the_fused_kernel():
    """FA2 35 % vs FA3 75 % of H100 peak (Shah et al. 2024): only core attention slows, by that ratio."""
    from primus_ext.model.roofline import FLASH2_RATIO

    gpu = flat_gpu()
    fused, flash2 = (rank_shapes(MODEL, ExecutionSpec(seq_length=2048, attention_kernel=k))["dense"]
                     for k in ("fused", "flash2"))
    a, b = layer_parts(fused, gpu), layer_parts(flash2, gpu)
    assert b.fwd["core_attn"] == pytest.approx(a.fwd["core_attn"] / FLASH2_RATIO)
    assert b.dgrad["core_attn"] == pytest.approx(a.dgrad["core_attn"] / FLASH2_RATIO)
    assert {k: v for k, v in b.fwd.items() if k != "core_attn"} == {k: v for k, v in a.fwd.items() if k != "core_attn"}
    assert fused.key() == replace(flash2, attention_kernel="fused").key() != flash2.key()
    plain, titan = (rank_shapes(MODEL, ExecutionSpec(attention_kernel=kernel)) for kernel in ("fused", "flash2"))
    # the embedding and output kinds do not attend: one memo entry for both kernels
    assert (plain["embedding"], plain["output"]) == (titan["embedding"], titan["output"])


def test_cuda_graphs_remove_the_launch_and_then_the_moe_fixed_costs():
    from primus_ext.model.analytic import analytic_cost

    gpu = replace(flat_gpu(), efficiency=Efficiency(kernel_overhead_s=1e-4, moe_layer_overhead_s=1e-3, host_factor=0.0))
    moe = replace(MODEL, num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=512, moe_layer_pattern=(True,) * 4)
    fwd = {mode: {kind: analytic_cost(shape, gpu).fwd_ms for kind, shape in
                  rank_shapes(moe, ExecutionSpec(seq_length=2048, cuda_graph=mode)).items()}
           for mode in ("none", "layers", "full_iteration")}
    assert fwd["none"]["moe"] - fwd["layers"]["moe"] == pytest.approx(0.1)  # ms: launches only
    assert fwd["layers"]["moe"] - fwd["full_iteration"]["moe"] == pytest.approx(1.0)  # and the MoE host sync
    assert fwd["none"]["output"] == fwd["layers"]["output"]  # per-layer graphs capture transformer layers only
    assert fwd["layers"]["output"] - fwd["full_iteration"]["output"] == pytest.approx(0.1)


def test_op_level_selective_checkpointing_reruns_every_other_matmul():
    """torchtitan's op SAC on a Llama block (wq, wk, wv, wo, w1, w3, w2): wk, wo and w3 re-run with the element-wise
    ops; attention is saved. Module-level selective (Megatron) re-runs core attention instead."""
    gpu = flat_gpu()
    ex = ExecutionSpec(tensor_model_parallel_size=2, seq_length=2048, micro_batch_size=2,
                       recompute_granularity="selective", selective_ac_option="op")
    shape = rank_shapes(MODEL, ex)["dense"]
    assert shape.selective_ac == "op" and rank_shapes(MODEL, replace(ex, recompute_granularity=None))[
        "dense"].selective_ac == "modules"
    t, h = shape.tokens, MODEL.hidden_size
    mms = (gemm_seconds(t, 4 * 64 / 2, h, gpu, "bf16") + gemm_seconds(t, h, 16 * 64 / 2, gpu, "bf16")
           + gemm_seconds(t, 4096 / 2, h, gpu, "bf16"))  # wk (4 groups x 64), wo (16 heads x 64), w3; per TP rank
    parts = layer_parts(shape, gpu)
    elementwise = sum(parts.fwd[k] for k in ("layernorm", "rope", "mlp_act", "residual"))
    assert analytic_cost(shape, gpu).recompute_ms * 1e-3 == pytest.approx(mms + elementwise, rel=1e-9)
    modules = analytic_cost(replace(shape, selective_ac="modules"), gpu).recompute_ms
    assert modules * 1e-3 == pytest.approx(parts.fwd["core_attn"])


def test_op_level_checkpointing_halves_every_gemm_of_other_layer_kinds():
    """MoE layers: half of the forward GEMMs (shared experts' included) and the element-wise ops."""
    from primus_ext.model.analytic import op_sac_recompute_s

    gpu = flat_gpu()
    moe = replace(MODEL, num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=512,
                  moe_shared_expert_intermediate_size=512, moe_layer_pattern=(True,) * 4)
    ex = ExecutionSpec(seq_length=2048, micro_batch_size=1, recompute_granularity="selective", selective_ac_option="op")
    shape = rank_shapes(moe, ex)["moe"]
    fwd = layer_parts(shape, gpu).fwd
    elementwise = sum(fwd[k] for k in ("layernorm", "rope", "moe_act", "moe_permute", "residual"))
    gemms = sum(v for k, v in fwd.items() if k in ("attn_linear", "router", "moe", "shared_experts"))
    assert op_sac_recompute_s(shape, gpu) == pytest.approx(elementwise + gemms / 2, rel=1e-12)
