"""fp8 recipes: weight formats by GPU generation, the per-rank shape carrying the recipe, row-wise GEMM cost."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest

from primus_ext.hardware import load_gpu
from primus_ext.measure.store import shape_from_dict
from primus_ext.model.analytic import analytic_cost
from primus_ext.model.fp8 import fp8_weight_bytes, fp8_weight_cache_bytes, layer_weight_bytes
from primus_ext.model.layers import rank_shapes
from primus_ext.model.roofline import gemm_efficiency
from primus_ext.specs import ExecutionSpec, ModelSpec

MODEL = ModelSpec(name="m", num_layers=4, hidden_size=2048, ffn_hidden_size=8192, num_attention_heads=16,
                  num_query_groups=4, kv_channels=128, vocab_size=32000, activation="swiglu")


def test_weight_bytes_follow_the_gemm_layouts_of_each_generation():
    # by hand: Hopper per-tensor = data + transpose; Blackwell = data; MXFP8 = 2 x (1 + 1/32) anywhere
    hopper, blackwell, cdna4 = (load_gpu(n).fp8_any_layout for n in ("h100", "b200", "mi355x"))
    assert fp8_weight_bytes("delayed", hopper) == 2 and fp8_weight_bytes("tensorwise", blackwell) == 1
    assert fp8_weight_bytes("mxfp8", blackwell) == fp8_weight_bytes("mxfp8", cdna4) == 2.0625
    assert fp8_weight_bytes("blockwise", blackwell) == 2 and fp8_weight_bytes("delayed", False) == 2
    assert fp8_weight_cache_bytes("rowwise", hopper) == 0 and fp8_weight_cache_bytes("delayed", hopper) == 2
    bf16 = ExecutionSpec()
    assert layer_weight_bytes(bf16, blackwell, param_bytes=2.0) == (2.0, 0.0)
    fp8 = ExecutionSpec(precision="fp8", fp8_recipe="tensorwise")
    assert layer_weight_bytes(fp8, blackwell, param_bytes=2.0) == (2.0, 1.0)
    assert layer_weight_bytes(replace(fp8, fp8_param_gather=True), blackwell, param_bytes=2.0) == (1.0, 0.0)


def test_shape_carries_the_recipe_only_under_fp8_and_keeps_old_keys():
    delayed = rank_shapes(MODEL, ExecutionSpec(precision="fp8"))["dense"]
    rowwise = rank_shapes(MODEL, ExecutionSpec(precision="fp8", fp8_recipe="rowwise"))["dense"]
    bf16 = rank_shapes(MODEL, ExecutionSpec(fp8_recipe="rowwise"))["dense"]
    assert bf16.fp8_recipe == "delayed" and rowwise.fp8_recipe == "rowwise"
    assert rowwise.key() != delayed.key()
    assert "fp8_recipe" not in delayed.key() and delayed.key() == replace(rowwise, fp8_recipe="delayed").key()
    assert shape_from_dict(json.loads(json.dumps(asdict(rowwise)))) == rowwise  # the store's round trip


def test_rowwise_gemms_are_charged_at_their_own_efficiency():
    h100 = load_gpu("h100")
    gpu = replace(h100, efficiency=replace(h100.efficiency, fp8_rowwise_ratio=1.0))
    slow = replace(h100, efficiency=replace(h100.efficiency, fp8_rowwise_ratio=0.5))
    flops = 1e12
    def seconds(gpu, recipe="tensorwise"):
        return flops / (gpu.fp8_dense_tflops * 1e12 * gemm_efficiency(flops, gpu, "fp8", recipe))

    eff = slow.efficiency  # one fixed time per GEMM, whatever its rate (gemm_efficiency's docstring)
    fixed = eff.gemm_half_size_flops / (eff.gemm_max * slow.bf16_dense_tflops * 1e12)
    assert seconds(slow, "rowwise") - fixed == pytest.approx(2 * (seconds(slow) - fixed))
    assert gemm_efficiency(flops, slow, "bf16", "rowwise") == gemm_efficiency(flops, slow, "bf16")
    e = ExecutionSpec(precision="fp8", fp8_recipe="rowwise", micro_batch_size=4, seq_length=4096)
    shape = rank_shapes(MODEL, e)["dense"]
    fast_cost, slow_cost = analytic_cost(shape, gpu), analytic_cost(shape, slow)
    per_tensor = analytic_cost(replace(shape, fp8_recipe="tensorwise"), slow)
    assert slow_cost.fwd_ms > fast_cost.fwd_ms  # the GEMMs are compute-bound at this size
    assert per_tensor.fwd_ms == pytest.approx(fast_cost.fwd_ms)
