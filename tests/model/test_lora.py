"""LoRA fine-tuning (Primus's peft): adapter parameters, frozen-weight backward, memory and model FLOPs.

Figures are hand-derived from Primus's ``ParallelLinearAdapter`` (linear_in: in -> r, linear_out: r -> out, both
split by TP) on megatron-core's fused linears (linear_qkv, linear_fc1 with gate and up together).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus_ext.hardware import load_gpu, load_system
from primus_ext.model.analytic import analytic_cost
from primus_ext.model.flops import model_flops_per_step
from primus_ext.model.layers import rank_shapes
from primus_ext.model.lora import lora_cost, lora_params
from primus_ext.model.memory import estimate_memory, peak_bytes
from primus_ext.projection import evaluate
from primus_ext.specs import ExecutionSpec, ModelSpec

LLAMA3_8B = ModelSpec(name="llama3_8B", num_layers=32, hidden_size=4096, ffn_hidden_size=14336,
                      num_attention_heads=32, num_query_groups=8, kv_channels=128, vocab_size=128256)
TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
# per layer at r = 32: qkv 32*(4096+6144), proj 32*(4096+4096), fc1 32*(4096+2*14336), fc2 32*(14336+4096)
PER_LAYER = 327_680 + 262_144 + 1_048_576 + 589_824
MI355X = load_system("mi355x", 1)


def _exec(**kw) -> ExecutionSpec:
    base = dict(data_parallel_size=8, micro_batch_size=1, global_batch_size=128, seq_length=2048,
                use_distributed_optimizer=True, lora_rank=32, lora_targets=TARGETS)
    return ExecutionSpec(**{**base, **kw})


def test_adapter_parameters_follow_the_fused_linears():
    dense = rank_shapes(LLAMA3_8B, _exec())["dense"]
    assert lora_params(dense) == (PER_LAYER, 0)
    assert PER_LAYER * 32 == 71_303_168  # ~0.9 % of the 8B base
    assert lora_params(rank_shapes(LLAMA3_8B, _exec(tensor_model_parallel_size=2, data_parallel_size=4))["dense"]) \
        == (PER_LAYER // 2, 0)
    only_attention = rank_shapes(LLAMA3_8B, _exec(lora_targets=("linear_qkv", "linear_proj")))["dense"]
    assert lora_params(only_attention) == (327_680 + 262_144, 0)
    assert lora_params(rank_shapes(LLAMA3_8B, _exec(lora_rank=0, lora_targets=()))["dense"]) == (0, 0)


def test_moe_experts_share_one_adapter_per_grouped_linear():
    moe = replace(LLAMA3_8B, num_experts=8, moe_ffn_hidden_size=2048, moe_router_topk=2,
                  moe_layer_pattern=(True,) * 32)
    shape = rank_shapes(moe, _exec(expert_model_parallel_size=8))["moe"]
    dense, expert = lora_params(shape)
    assert dense == 327_680 + 262_144  # attention only: the MoE layer has no dense MLP
    assert expert == 32 * (4096 + 2 * 2048) + 32 * (2048 + 4096)  # LoRAMerge: one adapter per TE grouped linear


def test_frozen_backward_drops_the_weight_gradients_and_adds_the_adapters():
    gpu = load_gpu("mi355x")
    shape = rank_shapes(LLAMA3_8B, _exec())["dense"]
    base = analytic_cost(replace(shape, lora_rank=0, lora_targets=()), gpu)
    lora = lora_cost(base, shape, gpu)
    adapter = lora.fwd_ms - base.fwd_ms
    # eight skinny GEMMs (tokens x r x width): ~1 % of the layer's FLOPs, memory-bound (reading the layer
    # inputs again): a few percent of the forward, growing with the tokens like the inputs
    assert 0.01 * base.fwd_ms < adapter < 0.10 * base.fwd_ms
    big = rank_shapes(LLAMA3_8B, _exec(micro_batch_size=8, global_batch_size=512))["dense"]
    big_base = analytic_cost(replace(big, lora_rank=0, lora_targets=()), gpu)
    assert lora_cost(big_base, big, gpu).fwd_ms - big_base.fwd_ms == pytest.approx(8 * adapter, rel=0.05)
    assert lora.bwd_ms == pytest.approx(base.bwd_ms - base.wgrad_ms + 2 * adapter)
    assert lora.wgrad_ms == pytest.approx(adapter) and lora.source == "analytic+lora"
    assert lora_cost(base, replace(shape, lora_rank=0), gpu) is base


def test_memory_keeps_frozen_weights_but_no_gradients_or_optimizer_for_them():
    full = estimate_memory(LLAMA3_8B, _exec(lora_rank=0, lora_targets=()), MI355X).stages[0]
    lora = estimate_memory(LLAMA3_8B, _exec(), MI355X).stages[0]
    adapters = lora.detail["params.lora_adapter_count"]
    assert adapters == 32 * PER_LAYER
    assert lora.params_bytes == pytest.approx(full.params_bytes + 2 * adapters)  # bf16 base + bf16 adapters
    assert lora.grads_bytes == pytest.approx(4 * adapters)  # fp32 main grads of the adapters only
    assert lora.optimizer_bytes == pytest.approx(adapters / 8 * 12)  # fp32 master + Adam, sharded over DP 8
    assert peak_bytes(LLAMA3_8B, _exec(), MI355X) == pytest.approx(
        estimate_memory(LLAMA3_8B, _exec(), MI355X).peak_bytes)  # the pre-filter agrees


def test_projection_runs_faster_reduces_only_adapters_and_counts_frozen_flops():
    full_ex = _exec(lora_rank=0, lora_targets=())
    full, lora = evaluate(LLAMA3_8B, full_ex, MI355X), evaluate(LLAMA3_8B, _exec(), MI355X)
    assert lora.step_time_s < 0.8 * full.step_time_s  # no weight-gradient GEMMs
    assert lora.stages[0].dense_params == 32 * PER_LAYER  # what DP reduces and the optimizer steps
    assert lora.breakdown.comm("dp_grad").total_s < 0.05 * full.breakdown.comm("dp_grad").total_s
    ratio = model_flops_per_step(LLAMA3_8B, 2048, 128, frozen_weights=True) / model_flops_per_step(
        LLAMA3_8B, 2048, 128)
    assert 2 / 3 < ratio < 0.75  # weight GEMMs twice instead of three times; core attention still three
    assert 0 < lora.mfu < 1
