"""Precedence: model preset < module preset (Primus's merge) < overrides < command-line key=value; cluster sources.

Primus merges the two presets with ``merge_namespace(module_config, model_config, allow_override=False)``
(``primus/core/launcher/parser.py`` at fd1eeab): a key both set keeps the module preset's value."""

from __future__ import annotations

import pytest
from recipe_data import BASE

from primus_ext.errors import RecipeError
from primus_ext.recipe import load_recipe

KEYS = ("micro_batch_size", "global_batch_size", "seq_length", "tensor_model_parallel_size")


@pytest.fixture
def experiment(write):
    arch = {k: v for k, v in BASE.items() if k not in ("micro_batch_size", "global_batch_size", "seq_length")}
    # each level sets every key it may set; the winner of each key identifies the level
    write("modules/trainer.yaml", {"micro_batch_size": 1, "global_batch_size": 16, "seq_length": 512,
                                   "tensor_model_parallel_size": 1})
    write("models/m.yaml", {**arch, "global_batch_size": 32, "seq_length": 1024, "tensor_model_parallel_size": 1})
    return write("exp.yaml", {
        "primus_ext": {"cluster": "mi300x", "nodes": 2},
        "modules": {"pre_trainer": {"framework": "megatron", "config": "trainer.yaml", "model": "m.yaml",
                                    "overrides": {"seq_length": 2048, "tensor_model_parallel_size": 4}}}})


def test_four_levels(experiment):
    recipe = load_recipe(experiment, ["tensor_model_parallel_size=2"])
    e = recipe.execution
    assert e.micro_batch_size == 1  # module preset only
    assert e.global_batch_size == 16  # the module preset's value survives the model preset's (Primus)
    assert e.seq_length == 2048  # overrides beat both presets
    assert e.tensor_model_parallel_size == 2  # command line beats overrides
    assert recipe.origins["micro_batch_size"].endswith("modules/trainer.yaml:micro_batch_size")
    assert recipe.origins["global_batch_size"].endswith("modules/trainer.yaml:global_batch_size")
    # the dropped model-preset value is named, with what to do about it
    assert any("`global_batch_size` is set by both presets" in w and "32" in w for w in recipe.warnings)
    assert recipe.origins["seq_length"] == "modules.pre_trainer.overrides.seq_length"
    assert recipe.origins["tensor_model_parallel_size"] == "cli.tensor_model_parallel_size"


def test_overrides_win_without_command_line(experiment):
    assert load_recipe(experiment).execution.tensor_model_parallel_size == 4


def test_command_line_values_are_yaml_typed(experiment):
    recipe = load_recipe(experiment, ["sequence_parallel=false", "recompute_modules=[core_attn, mlp]",
                                      "recompute_granularity=selective"])
    assert recipe.execution.sequence_parallel is False
    assert recipe.execution.recompute_modules == ("core_attn", "mlp")


def test_cluster_from_block_then_arguments(experiment):
    recipe = load_recipe(experiment)
    assert (recipe.system.name, recipe.system.num_nodes, recipe.execution.dp) == ("mi300x", 2, 4)
    recipe = load_recipe(experiment, cluster="h100", nodes=4)
    assert (recipe.system.name, recipe.system.world_size, recipe.execution.dp) == ("h100", 32, 8)


def test_cluster_defaults_without_block(write):
    recipe = load_recipe(write("flat.yaml", BASE))
    assert (recipe.system.name, recipe.system.num_nodes) == ("mi300x", 1)


def test_unknown_cluster_points_at_where_it_was_given(experiment, write):
    with pytest.raises(RecipeError) as err:
        load_recipe(experiment, cluster="tpu-v9")
    assert err.value.problems[0].path == "--cluster"
    assert "mi300x" in err.value.problems[0].fix
    bad = write("bad.yaml", {**BASE, "primus_ext": {"cluster": "nope", "nodes": 0}})
    with pytest.raises(RecipeError) as err:
        load_recipe(bad)
    assert [p.path for p in err.value.problems] == ["primus_ext.nodes"]


def test_bad_command_line_item(experiment):
    with pytest.raises(RecipeError) as err:
        load_recipe(experiment, ["tensor_model_parallel_size", "9x=1"])
    assert [p.path for p in err.value.problems] == ["cli", "cli"]


def test_nodes_from_nnodes_after_the_block(experiment, write):
    """--nodes, then the recipe's primus_ext block, then $NNODES (Primus's launch scripts), then 1."""
    assert load_recipe(experiment, env={"NNODES": "8"}).system.num_nodes == 2  # the block wins
    assert load_recipe(experiment, nodes=4, env={"NNODES": "8"}).system.num_nodes == 4
    flat = write("flat.yaml", BASE)
    assert load_recipe(flat, env={"NNODES": "8"}, cluster="mi300x").system.num_nodes == 8
    assert load_recipe(flat, env={}, cluster="mi300x").system.num_nodes == 1


def test_bad_nnodes_is_a_problem_naming_the_variable(write):
    with pytest.raises(RecipeError) as err:
        load_recipe(write("flat.yaml", BASE), env={"NNODES": "four"}, cluster="mi300x")
    assert err.value.problems[0].path == "$NNODES"


def test_the_launched_module_is_the_one_loaded(write):
    """primus-cli train posttrain runs post_trainer; an SFT experiment has only post_trainer and Primus falls
    back to it for pretrain too (core/config/primus_config.py get_module_config)."""
    arch = {k: v for k, v in BASE.items() if k not in ("micro_batch_size",)}
    write("models/m.yaml", arch)
    both = write("both.yaml", {"modules": {
        "pre_trainer": {"framework": "megatron", "model": "m.yaml", "overrides": {"micro_batch_size": 1}},
        "post_trainer": {"framework": "megatron", "model": "m.yaml", "overrides": {"micro_batch_size": 2}}}})
    assert load_recipe(both).execution.micro_batch_size == 1
    post = load_recipe(both, module="post_trainer")
    assert post.execution.micro_batch_size == 2 and post.module == "post_trainer"
    sft = write("sft.yaml", {"modules": {
        "post_trainer": {"framework": "megatron", "model": "m.yaml", "overrides": {"micro_batch_size": 2}}}})
    assert load_recipe(sft, module="pre_trainer").module == "post_trainer"
