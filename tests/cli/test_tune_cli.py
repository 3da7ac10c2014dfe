"""``primus-ext tune`` end to end on a shipped recipe (real memory model and projection, small pinned space)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from primus_ext.cli import main
from primus_ext.recipe import load_recipe

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
PINS = ["--pin", "tp=1,2", "--pin", "pp=2,4", "--pin", "cp=1", "--pin", "ep=4,8", "--pin", "mbs=1,2"]


@pytest.fixture
def recipe(tmp_path):
    shutil.copytree(RECIPES, tmp_path / "recipes")
    return tmp_path / "recipes" / "mixtral_8x22B-pretrain.yaml"


def test_tune_writes_json_log_and_a_tuned_copy(recipe, tmp_path, capsys):
    out, doc, log = tmp_path / "recipes" / "tuned.yaml", tmp_path / "result.json", tmp_path / "trials.jsonl"
    argv = ["tune", str(recipe), "--cluster", "mi355x", "--nodes", "8", "--strategy", "tpe", "--budget", "15",
            *PINS, "--out", str(out), "--json", str(doc), "--log", str(log), "--analytic"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "best:" in printed and "sensitivity" in printed and "regret vs exhaustive" in printed
    data = json.loads(doc.read_text())
    assert {"best", "baseline", "gain", "regret", "ranked", "pareto", "sensitivity", "stats", "notes"} <= set(data)
    assert data["stats"]["projected"] <= 15 and data["regret"] is not None and data["regret"] >= 0
    tuned = load_recipe(out)
    assert tuned.execution.tp == data["best"]["config"]["tp"] and tuned.execution.ep == data["best"]["config"]["ep"]
    assert tuned.execution.micro_batch_size == data["best"]["config"]["mbs"]
    lines = log.read_text().splitlines()
    assert "header" in json.loads(lines[0]) and len(lines) > 15
    # resuming with a larger budget continues from the log
    assert main([*argv[:8], "--budget", "20", *PINS, "--resume", str(log), "--no-regret", "--analytic"]) == 0
    assert len(log.read_text().splitlines()) > len(lines)


def test_apply_is_idempotent_and_bad_pins_exit_2(recipe, capsys):
    argv = ["tune", str(recipe), "--cluster", "mi355x", "--nodes", "8", "--strategy", "exhaustive", *PINS,
            "--apply", "--analytic"]
    assert main(argv) == 0
    first = recipe.read_text()
    assert Path(str(recipe) + ".bak").exists()
    assert main(argv) == 0
    assert recipe.read_text() == first and "nothing to write" in capsys.readouterr().out
    assert main(["tune", str(recipe), "--pin", "tensor_parallel=2"]) == 2
    assert "--pin" in capsys.readouterr().err
