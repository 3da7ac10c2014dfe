"""The memory options of the DeepSeek-V3 report (sec. 3.2.3, 3.3.3) as megatron-core keys, priced: the SwiGLU input
cached in fp8 (``activation_func_fp8_input_store``), refused for other activations as megatron-core refuses it; and the
verdict for a peak within the model's demonstrated error of the capacity."""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.layers import rank_shapes
from primus_ext.model.memory import MEMORY_ERROR, margin_verdict
from primus_ext.model.memory.saved import activation_parts
from primus_ext.recipe.checks import check
from primus_ext.specs import ExecutionSpec, ModelSpec

MOE = ModelSpec(name="moe", num_layers=4, hidden_size=2048, ffn_hidden_size=8192, num_attention_heads=16,
                num_query_groups=4, kv_channels=128, vocab_size=32000, num_experts=16, moe_router_topk=4,
                moe_ffn_hidden_size=1024, moe_shared_expert_intermediate_size=1024,
                moe_layer_pattern=(False, True, True, True))
EX = ExecutionSpec(seq_length=4096, micro_batch_size=1, global_batch_size=8, data_parallel_size=8,
                   expert_model_parallel_size=8)


def _parts(ex: ExecutionSpec, kind: str) -> dict[str, float]:
    return activation_parts(rank_shapes(MOE, ex)[kind])


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_the_swiglu_input_is_kept_in_one_byte_per_element(kind):
    plain, fp8 = _parts(EX, kind), _parts(replace(EX, activation_func_fp8_input_store=True), kind)
    tokens = 4096
    if kind == "dense":  # fused SwiGLU keeps its input: 2 x ffn per token, bf16 -> fp8
        assert plain["mlp_act"] - fp8["mlp_act"] == pytest.approx(2 * 8192 * tokens)
    else:  # per routed slot (top-4 of the balanced router) and for the shared expert
        slots = tokens * 4
        assert plain["experts"] - fp8["experts"] == pytest.approx(2 * 1024 * slots)
        assert plain["shared_experts"] - fp8["shared_experts"] == pytest.approx(2 * 1024 * tokens)
    unchanged = {k for k in plain if k not in ("mlp_act", "experts", "shared_experts")}
    assert all(plain[k] == fp8[k] for k in unchanged)


def test_megatron_refuses_it_for_another_activation():
    gelu = replace(MOE, activation="geglu")
    problems = check(gelu, replace(EX, activation_func_fp8_input_store=True), load_system("h100", 1))
    assert any(p.path == "activation_func_fp8_input_store" and "SwiGLU only" in p.message for p in problems)
    assert not [p for p in check(MOE, replace(EX, activation_func_fp8_input_store=True), load_system("h100", 1))
                if p.path == "activation_func_fp8_input_store"]


def test_a_peak_within_the_demonstrated_error_is_its_own_verdict():
    cap = 100.0
    assert margin_verdict(cap * (1 + MEMORY_ERROR) - 1e-6, cap) == "within the model's error"
    assert margin_verdict(cap * (1 + MEMORY_ERROR) + 1e-6, cap) == "out of memory"
    assert margin_verdict(cap, cap) == "over the margin"
