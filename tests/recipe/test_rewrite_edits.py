"""Recipe rewrite, line by line: untouched bytes kept, keys set in presets or parents overridden, safe targets."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from primus_ext.errors import RecipeError
from primus_ext.recipe import load_recipe
from primus_ext.recipe.rewrite import apply_changes, rewrite
from primus_ext.recipe.yaml_edit import comment_start, edit_text, render

FLAT = """\
num_layers: 4
hidden_size: 256
num_attention_heads: 8
vocab_size: 1000
seq_length: 128
global_batch_size: 96
"""


def _experiment(folder: Path, overrides: str = "      micro_batch_size: 1\n") -> Path:
    (folder / "modules").mkdir(exist_ok=True)
    (folder / "modules" / "trainer.yaml").write_text("use_distributed_optimizer: true\nsequence_parallel: true\n")
    (folder / "models").mkdir(exist_ok=True)
    (folder / "models" / "tiny.yaml").write_text(FLAT)
    path = folder / "exp.yaml"
    path.write_text("exp_name: tiny\nmodules:\n  pre_trainer:\n    framework: megatron\n    config: trainer.yaml\n"
                    f"    model: tiny.yaml\n    overrides:\n{overrides}")
    return path


def test_untouched_lines_keep_every_byte():
    text = ("---\r\n# head\r\nmodules:\r\n    pre_trainer:\r\n        framework: megatron\r\n"
            "        overrides:\r\n            load: ~\r\n            micro_batch_size: 1   # per GPU\r\n"
            "            recompute_modules:\r\n            - core_attn\r\n            save: ~\r\n"
            "list:\r\n- a\r\n- b\r\n# tail comment\r\n")
    new, changed = apply_changes(text, {"micro_batch_size": 2, "recompute_modules": ["mlp"], "sequence_parallel": True})
    assert changed == {"micro_batch_size": 2, "recompute_modules": ["mlp"], "sequence_parallel": True}
    assert new == text.replace("micro_batch_size: 1   # per GPU", "micro_batch_size: 2   # per GPU").replace(
        "recompute_modules:\r\n            - core_attn", "recompute_modules: [mlp]").replace(
        "save: ~\r\n", "save: ~\r\n            sequence_parallel: true\r\n")


def test_absent_false_and_null_values_are_written():
    """A preset may set what the tuned run turns off: absent from the file is not the same as unset."""
    new, changed = apply_changes(FLAT, {"use_distributed_optimizer": False, "pipeline_model_parallel_layout": None})
    assert changed and new == FLAT + "use_distributed_optimizer: false\npipeline_model_parallel_layout: null\n"


def test_flag_from_a_preset_is_switched_off(tmp_path):
    path = _experiment(tmp_path)
    assert load_recipe(path).execution.use_distributed_optimizer
    rewrite(path, {"use_distributed_optimizer": False, "micro_batch_size": 2})
    reloaded = load_recipe(path)
    assert not reloaded.execution.use_distributed_optimizer and reloaded.execution.micro_batch_size == 2


def test_modules_of_an_extends_parent_get_the_overrides(tmp_path):
    parent = _experiment(tmp_path)
    child = tmp_path / "child.yaml"
    child.write_text(f"extends: [{parent.name}]\nexp_name: child  # mine\n")
    recipe = load_recipe(child)
    assert recipe.module == "pre_trainer"
    result = rewrite(child, {"micro_batch_size": 4}, module=recipe.module)
    assert child.read_text() == ("extends: [exp.yaml]\nexp_name: child  # mine\n"
                                 "modules:\n  pre_trainer:\n    overrides:\n      micro_batch_size: 4\n")
    assert result.changed == {"micro_batch_size": 4}
    assert load_recipe(child).execution.micro_batch_size == 4 and load_recipe(parent).execution.micro_batch_size == 1


@pytest.mark.parametrize("overrides", ["    overrides:\n", "    overrides: ~  # none yet\n", "    overrides: {}\n"])
def test_empty_overrides_block_is_filled(tmp_path, overrides):
    path = _experiment(tmp_path, overrides="")
    path.write_text(path.read_text().replace("    overrides:\n", overrides))
    rewrite(path, {"micro_batch_size": 3})
    text = path.read_text()
    assert "      micro_batch_size: 3\n" in text and ("# none yet" in text) == ("# none yet" in overrides)
    assert load_recipe(path).execution.micro_batch_size == 3


def test_flow_mapping_falls_back_to_a_dump():
    text = "modules: {pre_trainer: {overrides: {micro_batch_size: 1}}}\n"
    assert edit_text(text, [(("modules", "pre_trainer", "overrides"), "micro_batch_size", "2")]) is None
    new, _ = apply_changes(text, {"micro_batch_size": 2})
    assert "micro_batch_size: 2" in new


def test_duplicate_keys_are_refused_with_a_reason():
    with pytest.raises(RecipeError, match="duplicate key"):
        apply_changes(FLAT + "num_layers: 8\n", {"micro_batch_size": 2})


def test_loader_warns_about_duplicate_keys(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(FLAT + "num_layers: 2\n")
    recipe = load_recipe(path)
    assert recipe.model.num_layers == 2  # PyYAML's (and Primus's) reading: the last one
    assert any("duplicate key `num_layers` (line 7)" in w for w in recipe.warnings)


def test_symlinked_recipe_is_written_through_the_link(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text(FLAT)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    rewrite(link, {"micro_batch_size": 2})
    assert link.is_symlink() and "micro_batch_size: 2" in real.read_text()


def test_new_copy_takes_the_recipe_permissions(tmp_path):
    source = tmp_path / "r.yaml"
    source.write_text(FLAT)
    source.chmod(0o640)
    rewrite(source, {"micro_batch_size": 2}, out=tmp_path / "t.yaml")
    assert stat.S_IMODE(os.stat(tmp_path / "t.yaml").st_mode) == 0o640


@pytest.mark.parametrize("out", ["missing/t.yaml", "."])
def test_unwritable_targets_are_recipe_errors(tmp_path, out):
    source = tmp_path / "r.yaml"
    source.write_text(FLAT)
    with pytest.raises(RecipeError):
        rewrite(source, {"micro_batch_size": 2}, out=tmp_path / out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"]


def test_render_and_comment_start():
    assert [render(v) for v in (2, True, None, "full", ["core_attn", "mlp"], "a: b")] == \
        ["2", "true", "null", "full", "[core_attn, mlp]", "'a: b'"]
    assert comment_start("a: 'x # y'  # z") == 12 and comment_start("a: b#c") == 6 and comment_start("# c") == 0


def test_inserts_at_one_line_keep_each_key_in_its_block():
    """A child recipe ending in its primus_ext block: the cluster key goes into that block, the new modules
    block after it, whichever is edited first."""
    text = "extends: [exp.yaml]\nprimus_ext:\n  cluster: mi300x\n"
    want = text + "  nodes: 4\nmodules:\n  pre_trainer:\n    overrides:\n      micro_batch_size: 2\n"
    cluster = (("primus_ext",), "nodes", "4")
    overrides = (("modules", "pre_trainer", "overrides"), "micro_batch_size", "2")
    assert edit_text(text, [cluster, overrides]) == want and edit_text(text, [overrides, cluster]) == want


def test_dump_fallback_keeps_crlf():
    text = "modules:\r\n  pre_trainer:\r\n    overrides: {micro_batch_size: 1}  # keep\r\n"
    new, _ = apply_changes(text, {"micro_batch_size": 2})
    assert new == text.replace("micro_batch_size: 1", "micro_batch_size: 2")
