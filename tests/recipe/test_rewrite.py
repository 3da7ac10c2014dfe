"""Recipe rewrite: comments, order and templates kept, minimal edits, idempotent, atomic, semantic round trip."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from primus_ext.recipe import load_recipe
from primus_ext.recipe.rewrite import apply_changes, execution_changes, rewrite
from primus_ext.tune.legality import problems_of
from primus_ext.tune.space import AXIS_ORDER, build_space

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.fixture
def recipes(tmp_path):
    shutil.copytree(RECIPES, tmp_path / "recipes")
    return tmp_path / "recipes"


def _changed_lines(diff: str) -> list[str]:
    return [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def test_comments_order_and_untouched_keys_are_kept(recipes):
    path = recipes / "mixtral_8x22B-pretrain.yaml"
    original = path.read_text()
    result = rewrite(path, {"micro_batch_size": 2, "tensor_model_parallel_size": 2, "sequence_parallel": True})
    text = path.read_text()
    assert [ln for ln in original.splitlines() if ln.lstrip().startswith("#")] == \
        [ln for ln in text.splitlines() if ln.lstrip().startswith("#")]
    assert "work_group: ${PRIMUS_TEAM:amd}" in text
    changed = _changed_lines(result.diff)
    assert sorted(changed) == sorted(["-      micro_batch_size: 1", "+      micro_batch_size: 2",
                                      "-      tensor_model_parallel_size: 1", "+      tensor_model_parallel_size: 2",
                                      "+      sequence_parallel: true"])
    assert Path(result.backup).read_text() == original
    def keys(t: str) -> list[str]:
        return [ln.split(":")[0].strip() for ln in t.splitlines() if ":" in ln and not ln.lstrip().startswith("#")]

    old_keys = keys(original)
    assert keys(text)[: len(old_keys)] == old_keys  # new keys are appended, old order unchanged


def test_idempotent(recipes):
    path = recipes / "deepseek_v3-pretrain.yaml"
    changes = {"pipeline_model_parallel_size": 16, "pipeline_model_parallel_layout": None, "recompute_modules": None,
               "recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    first = rewrite(path, changes)
    once = path.read_text()
    second = rewrite(path, changes)
    assert first.changed and not second.changed and second.diff == "" and second.backup is None
    assert path.read_text() == once


def test_templates_keep_their_variable(tmp_path):
    text = "# flat Megatron recipe\nnum_layers: 4\nmicro_batch_size: ${MBS:2}  # per GPU\nlr: ${LR:1e-4}\n"
    new, changed = apply_changes(text, {"micro_batch_size": 4, "tensor_model_parallel_size": 2})
    assert changed == {"micro_batch_size": 4, "tensor_model_parallel_size": 2}
    assert "micro_batch_size: ${MBS:4}  # per GPU" in new and "lr: ${LR:1e-4}" in new
    assert new.endswith("tensor_model_parallel_size: 2\n") and "# flat Megatron recipe" in new
    assert apply_changes(new, {"micro_batch_size": 4}) == (new, {})          # same default: no change
    assert apply_changes(text, {"micro_batch_size": 2}) == (text, {})


def test_interrupted_write_leaves_the_original_intact(recipes, monkeypatch):
    path = recipes / "mixtral_8x22B-pretrain.yaml"
    original = path.read_bytes()

    def crash(*_args, **_kwargs):
        raise KeyboardInterrupt  # the process dies between the temp write and the rename

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        rewrite(path, {"micro_batch_size": 2})
    assert path.read_bytes() == original
    assert sorted(p.name for p in recipes.iterdir() if p.name.startswith(".")) == []  # temp file removed
    monkeypatch.undo()
    monkeypatch.setattr(os, "fsync", crash)  # ... or during the write itself
    with pytest.raises(KeyboardInterrupt):
        rewrite(path, {"micro_batch_size": 2}, out=path)
    assert path.read_bytes() == original


@pytest.mark.parametrize(("name", "cluster", "nodes"), [("mixtral_8x22B-pretrain.yaml", "mi355x", 4),
                                                        ("deepseek_v3-pretrain.yaml", "h100", 128)])
def test_rewritten_recipe_loads_as_the_tuned_configuration(recipes, name, cluster, nodes):
    path = recipes / name
    recipe = load_recipe(path, cluster=cluster, nodes=nodes, validate=False)
    space = build_space(recipe.model, recipe.execution, recipe.system)
    rng = random.Random(5)
    done = 0
    while done < 6:
        config = {}
        for axis in AXIS_ORDER:
            config[axis] = rng.choice(space.domain(axis, config))
        if problems_of(space, config):
            continue
        tuned = space.to_execution(config)
        out = recipes / f"tuned-{done}.yaml"
        rewrite(path, execution_changes(recipe, tuned), out=out, cluster={"cluster": cluster, "nodes": nodes})
        assert load_recipe(out).execution == tuned, config  # cluster block updated: no flags needed
        assert not rewrite(out, execution_changes(load_recipe(out), tuned)).changed
        done += 1
