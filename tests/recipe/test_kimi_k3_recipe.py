"""``recipe.kimi_k3``: Primus's two MI355X Kimi-K3 recipes (read from the Primus mirror as a user's checkout) load and
project with possible figures (they were refused: 'linear_attention_freq: linear-attention layers ... not
modelled'); what the reading does not price is refused with a sentence naming it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.kinds import get_kind
from primus_ext.model.params import attention_params
from primus_ext.model.rank_shape import RankShape
from primus_ext.projection import project
from primus_ext.recipe import load_recipe
from primus_ext.recipe.resolve import resolve_all

NODE = load_system("mi355x", 1)
SMALL = dict(
    model_type="kimi_k3", num_layers=8, hidden_size=256, num_attention_heads=4, kv_channels=64, ffn_hidden_size=512,
    q_lora_rank=64, kv_lora_rank=32, qk_head_dim=64, v_head_dim=64, qk_pos_emb_head_dim=16,
    multi_latent_attention=False, qk_layernorm=False, linear_num_key_heads=4, linear_num_value_heads=4,
    linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4,
    linear_attention_freq="([1]*3+[0])*2", attn_res_block_size=4, num_experts=8, moe_router_topk=2,
    moe_ffn_hidden_size=128, moe_shared_expert_intermediate_size=256, routed_expert_hidden_size=128,
    moe_layer_freq="([0]*1+[1]*7)", vocab_size=1024, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
    seq_length=512, micro_batch_size=1, global_batch_size=8, bf16=True, mla_use_output_gate=True,
    kda_use_full_rank_gate=True, latent_moe_use_norm=True)
"""A small Kimi-K3 model of kimi_k3_8L_official.yaml's shape (kimi_k3_base.yaml's keys; MLA off as the base sets)."""



@pytest.mark.parametrize(("name", "nodes", "layers"), [("kimi_k3-BF16-curve.yaml", 1, 24),
                                                        ("kimi_k3-BF16-8L-official.yaml", 4, 8)])
def test_k3_recipes_project_with_possible_figures(primus_tree, name, nodes, layers):
    """At the nodes Primus runs them on (the 8L launcher: 'WHY >= 4 NODES'), with the modules Primus builds."""
    recipe = load_recipe(primus_tree / "examples/megatron/configs/MI355X" / name, [], cluster="mi355x", nodes=nodes,
                         env={})
    m = recipe.model
    assert m.num_layers == 2 * layers and m.multi_latent_attention and m.moe_latent_size
    assert m.hybrid_layer_pattern[:4] == "JDXN" and m.hybrid_layer_pattern.count("L") == layers // 4
    p = project(m, recipe.execution, recipe.system, None)
    assert math.isfinite(p.step_time_s) and p.step_time_s > 0 and 0.02 < p.mfu < 0.6, p.mfu
    if recipe.execution.recompute_granularity == "full":  # the 8L recipe: Primus's K3 block's, said as such
        assert any("KimiK3TransformerBlock" in w for w in recipe.warnings)
        assert not any("MambaStack" in w for w in recipe.warnings)


def test_the_stack_is_primus_layer_pattern():
    model, _, problems, warnings = resolve_all(SMALL, NODE)
    assert not problems, problems
    assert model.hybrid_layer_pattern == "JDXNXNLNXNXNXNLN" and model.moe_latent_size == 128
    assert any("8 layers (6 Kimi delta attention, 2 gated MLA" in w for w in warnings)
    k3 = dict(get_kind("kimi_k3_mla").dims(model).__dict__)
    assert k3["attn_res_block_size"] == 4 and k3["attn_res_candidates"] > 1


def test_gated_mla_is_mla_with_its_norms_gate_and_mixer():
    """``KimiK3MLASelfAttention``: megatron-core MLA with q / kv latent norms (always built), plus ``linear_o_gate``
    (hidden -> heads x v_head_dim) and the pre-attention mixer (2 x hidden), plus the input norm."""
    model, execution, _, _ = resolve_all(SMALL, NODE)
    kind = get_kind("kimi_k3_mla")
    arch = kind.layer_arch(model, execution)
    shape = RankShape(kind="kimi_k3_mla", arch=arch)
    mla = attention_params(replace(shape, arch=replace(arch, qk_layernorm=False)))
    assert kind.params(shape) == 256 + mla + (64 + 32) + 256 * 4 * 64 + 2 * 256


@pytest.mark.parametrize(("key", "value"), [("kda_use_full_rank_gate", False), ("mla_use_output_gate", False),
                                            ("latent_moe_use_norm", False), ("mtp_num_layers", 1),
                                            ("num_layers_per_virtual_pipeline_stage", 2)])
def test_what_the_reading_does_not_price_is_refused(key, value):
    _, _, problems, _ = resolve_all(dict(SMALL, **{key: value}), NODE)
    assert [p.path for p in problems] == [key] and "Kimi-K3" in problems[0].message


def test_a_bad_linear_attention_freq_is_named():
    _, _, problems, _ = resolve_all(dict(SMALL, linear_attention_freq="([1]*3+[0])*3"), NODE)
    assert [p.path for p in problems] == ["linear_attention_freq"] and "8 layers" in problems[0].message
