"""Group-limited routing (megatron-core ``moe_router_num_groups`` / ``moe_router_group_topk``):
the resolver reads it, the DeepSeek-V3 preset sets it, and check() rejects what megatron-core 0.16.1's
``TransformerConfig.__post_init__`` rejects (constructed here as the independent reference)."""

from __future__ import annotations

import pytest
from recipe_data import BASE, MOE, REPO, megatron_config_accepts

from primus_ext.hardware import load_system
from primus_ext.recipe import check, load_recipe, resolve_specs


def _resolve(args):
    model, execution, problems = resolve_specs(args, load_system("mi300x", 1))
    assert not problems, [str(p) for p in problems]
    return model, execution


def test_resolver_reads_group_routing():
    model, _ = _resolve({**MOE, "moe_router_num_groups": 4, "moe_router_group_topk": 2})
    assert (model.moe_router_num_groups, model.moe_router_group_topk) == (4, 2)
    model, _ = _resolve(MOE)
    assert (model.moe_router_num_groups, model.moe_router_group_topk) == (None, None)
    model, _ = _resolve({**MOE, "moe_router_num_groups": 0, "moe_router_group_topk": 0})  # 0 = off, as in megatron
    assert (model.moe_router_num_groups, model.moe_router_group_topk) == (None, None)
    model, _ = _resolve({**BASE, "moe_router_num_groups": 4, "moe_router_group_topk": 2})  # dense: no router
    assert (model.moe_router_num_groups, model.moe_router_group_topk) == (None, None)


def test_resolver_rejects_a_malformed_group_count():
    _, _, problems = resolve_specs({**MOE, "moe_router_num_groups": "four"}, load_system("mi300x", 1))
    assert [p.path for p in problems] == ["moe_router_num_groups"]


def test_deepseek_v3_preset_is_node_limited():
    # Hugging Face deepseek-ai/DeepSeek-V3 config.json: n_group 8, topk_group 4
    model = load_recipe(REPO / "recipes" / "deepseek_v3-pretrain.yaml").model
    assert (model.num_experts, model.moe_router_num_groups, model.moe_router_group_topk) == (256, 8, 4)


CASES = [
    ("off", {}),
    ("ok", {"moe_router_num_groups": 4, "moe_router_group_topk": 2}),
    ("all_groups", {"moe_router_num_groups": 4, "moe_router_group_topk": 4}),
    ("groups_only", {"moe_router_num_groups": 3}),  # ignored by megatron-core without group_topk
    ("no_groups", {"moe_router_group_topk": 2}),
    ("indivisible", {"moe_router_num_groups": 3, "moe_router_group_topk": 2}),
    ("topk_above_groups", {"moe_router_num_groups": 4, "moe_router_group_topk": 8}),
]


def _megatron_accepts(model) -> bool:
    kwargs = dict(
        num_layers=model.num_layers, hidden_size=model.hidden_size, ffn_hidden_size=model.ffn_hidden_size,
        num_attention_heads=model.num_attention_heads, num_query_groups=model.num_query_groups,
        add_bias_linear=model.add_bias_linear, num_moe_experts=model.num_experts,
        moe_ffn_hidden_size=model.moe_ffn_hidden_size, moe_router_topk=model.moe_router_topk,
        moe_router_num_groups=model.moe_router_num_groups, moe_router_group_topk=model.moe_router_group_topk,
    )
    return megatron_config_accepts(**kwargs)


@pytest.mark.parametrize(("name", "changes"), CASES, ids=[c[0] for c in CASES])
def test_group_rules_agree_with_megatron_core(name, changes):
    pytest.importorskip("megatron.core")
    model, execution = _resolve({**MOE, **changes})
    ours = check(model, execution, load_system("mi300x", 1))
    assert (not ours) == _megatron_accepts(model), [str(p) for p in ours]
    assert all(p.path.startswith("moe_router_") for p in ours)
