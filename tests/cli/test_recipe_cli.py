"""``primus-ext recipe show``: table and --json for every shipped recipe; exit 2 without traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from primus_ext.cli import main
from primus_ext.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO / "recipes").glob("*-pretrain.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_show_table_and_json(path: Path, capsys):
    assert main(["recipe", "show", str(path)]) == 0
    table = capsys.readouterr().out
    recipe = load_recipe(path)
    for section in ("model\n-----", "execution\n---------", "system\n------"):
        assert section in table
    assert f"hidden_size                          {recipe.model.hidden_size}" in table
    assert f"world_size                      {recipe.system.world_size}" in table

    assert main(["recipe", "show", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["num_layers"] == recipe.model.num_layers
    assert data["execution"]["data_parallel_size"] == recipe.execution.dp
    assert data["system"]["world_size"] == recipe.system.world_size
    assert data["warnings"] == [] and data["problems"] == []


def test_overrides_cluster_and_nodes(capsys):
    path = REPO / "recipes" / "llama3.1_8B-pretrain.yaml"
    args = ["recipe", "show", str(path), "tensor_model_parallel_size=2", "--cluster", "h100", "--nodes", "2", "--json"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["execution"]["tensor_model_parallel_size"] == 2
    assert (data["system"]["name"], data["system"]["num_nodes"], data["execution"]["data_parallel_size"]) == (
        "h100", 2, 8)


def test_moe_pattern_is_printed_as_megatron_expression(capsys):
    assert main(["recipe", "show", str(REPO / "recipes" / "deepseek_v3-pretrain.yaml")]) == 0
    assert "[0]*3+[1]*58" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["recipe", "show", "does-not-exist.yaml"],
    ["recipe", "show", str(REPO / "recipes" / "llama3.1_8B-pretrain.yaml"), "tensor_model_parallel_size=3"],
    ["recipe", "show", str(REPO / "recipes" / "llama3.1_8B-pretrain.yaml"), "--cluster", "nope"],
])
def test_bad_input_exits_2_listing_problems(argv, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and "Traceback" not in captured.err
    assert "fix:" in captured.err


def test_typo_hint_and_every_problem_via_subprocess(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("num_layers: 9\nhidden_size: 1000\nnum_attention_heads: 16\nkv_channels: 64\nvocab_size: 10\n"
                   "seq_length: 100\npipeline_model_parallel_size: 2\nglobal_batch_size: 3\n"
                   "tensor_parallel_sise: 2\n")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    result = subprocess.run([sys.executable, "-m", "primus_ext", "recipe", "show", str(bad)],
                            capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "num_layers" in result.stderr and "global_batch_size" in result.stderr
    assert "did you mean tensor_model_parallel_size" in result.stderr


def test_config_root_reads_primus_examples(capsys):
    root = Path(os.environ.get("PRIMUS_CONFIG_ROOT", REPO.parent / "shared" / "primus_configs"))
    example = root / "examples/megatron/configs/MI300X/llama3.1_8B-BF16-pretrain.yaml"
    if not example.is_file():
        pytest.skip("Primus config mirror not found")
    assert main(["recipe", "show", str(example), "--config-root", str(root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # mock_data: Primus's patch trains with its NullTokenizer (131072 ids + end-of-document)
    assert data["model"]["name"] == "llama3.1_8B" and data["model"]["vocab_size"] == 131073
    assert data["preset_files"][-1].endswith("llama3.1_8B-BF16-pretrain.yaml")
    # the same recipe without --config-root: the checkout above it is found, its presets listed
    assert main(["recipe", "show", str(example)]) == 0
    text = capsys.readouterr().out
    assert "presets of the Primus checkout at" in text and "primus/configs/models/megatron/" in text


def test_overrides_may_follow_the_options(capsys):
    path = str(Path(__file__).resolve().parents[2] / "recipes" / "llama3.1_8B-pretrain.yaml")
    assert main(["recipe", "show", path, "--nodes", "2", "--json", "micro_batch_size=4"]) == 0
    assert json.loads(capsys.readouterr().out)["execution"]["micro_batch_size"] == 4
    with pytest.raises(SystemExit):
        main(["recipe", "show", path, "--nodes", "2", "--bogus"])
