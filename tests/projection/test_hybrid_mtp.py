"""Multi-token prediction of a hybrid Mamba model (``main/*E/*E``: Megatron-LM @d98e8a64 parse_hybrid_pattern) and
MTP with one layer applied at every depth (megatron-core ``mtp_use_repeated_layer``): compute at each depth,
parameters once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.flops import model_flops_per_token
from primus_ext.projection.project import project
from primus_ext.recipe.resolve import resolve_all

NODE = load_system("h100", 2)
MOE_ARGS = dict(
    model_type="mamba", num_layers=8, hidden_size=1024, ffn_hidden_size=512, num_attention_heads=16,
    group_query_attention=True, num_query_groups=2, kv_channels=64, squared_relu=True,
    normalization="RMSNorm", position_embedding_type="none", add_bias_linear=False, vocab_size=32000,
    hybrid_override_pattern="MEM*EMEM", mamba_head_dim=64, mamba_num_heads=32, num_experts=16,
    moe_router_topk=4, moe_shared_expert_intermediate_size=1024, moe_latent_size=256, seq_length=4096,
    micro_batch_size=1, global_batch_size=64, bf16=True, tensor_model_parallel_size=1,
    expert_model_parallel_size=8, untie_embeddings_and_output_weights=True)
"""A small Nemotron-3-Super-like stack (latent MoE, squared ReLU, shared experts)."""


def _params(projection) -> float:
    """Parameter bytes of the last pipeline stage (the one holding the MTP layers)."""
    return projection.memory.stages[-1].params_bytes


def _resolve(**overrides):
    model, execution, problems, _ = resolve_all(dict(MOE_ARGS, **overrides), NODE)
    return model, execution, problems


def test_the_pattern_after_slash_gives_the_mtp_layers():
    model, _, problems = _resolve(hybrid_override_pattern="MEM*EMEM/*E/*E", mtp_num_layers=2)
    assert not problems, [str(p) for p in problems]
    assert (model.hybrid_layer_pattern, model.mtp_layer_pattern, model.mtp_num_layers) == ("MEM*EMEM", "*E", 2)


def test_a_pattern_and_mtp_num_layers_that_disagree_are_refused_with_the_fix():
    _, _, problems = _resolve(hybrid_override_pattern="MEM*EMEM/*E/*E", mtp_num_layers=1)
    assert [(p.path, p.fix) for p in problems] == [("mtp_num_layers", "set mtp_num_layers: 2")]
    _, _, problems = _resolve(hybrid_override_pattern="MEM*EMEM/*E/E*", mtp_num_layers=2)
    assert [p.path for p in problems] == ["hybrid_override_pattern"]
    from primus_ext.recipe.checks import check

    model, execution, _ = _resolve(mtp_num_layers=2)  # no MTP layers in the pattern
    problems = check(model, execution, NODE)
    assert [p.path for p in problems] == ["mtp_num_layers"] and "/*E/*E" in problems[0].fix


def test_each_mtp_depth_costs_its_layers_and_a_loss_head():
    plain, execution, _ = _resolve()
    mtp, _, _ = _resolve(hybrid_override_pattern="MEM*EMEM/*E/*E", mtp_num_layers=2)
    one, _, _ = _resolve(hybrid_override_pattern="MEM*EMEM/*E", mtp_num_layers=1)
    t0, t1, t2 = (project(m, execution, NODE).step_time_s for m in (plain, one, mtp))
    assert t0 < t1 < t2
    assert t2 - t1 == pytest.approx(t1 - t0, rel=0.05)  # the second depth costs what the first does
    # model FLOPs (Megatron-LM training.py hybrid formula): 2 more '*' and 'E' layers, 2 more logits
    extra = model_flops_per_token(mtp, 4096) - model_flops_per_token(plain, 4096)
    twice_one = 2 * (model_flops_per_token(one, 4096) - model_flops_per_token(plain, 4096))
    assert extra == pytest.approx(twice_one)


def test_a_repeated_mtp_layer_computes_at_each_depth_and_holds_its_weights_once():
    separate, execution, _ = _resolve(hybrid_override_pattern="MEM*EMEM/*E/*E", mtp_num_layers=2)
    shared, _, problems = _resolve(hybrid_override_pattern="MEM*EMEM/*E/*E", mtp_num_layers=2,
                                   mtp_use_repeated_layer=True)
    one, _, _ = _resolve(hybrid_override_pattern="MEM*EMEM/*E", mtp_num_layers=1)
    assert not problems and shared.mtp_use_repeated_layer and shared.mtp_weight_copies == 1
    p_sep, p_shared, p_one = (project(m, execution, NODE) for m in (separate, shared, one))
    # parameters: the repeated model holds what the one-depth model holds
    assert _params(p_shared) == pytest.approx(_params(p_one))
    assert _params(p_sep) > _params(p_shared)
    # compute: both run two depths (the step differs only by the optimizer / gradient work of one layer)
    assert p_shared.step_time_s > p_one.step_time_s
    assert p_shared.step_time_s == pytest.approx(p_sep.step_time_s, rel=0.02)
    assert model_flops_per_token(shared, 4096) == model_flops_per_token(separate, 4096)


def test_a_gpt_models_repeated_mtp_layer_holds_its_weights_once():
    from projection_specs import BASE, MOE

    two = replace(MOE, mtp_num_layers=2)
    shared = replace(two, mtp_use_repeated_layer=True)
    system = load_system("h100", 32)
    p_one, p_two, p_shared = (project(m, BASE, system) for m in (MOE, two, shared))
    assert _params(p_shared) == pytest.approx(_params(p_one))
    assert _params(p_two) > _params(p_shared)
    assert p_shared.step_time_s == pytest.approx(p_two.step_time_s, rel=0.02)
    assert p_shared.step_time_s > p_one.step_time_s
