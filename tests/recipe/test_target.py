"""No silent target GPU (issue 43.3): the one rule of ``recipe.target.resolve_target`` for every command and the
launcher, and where the target came from in the output.

    python -m pytest -q tests/recipe/test_target.py
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest
from tiny import tiny_recipe

from primus_ext.cli import main
from primus_ext.errors import RecipeError
from primus_ext.hardware import visible
from primus_ext.recipe import load_recipe
from primus_ext.recipe.target import CLUSTER_ENV, folder_target

PRIMUS = Path("/work/shared/primus_configs")
MI300X_RECIPE = PRIMUS / "examples" / "megatron" / "configs" / "MI300X" / "llama3.1_8B-BF16-pretrain.yaml"
H100 = ("NVIDIA H100 80GB HBM3",) * 8


@pytest.fixture
def unstated(monkeypatch, tmp_path: Path) -> Path:
    """A flat recipe stating no target, no $PRIMUS_EXT_CLUSTER, no GPU on this machine."""
    monkeypatch.delenv(CLUSTER_ENV, raising=False)
    monkeypatch.setattr(visible, "visible_gpus", lambda: ())
    path = tmp_path / "flat.yaml"
    path.write_text(tiny_recipe(micro_batch_size=1, global_batch_size=64))
    return path


def test_nothing_stating_the_target_exits_2_naming_cluster_and_the_profiles(unstated, capsys):
    with pytest.raises(RecipeError) as err:
        load_recipe(unstated)
    [problem] = err.value.problems
    assert problem.path == "--cluster" and "mi355x" in problem.fix and "h100" in problem.fix
    for command in (["project", str(unstated)], ["tune", str(unstated), "--budget", "2"],
                    ["compare", str(unstated), "micro_batch_size=2"], ["calibrate", str(unstated), str(unstated)],
                    ["train", "--config", str(unstated), "--projection-only", "--analytic"]):
        assert main(command) == 2, command
        err_text = capsys.readouterr().err
        assert "no target GPU" in err_text and "--cluster" in err_text and "Traceback" not in err_text


def test_the_order_of_the_rule(unstated, monkeypatch, capsys):
    text = unstated.read_text()
    monkeypatch.setattr(visible, "visible_gpus", lambda: H100)
    recipe = load_recipe(unstated)
    assert recipe.system.name == "h100" and "this machine's GPUs (8 x NVIDIA H100 80GB HBM3)" in recipe.target.source
    monkeypatch.setenv(CLUSTER_ENV, "b200")
    assert load_recipe(unstated).target.source == f"${CLUSTER_ENV}"
    unstated.write_text("# primus-ext: {cluster: gb200, nodes: 2}\n" + text)
    recipe = load_recipe(unstated)
    assert recipe.system.name == "gb200" and "# primus-ext" in recipe.target.source
    recipe = load_recipe(unstated, cluster="mi325x")
    assert recipe.system.name == "mi325x" and recipe.target.source == "--cluster"
    assert main(["project", str(unstated)]) == 0
    assert "target: 2 nodes x 4 gb200 (from the recipe's # primus-ext: target; --cluster to change)" in (
        capsys.readouterr().out)


def test_gpus_of_several_kinds_or_of_no_profile_are_named(unstated, monkeypatch):
    monkeypatch.setattr(visible, "visible_gpus", lambda: ("NVIDIA H100 80GB HBM3", "NVIDIA H200"))
    with pytest.raises(RecipeError, match="several kinds"):
        load_recipe(unstated)
    monkeypatch.setattr(visible, "visible_gpus", lambda: ("NVIDIA A10G",))
    with pytest.raises(RecipeError, match="name no hardware profile"):
        load_recipe(unstated)


def test_a_primus_recipe_folder_names_its_gpu(tmp_path: Path):
    for folder, profile in (("MI300X", "mi300x"), ("MI325X", "mi325x"), ("MI355X", "mi355x"), ("MI355", "mi355x")):
        path = tmp_path / "examples" / "megatron" / "configs" / folder / "diffusion" / "x.yaml"
        found = folder_target(path)
        assert found is not None and found.cluster == profile and f"configs/{folder}" in found.source
    assert folder_target(tmp_path / "primus" / "configs" / "models" / "x.yaml") is None
    assert folder_target(tmp_path / "h100" / "x.yaml") is None  # a GPU-named folder outside configs/ states nothing


@pytest.mark.skipif(not MI300X_RECIPE.is_file(), reason="shared/primus_configs absent")
def test_an_mi355x_example_inside_a_primus_checkout_projects_on_mi355x(unstated, tmp_path: Path, capsys):
    """Issue 43's case: a Primus MI355X example, no --cluster, no comment: MI355X memory, not MI300X's."""
    checkout = tmp_path / "Primus"
    shutil.copytree(PRIMUS / "primus", checkout / "primus")
    mi355x = checkout / "examples" / "megatron" / "configs" / "MI355X"
    mi355x.mkdir(parents=True)
    recipe = mi355x / MI300X_RECIPE.name
    shutil.copy(MI300X_RECIPE, recipe)
    loaded = load_recipe(recipe)
    assert loaded.system.name == "mi355x" and loaded.system.gpu.hbm_bytes > 250e9  # 288 GB, not 192
    assert main(["project", str(recipe), "--analytic"]) == 0
    assert "(from the recipe's folder configs/MI355X; --cluster to change)" in capsys.readouterr().out


def test_the_launcher_gate_follows_the_rule(monkeypatch):
    from primus_ext.launcher.hook import add_projection_args, recipe_from_megatron_args

    monkeypatch.setattr(visible, "visible_gpus", lambda: ())
    parser = add_projection_args(argparse.ArgumentParser())
    args = parser.parse_args(["--projection-only"])
    for key, value in {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "seq_length": 128,
                       "max_position_embeddings": 128, "micro_batch_size": 1, "global_batch_size": 8,
                       "vocab_size": 1024}.items():
        setattr(args, key, value)
    with pytest.raises(RecipeError) as err:
        recipe_from_megatron_args(args, env={})
    assert err.value.problems[0].path == "--projection-cluster" and "--projection-cluster" in err.value.problems[0].fix
    monkeypatch.setattr(visible, "visible_gpus", lambda: ("AMD Instinct MI300X",) * 8)
    recipe = recipe_from_megatron_args(args, env={})  # the launcher runs where the GPUs are
    assert recipe.system.name == "mi300x" and "this machine's GPUs" in recipe.target.source
    assert recipe_from_megatron_args(args, env={CLUSTER_ENV: "h200"}).system.name == "h200"
