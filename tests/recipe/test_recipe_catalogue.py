"""Unknown keys: kept and passed through, named in warnings, with a did-you-mean when close."""

from __future__ import annotations

from recipe_data import BASE

from primus_ext.recipe import load_recipe
from primus_ext.recipe.catalogue import did_you_mean, known_keys


def test_did_you_mean_on_typos_only():
    assert did_you_mean("tensor_parallel_sise") == "tensor_model_parallel_size"
    assert did_you_mean("pipline_model_parallel_size") == "pipeline_model_parallel_size"
    assert did_you_mean("num_expert") == "num_experts"
    assert did_you_mean("my_own_flag") is None


def test_unknown_keys_pass_through_with_warnings(write):
    write("models/m.yaml", {**BASE, "my_launcher_flag": 3})
    path = write("exp.yaml", {"modules": {"pre_trainer": {"framework": "megatron", "model": "m.yaml",
                                                          "overrides": {"micro_batch_sise": 4}}}})
    recipe = load_recipe(path)
    assert dict(recipe.unknown_keys) == {"my_launcher_flag": 3, "micro_batch_sise": 4}
    assert recipe.megatron_args["micro_batch_sise"] == 4 and recipe.execution.micro_batch_size == 1
    (typo,) = [w for w in recipe.warnings if "micro_batch_sise" in w]
    assert "modules.pre_trainer.overrides" in typo and "did you mean `micro_batch_size`" in typo
    (plain,) = [w for w in recipe.warnings if "my_launcher_flag" in w]
    assert "models/m.yaml" in plain and "did you mean" not in plain


def test_catalogue_holds_primus_mcore_and_resolver_keys():
    keys = known_keys()
    assert {"patch_zero_bubble", "use_turbo_attention"} <= keys  # Primus presets
    assert {"window_attn_skip_freq", "glu_linear_offset"} <= keys  # megatron-core TransformerConfig
    assert {"num_virtual_stages_per_pipeline_rank", "first_k_dense_replace"} <= keys  # read by the resolver
