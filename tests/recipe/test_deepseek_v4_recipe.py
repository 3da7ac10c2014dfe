"""``recipe.deepseek_v4``: Primus's two DeepSeek-V4 Flash recipes (MI355X, BF16 and FP8, read from the Primus mirror
as a user's checkout) load and project with possible figures (they were refused: 'DeepSeek-V4 ... is not
modelled'); their layout as written (43 layers over PP 8) is Megatron's to refuse; bad V4 keys are named."""

from __future__ import annotations

import math

import pytest

from primus_ext.errors import RecipeError
from primus_ext.hardware import load_system
from primus_ext.projection import project
from primus_ext.recipe import load_recipe
from primus_ext.recipe.resolve import resolve_all

RECIPES = ("deepseek_v4_flash-BF16-pretrain.yaml", "deepseek_v4_flash-FP8-pretrain.yaml")
FLASH = dict(
    model_type="deepseek_v4", num_layers=4, hidden_size=256, num_attention_heads=4, kv_channels=64,
    qk_pos_emb_head_dim=16, ffn_hidden_size=512, moe_ffn_hidden_size=128, moe_shared_expert_intermediate_size=128,
    q_lora_rank=64, o_lora_rank=32, o_groups=2, num_experts=8, moe_router_topk=2, num_hash_layers=1,
    compress_ratios="[0, 4, 128, 4]", vocab_size=1024, swiglu=True, normalization="RMSNorm", seq_length=512,
    micro_batch_size=1, global_batch_size=8, bf16=True)
"""A small V4 model of Flash's shape (deepseek_v4_flash.yaml's keys)."""
NODE = load_system("mi355x", 1)



@pytest.mark.parametrize("name", RECIPES)
def test_flash_recipes_project_with_possible_figures(primus_tree, name):
    """At 8 nodes (PP 8 x EP 8), the first stage one layer (Megatron's uneven split: 42 more over 7 stages)."""
    recipe = load_recipe(primus_tree / "examples/megatron/configs/MI355X" / name,
                         ["decoder_first_pipeline_num_layers=1"], cluster="mi355x", nodes=8, env={})
    assert recipe.model.hybrid_layer_pattern.count("S") == 21 and recipe.model.mtp_layer_pattern == "WV"
    assert recipe.execution.decoder_first_pipeline_num_layers == 2  # one V4 layer: two halves
    p = project(recipe.model, recipe.execution, recipe.system, None)
    assert math.isfinite(p.step_time_s) and p.step_time_s > 0
    assert 0.02 < p.mfu < 0.6, p.mfu
    # its full recompute is Primus's V4 block's, said as such (not megatron-core MambaStack's missing path)
    assert any("DeepseekV4TransformerBlock" in w for w in recipe.warnings)
    assert not any("MambaStack" in w for w in recipe.warnings)


@pytest.mark.parametrize("name", RECIPES)
def test_flash_recipes_as_written_are_refused_for_their_layout(primus_tree, name):
    """43 layers over PP 8 without an uneven split: megatron-core refuses it (num_layers divisible by PP)."""
    with pytest.raises(RecipeError) as err:
        load_recipe(primus_tree / "examples/megatron/configs/MI355X" / name, cluster="mi355x", nodes=8, env={})
    assert {p.path.rsplit(".", 1)[-1] for p in err.value.problems} >= {"pipeline_model_parallel_size"}
    assert not any("not modelled" in p.message for p in err.value.problems)


def test_hash_layers_and_ratios_place_the_kinds():
    model, _, problems, warnings = resolve_all(FLASH, NODE)
    assert not problems, problems
    assert model.hybrid_layer_pattern == "WUSVHVSV" and model.num_layers == 8
    assert any("1 CSA" not in w and "hybrid stack" in w for w in warnings)


@pytest.mark.parametrize(("over", "path"), [
    (dict(compress_ratios="[0, 4]"), "compress_ratios"),
    (dict(compress_ratios="[0, 4, 8, 4]"), "compress_ratios"),
    (dict(compress_ratios="not a list"), "compress_ratios"),
    (dict(num_layers_per_virtual_pipeline_stage=1), "num_layers_per_virtual_pipeline_stage"),
    (dict(moe_layer_freq=2), "moe_layer_freq"),
    (dict(o_groups=0), "o_groups"),
])
def test_bad_v4_keys_are_named(over, path):
    _, _, problems, _ = resolve_all(dict(FLASH, **over), NODE)
    assert path in [p.path for p in problems], problems
    assert all(p.fix for p in problems if p.path == path)


@pytest.mark.parametrize("key", ["tensor_model_parallel_size", "context_parallel_size"])
def test_tensor_and_context_parallel_are_refused_with_the_reason(key):
    """The legality check every proposer passes (``recipe.checks.check``): Primus's attention splits neither."""
    from primus_ext.recipe.checks import check

    model, execution, problems, _ = resolve_all(dict(FLASH, **{key: 2}), load_system("mi355x", 1))
    found = [p for p in check(model, execution, NODE) if "DeepseekV4Attention" in p.message]
    assert found and "set tensor_model_parallel_size: 1" in found[0].fix, problems
