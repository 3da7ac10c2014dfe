"""extends: chains, the current file wins, paths relative to the file, missing targets, cycles."""

from __future__ import annotations

import pytest
from recipe_data import BASE

from primus_ext.errors import RecipeError
from primus_ext.recipe import load_recipe


def test_chain_relative_paths_and_current_file_wins(write):
    write("presets/deep/base.yaml", {"num_layers": 4, "hidden_size": 512, "vocab_size": 1000, "swiglu": True})
    write("presets/mid.yaml", {"extends": ["deep/base.yaml"], "num_layers": 6, "num_attention_heads": 8})
    path = write("exp/flat.yaml", {"extends": ["../presets/mid.yaml"], "num_layers": 8, "seq_length": 256,
                                   "global_batch_size": 8})
    recipe = load_recipe(path)
    assert recipe.model.num_layers == 8  # current file wins over mid (6) and base (4)
    assert recipe.model.hidden_size == 512  # from the grand-parent
    assert recipe.model.num_attention_heads == 8  # from the parent
    assert recipe.origins["hidden_size"].endswith("deep/base.yaml:hidden_size")


def test_later_extends_entry_wins_over_earlier(write):
    write("a.yaml", {"num_layers": 2, "hidden_size": 256})
    write("b.yaml", {"num_layers": 4})
    path = write("r.yaml", {"extends": ["a.yaml", "b.yaml"], "num_attention_heads": 4, "vocab_size": 100,
                            "seq_length": 128, "global_batch_size": 8})
    recipe = load_recipe(path)
    assert (recipe.model.num_layers, recipe.model.hidden_size) == (4, 256)


def test_missing_extends_target_is_a_named_warning(write):
    path = write("r.yaml", {"extends": ["../module_base.yaml"], **BASE})
    recipe = load_recipe(path)
    assert any("module_base.yaml" in w and "not found" in w for w in recipe.warnings)


def test_extends_cycle_is_a_problem(write):
    write("a.yaml", {"extends": ["b.yaml"], "num_layers": 2})
    write("b.yaml", {"extends": ["a.yaml"], "hidden_size": 2})
    with pytest.raises(RecipeError) as err:
        load_recipe(write("r.yaml", {"extends": ["a.yaml"]}))
    assert any("cycle" in p.message for p in err.value.problems)


def test_primus_experiment_presets_from_experiment_folder(write):
    write("models/tiny_base.yaml", {"swiglu": True, "normalization": "RMSNorm", "vocab_size": 1000})
    write("models/tiny.yaml", {"extends": ["tiny_base.yaml"], "num_layers": 4, "hidden_size": 256,
                               "num_attention_heads": 4})
    write("modules/trainer.yaml", {"seq_length": 512, "micro_batch_size": 1, "global_batch_size": 8})
    path = write("exp.yaml", {"exp_name": "t", "modules": {"pre_trainer": {
        "framework": "megatron", "config": "trainer.yaml", "model": "tiny.yaml", "overrides": {}}}})
    recipe = load_recipe(path)
    assert recipe.model.name == "tiny" and recipe.model.normalization == "RMSNorm"
    assert recipe.execution.seq_length == 512
    assert recipe.exp_name == "t"


def test_missing_model_file_lists_searched_paths(write, tmp_path):
    path = write("exp.yaml", {"modules": {"pre_trainer": {"framework": "megatron", "model": "nope.yaml"}}})
    with pytest.raises(RecipeError) as err:
        load_recipe(path, config_roots=[tmp_path / "primus"])
    (problem,) = err.value.problems
    assert problem.path == "modules.pre_trainer.model"
    assert "searched" in problem.message
    assert str(tmp_path / "primus" / "primus" / "configs" / "models" / "megatron" / "nope.yaml") in problem.message


def test_config_root_finds_primus_layout(write, tmp_path):
    root = tmp_path / "checkout"
    write("checkout/primus/configs/models/megatron/m.yaml", {k: v for k, v in BASE.items() if k != "micro_batch_size"})
    write("checkout/primus/configs/modules/megatron/pre_trainer.yaml",
          {"extends": ["../module_base.yaml"], "micro_batch_size": 2})
    path = write("elsewhere/exp.yaml", {"modules": {"pre_trainer": {
        "framework": "megatron", "config": "pre_trainer.yaml", "model": "m.yaml"}}})
    recipe = load_recipe(path, config_roots=[root])
    assert recipe.execution.micro_batch_size == 2
    assert any("module_base.yaml" in w for w in recipe.warnings)


def test_structure_problems_are_listed_together(write):
    path = write("exp.yaml", {"exp_name": "${UNSET_VAR}", "primus_ext": {"cluster": "nope"},
                              "modules": {"pre_trainer": {"framework": "torchtitan", "model": "missing.yaml"}}})
    with pytest.raises(RecipeError) as err:
        load_recipe(path, env={})
    paths = [p.path for p in err.value.problems]
    assert paths[0].endswith("exp.yaml:exp_name")
    assert {"modules.pre_trainer.framework", "modules.pre_trainer.model", "primus_ext.cluster"} <= set(paths)


def test_repeated_parents_are_read_once(write, monkeypatch):
    # issue 47: two files each listing their parent 300 times loaded 90 000 files
    from primus_ext.recipe import presets

    write("c.yaml", {"num_layers": 2})
    write("b.yaml", {"extends": ["c.yaml"] * 300, "hidden_size": 256})
    path = write("r.yaml", {"extends": ["b.yaml"] * 300, "num_attention_heads": 4, "vocab_size": 100,
                            "seq_length": 128, "global_batch_size": 8})
    reads: list[str] = []
    real = presets.read_yaml
    monkeypatch.setattr(presets, "read_yaml", lambda p, *a, **k: reads.append(p.name) or real(p, *a, **k))
    recipe = load_recipe(path)
    assert (recipe.model.num_layers, recipe.model.hidden_size) == (2, 256)
    assert sorted(reads) == ["b.yaml", "c.yaml", "r.yaml"]


def test_a_repeated_parent_merges_at_its_last_place(write):
    write("a.yaml", {"num_layers": 2})
    write("b.yaml", {"num_layers": 4})
    path = write("r.yaml", {"extends": ["a.yaml", "b.yaml", "a.yaml"], "hidden_size": 256, "num_attention_heads": 4,
                            "vocab_size": 100, "seq_length": 128, "global_batch_size": 8})
    assert load_recipe(path).model.num_layers == 2  # a, then b, then a again: a wins


def test_symlink_loops_and_deep_chains_are_bounded(write, tmp_path):
    (tmp_path / "loop.yaml").symlink_to("loop.yaml")
    path = write("r.yaml", {"extends": ["loop.yaml"], **BASE})
    recipe = load_recipe(path)  # was RuntimeError: Symlink loop
    assert any("loop.yaml" in w and "leads nowhere" in w for w in recipe.warnings)
    for i in range(60):
        write(f"d{i}.yaml", {"extends": [f"d{i + 1}.yaml"], "num_layers": 2})
    write("d60.yaml", {"num_layers": 2})
    deep = write("deep.yaml", {"extends": ["d0.yaml"], **BASE})
    with pytest.raises(RecipeError, match="levels"):
        load_recipe(deep)
