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


def test_a_tuned_template_is_fixed_with_a_comment_and_untouched_ones_stay(tmp_path):
    text = "# flat Megatron recipe\nnum_layers: 4\nmicro_batch_size: ${MBS:2}  # per GPU\nlr: ${LR:1e-4}\n"
    new, changed = apply_changes(text, {"micro_batch_size": 4, "tensor_model_parallel_size": 2})
    assert changed == {"micro_batch_size": 4, "tensor_model_parallel_size": 2}
    line = next(x for x in new.splitlines() if x.startswith("micro_batch_size:"))
    assert line.startswith("micro_batch_size: 4  # primus-ext tune: fixed (was $MBS, default 2)")
    assert "# per GPU" in line
    assert "lr: ${LR:1e-4}" in new and "# flat Megatron recipe" in new  # untouched template and comments
    assert new.endswith("tensor_model_parallel_size: 2\n")
    assert apply_changes(new, {"micro_batch_size": 4}) == (new, {})          # applied twice: no change
    assert apply_changes(text, {"micro_batch_size": 2}) == (text, {})        # the template's default already


def test_an_exported_variable_cannot_break_the_keys_tuned_with_it(tmp_path, monkeypatch):
    """``--pin tp=2`` on a ``${PRIMUS_TP:1}`` recipe used to write ``${PRIMUS_TP:2}`` beside literal
    sequence_parallel / tp_comm_overlap: PRIMUS_TP=1 then gave TP overlap without TP (Megatron refuses)."""
    text = ("num_layers: 4\nhidden_size: 256\nnum_attention_heads: 8\nseq_length: 512\n"
            "max_position_embeddings: 512\ntensor_model_parallel_size: ${PRIMUS_TP:1}\n")
    new, _ = apply_changes(text, {"tensor_model_parallel_size": 2, "sequence_parallel": True,
                                  "tp_comm_overlap": True})
    path = tmp_path / "tuned.yaml"
    path.write_text(new)
    monkeypatch.setenv("PRIMUS_TP", "1")
    from primus_ext.recipe import load_recipe

    recipe = load_recipe(path, cluster="mi300x", nodes=1)
    assert recipe.execution.tp == 2 and recipe.execution.tp_comm_overlap


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


def test_every_key_the_tuner_may_write_is_a_megatron_or_primus_argument():
    """Primus's schema check refuses unknown keys: nothing the rewrite writes may be one (issue 36)."""
    from primus_ext.recipe.catalogue import known_keys
    from primus_ext.recipe.rewrite import megatron_args
    from primus_ext.specs import ExecutionSpec

    written = set(megatron_args(ExecutionSpec(), {"recompute_activations": True, "use_custom_fsdp": True}, 8))
    assert written and written <= set(known_keys()), sorted(written - set(known_keys()))
