"""GPT recipes with gated DeltaNet attention layers (Qwen3-Next / Qwen3.5) project as the hybrid stack of their
halves, or are refused with a sentence where that reading would not be exact."""

from __future__ import annotations

import pytest
from recipe_data import BASE

from primus_ext.hardware import load_system
from primus_ext.model.kinds import get_kind
from primus_ext.model.kinds.gated_delta import GatedDeltaDims
from primus_ext.model.layers import hybrid_symbol_params
from primus_ext.projection.project import project
from primus_ext.recipe.resolve import resolve_all

NODE = load_system("mi355x", 1)
QWEN35 = dict(
    BASE, num_layers=8, hidden_size=2048, ffn_hidden_size=5120, num_attention_heads=16, group_query_attention=True,
    num_query_groups=2, kv_channels=256, qk_layernorm=True, num_experts=16, moe_router_topk=4,
    moe_ffn_hidden_size=512, moe_shared_expert_intermediate_size=512, moe_shared_expert_gate=True, moe_layer_freq=1,
    experimental_attention_variant="gated_delta_net", linear_attention_freq=4, linear_conv_kernel_dim=4,
    linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
    seq_length=4096, global_batch_size=64, expert_model_parallel_size=8)
"""Primus primus/configs/models/megatron/qwen3_5_35B_A3B.yaml's layer, fewer layers and experts."""


def test_a_qwen3_5_recipe_projects_as_the_hybrid_stack_of_its_halves():
    """It was refused: 'experimental attention variants (gated delta net ...) are not modelled'."""
    model, execution, problems, warnings = resolve_all(QWEN35, NODE)
    assert not problems, problems
    assert model.hybrid_layer_pattern == "GEGEGE*E" * 2 and model.num_layers == 16  # every 4th layer softmax
    assert model.moe_layer_pattern == tuple(c == "E" for c in model.hybrid_layer_pattern)
    assert get_kind("gated_delta").dims(model) == GatedDeltaDims()  # Qwen3-Next's sizes = megatron-core's defaults
    assert any("hybrid stack" in w for w in warnings)
    p = project(model, execution, NODE)
    assert {"gated_delta", "hybrid_attention", "hybrid_moe"} <= set(p.sources) and 0 < p.mfu <= 1
    # a G half holds the GDN module and its fused pre-norm; the attention half is a GPT layer's attention
    per_symbol = hybrid_symbol_params(model, execution)
    d = GatedDeltaDims()
    expected = 2048 + 2048 * d.in_proj_dim + d.conv_dim * 4 + 2 * 32 + 128 + d.v_dim * 2048
    assert per_symbol["G"] == expected


def test_the_list_form_places_softmax_layers_where_it_says():
    model, _, problems, _ = resolve_all(dict(QWEN35, linear_attention_freq=[1, 0, 1, 1, 0, 1, 1, 1]), NODE)
    assert not problems and model.hybrid_layer_pattern == "GE*EGEGE*EGEGEGE"


@pytest.mark.parametrize(("key", "value"), [("recompute_num_layers", 2), ("num_layers_per_virtual_pipeline_stage", 2),
                                            ("mtp_num_layers", 1), ("pipeline_model_parallel_size", 3)])
def test_what_the_hybrid_reading_would_misstate_is_refused(key, value):
    extra = {"recompute_granularity": "full", "recompute_method": "uniform"} if key == "recompute_num_layers" else {}
    _, _, problems, _ = resolve_all(dict(QWEN35, **extra, **{key: value}), NODE)
    assert [p.path for p in problems] == [key] and "gated DeltaNet" in problems[0].message


def test_a_missing_or_malformed_frequency_is_a_problem():
    for value in (None, 0, [1, 0]):
        args = dict(QWEN35, linear_attention_freq=value)
        _, _, problems, _ = resolve_all(args, NODE)
        assert [p.path for p in problems] == ["linear_attention_freq"], value
