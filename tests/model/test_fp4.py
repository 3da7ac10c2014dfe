"""FP4 training (NVFP4 / MXFP4): weight bytes against Transformer Engine's storage layout, which parts stay BF16,
the quantisation passes, the FP4/FP8 peak bound on a projected step, and the refusal where a GPU has no FP4."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from primus_ext.hardware import load_gpu, load_system
from primus_ext.model.analytic import analytic_cost, layer_parts
from primus_ext.model.fp4 import fp4_element_bytes, fp4_problem, fp4_weight_bytes, layer_weight_bytes, quantise_seconds
from primus_ext.model.layers import rank_shapes
from primus_ext.model.memory import estimate_memory
from primus_ext.model.roofline import gemm_efficiency
from primus_ext.projection import project
from primus_ext.specs import ExecutionSpec, ModelSpec

MODEL = ModelSpec(name="m", num_layers=8, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                  num_query_groups=8, kv_channels=128, vocab_size=128256, activation="swiglu")
BASE = dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, data_parallel_size=2, micro_batch_size=1,
            global_batch_size=64, seq_length=8192, sequence_parallel=True, use_distributed_optimizer=True)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _te_nvfp4_weight_bytes(rows: int, cols: int) -> int:
    """Bytes Transformer Engine's ``NVFP4Tensor`` holds for a ``rows x cols`` weight used in all three GEMMs: row-wise
    data (rows, cols / 2) uint8 and its E4M3 scales, one per 16 elements, padded to the 128 x 4 tiles of cuBLAS's
    block-scaling-factor layout (docs.nvidia.com/cuda/cublas "1D block scaling factors layout"); the column-wise
    (transposed) copy the same with rows and cols swapped; two fp32 amaxes."""
    rowwise = rows * cols // 2 + _round_up(rows, 128) * _round_up(math.ceil(cols / 16), 4)
    columnwise = cols * rows // 2 + _round_up(cols, 128) * _round_up(math.ceil(rows / 16), 4)
    return rowwise + columnwise + 2 * 4


@pytest.mark.parametrize(("rows", "cols"), [(4096, 4096), (6144, 4096), (28672, 8192), (1024, 16384)])
def test_nvfp4_weight_bytes_match_the_quantised_storage_layout(rows, cols):
    layout = _te_nvfp4_weight_bytes(rows, cols)
    assert fp4_weight_bytes("nvfp4") * rows * cols == pytest.approx(layout, rel=1e-3)
    # by hand: 2 copies x (half a byte + one scale byte per 16 elements)
    assert fp4_weight_bytes("nvfp4") == 2 * (0.5 + 1 / 16) == 1.125
    assert fp4_weight_bytes("mxfp4") == 2 * (0.5 + 1 / 32) and fp4_element_bytes("mxfp4") == 0.53125


def test_layer_weight_bytes_keep_bf16_params_and_a_cache_unless_fp4_param():
    e = ExecutionSpec(precision="fp4")
    assert layer_weight_bytes(e, param_bytes=2.0) == (2.0, 1.125)
    assert layer_weight_bytes(replace(e, fp4_param=True), param_bytes=2.0) == (1.125, 0.0)


@pytest.mark.parametrize("pp", [1, 2])
def test_stage_memory_counts_fp4_weights_as_the_memory_model_states(pp):
    system = load_system("b200", 1)
    base = {**BASE, "pipeline_model_parallel_size": pp, "data_parallel_size": 4 // pp}
    bf16 = estimate_memory(MODEL, ExecutionSpec(**base), system)
    fp4 = estimate_memory(MODEL, ExecutionSpec(**base, precision="fp4"), system)
    fp4p = estimate_memory(MODEL, ExecutionSpec(**base, precision="fp4", fp4_param=True), system)
    for s_bf16, s_fp4, s_p in zip(bf16.stages, fp4.stages, fp4p.stages, strict=True):
        count = s_bf16.detail["params.count"]
        edge = s_bf16.detail["params.embedding_output_mtp"] / 2  # embedding / output stay bf16
        assert s_fp4.detail["params.fp8_weight_cache"] == pytest.approx(1.125 * (count - edge))
        assert s_p.params_bytes == pytest.approx(1.125 * (count - edge) + 2 * edge)
        assert s_fp4.grads_bytes == s_bf16.grads_bytes  # fp32 main grads as in bf16
        assert s_fp4.optimizer_bytes == s_bf16.optimizer_bytes  # fp32 masters and moments
        assert s_fp4.activations_bytes < s_bf16.activations_bytes  # GEMM inputs saved quantised


def test_attention_core_router_and_logits_stay_bf16_while_the_linears_run_fp4():
    gpu = load_gpu("gb200")
    fp4 = rank_shapes(MODEL, ExecutionSpec(**BASE, precision="fp4"))
    bf16 = rank_shapes(MODEL, ExecutionSpec(**BASE))
    p4, p16 = layer_parts(fp4["dense"], gpu), layer_parts(bf16["dense"], gpu)
    assert p4.fwd["core_attn"] == p16.fwd["core_attn"] and p4.fwd["layernorm"] == p16.fwd["layernorm"]
    assert p4.fwd["mlp"] < p16.fwd["mlp"] / 2  # 4x the BF16 peak, less the quantisation passes
    out4, out16 = layer_parts(fp4["output"], gpu), layer_parts(bf16["output"], gpu)
    assert out4.fwd["logits"] == out16.fwd["logits"]
    assert fp4["dense"].key() != bf16["dense"].key() and "fp4_recipe" not in str(bf16["dense"].key())


def test_quantisation_passes_cost_their_bytes_at_hbm_bandwidth():
    gpu = load_gpu("gb200")
    m, n, k = 8192, 28672, 8192
    fwd, bwd = quantise_seconds(m, n, k, gpu, "nvfp4")
    per_byte = 1 / (gpu.hbm_bandwidth_bytes_per_s * gpu.efficiency.hbm)
    # by hand: read bf16 (2 B) + write row- and column-wise copies (2 x 0.5625 B) per element
    assert fwd == pytest.approx(m * k * 3.125 * per_byte) and bwd == pytest.approx(m * n * 3.125 * per_byte)
    assert quantise_seconds(m, n, k, gpu, "mxfp4")[0] == pytest.approx(m * k * (2 + 2 * 0.53125) * per_byte)


@pytest.mark.parametrize("gpu", ["b200", "gb200", "b300", "gb300"])
@pytest.mark.parametrize("ratio", [0.5, 1.0])
def test_an_fp4_step_is_never_faster_than_the_fp4_fp8_peak_ratio_allows(gpu, ratio):
    system = load_system(gpu, 1)
    system = replace(system, gpu=replace(system.gpu, efficiency=replace(system.gpu.efficiency, fp4_fp8_ratio=ratio)))
    execution = ExecutionSpec(**BASE)
    fp8 = project(MODEL, replace(execution, precision="fp8", fp8_recipe="tensorwise"), system)
    fp4 = project(MODEL, replace(execution, precision="fp4"), system)
    bound = system.gpu.fp8_dense_tflops / system.gpu.fp4_dense_tflops
    assert fp4.step_time_ms >= fp8.step_time_ms * bound
    if ratio == 1.0:  # as close to its peak as FP8: faster than FP8 despite the quantisation passes
        assert fp4.step_time_ms < fp8.step_time_ms
    for kind in ("dense",):
        c4 = analytic_cost(rank_shapes(MODEL, replace(execution, precision="fp4"))[kind], system.gpu)
        c8 = analytic_cost(rank_shapes(MODEL, replace(execution, precision="fp8"))[kind], system.gpu)
        assert c4.fwd_ms >= c8.fwd_ms * bound and c4.bwd_ms >= c8.bwd_ms * bound


def test_fp4_gemm_efficiency_is_the_bounded_ratio_of_fp8s():
    gpu = load_gpu("gb200")
    big = 2 * 8192 * 28672 * 8192
    ratio = gemm_efficiency(big, gpu, "fp4", "nvfp4") / gemm_efficiency(big, gpu, "fp8", "tensorwise")
    assert ratio == pytest.approx(gpu.efficiency.fp4_fp8_ratio, rel=0.02)


@pytest.mark.parametrize("name", ["h100", "h200", "mi300x", "mi325x"])
def test_a_gpu_without_fp4_refuses_with_a_sentence(name):
    gpu = load_gpu(name)
    assert gpu.fp4_dense_tflops == 0
    assert "has no FP4 tensor cores" in fp4_problem(gpu, "nvfp4")
    with pytest.raises(ValueError, match="no FP4 tensor cores"):
        gpu.peak_tflops("fp4")


def test_each_recipe_runs_on_its_vendor_only():
    assert fp4_problem(load_gpu("b300"), "nvfp4") is None and fp4_problem(load_gpu("mi355x"), "mxfp4") is None
    assert "use fp4_recipe: mxfp4" in fp4_problem(load_gpu("mi355x"), "nvfp4")
    assert "use fp4_recipe: nvfp4" in fp4_problem(load_gpu("b200"), "mxfp4")
