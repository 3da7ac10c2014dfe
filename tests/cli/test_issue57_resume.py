"""Issue 57, part 6: a resumed journal is evidence to re-check, not to trust.

A forged line (TP 7, illegal for 32 heads, at 1e12 tok/s/GPU) was reported as the best in ``--json`` with exit 0;
``{"header": 1}``, ``ep: 0`` and non-numeric values gave tracebacks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from primus_ext.cli import main
from primus_ext.tune.axes import EP, MBS, PP, TP

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "llama3.1_8B-pretrain.yaml"
ARGS = ["--cluster", "h100", "--nodes", "1", "--no-regret"]


@pytest.fixture
def logged(tmp_path: Path) -> tuple[Path, Path, dict]:
    """A recipe, the log of a short search of it, and one projected trial line of that log."""
    recipe = tmp_path / "recipe.yaml"
    shutil.copy(RECIPE, recipe)
    log = tmp_path / "trials.jsonl"
    assert main(["tune", str(recipe), *ARGS, "--budget", "4", "--log", str(log)]) == 0
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    projected = next(item for item in lines if item.get("trial", {}).get("status") == "projected")
    return recipe, log, projected


def _forge(log: Path, line: dict, config: dict, tokens: float = 1e12) -> None:
    trial = json.loads(json.dumps(line["trial"]))
    trial["config"].update(config)
    trial["score"]["tokens_per_s_per_gpu"] = tokens
    with log.open("a") as fh:
        fh.write(json.dumps({"trial": trial}) + "\n")


def test_a_forged_illegal_trial_is_never_reported(logged, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    recipe, log, line = logged
    _forge(log, line, {TP: 7})
    out = tmp_path / "out.json"
    assert main(["tune", str(recipe), *ARGS, "--budget", "6", "--resume", str(log), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    best = doc["best"]
    assert best["config"][TP] != 7 and best["tokens_per_s_per_gpu"] < 1e9
    assert doc["ranked"] and all(row["config"].get(TP) != 7 for row in doc["ranked"])


def test_a_forged_figure_of_a_legal_trial_is_projected_again(logged, tmp_path: Path):
    recipe, log, line = logged
    _forge(log, line, {MBS: 1})  # a legal configuration (maybe already logged), a figure no GPU reaches
    out = tmp_path / "out.json"
    assert main(["tune", str(recipe), *ARGS, "--budget", "6", "--resume", str(log), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["best"]["tokens_per_s_per_gpu"] < 1e9
    assert all(row["tokens_per_s_per_gpu"] is None or row["tokens_per_s_per_gpu"] < 1e9 for row in doc["ranked"])


@pytest.mark.parametrize("text", [
    '{"header": 1}',
    '{"trial": {"config": "tp=7", "status": "projected"}}',
    '{"trial": {"config": {"tp": [1, 2]}, "status": "projected"}}',
    '[1, 2]',
])
def test_malformed_lines_are_refused_with_their_line(logged, text: str, capsys: pytest.CaptureFixture[str]):
    recipe, log, _ = logged
    with log.open("a") as fh:
        fh.write(text + "\n")
    capsys.readouterr()
    assert main(["tune", str(recipe), *ARGS, "--budget", "6", "--resume", str(log)]) == 2
    err = capsys.readouterr().err
    assert "unreadable trial line" in err and "Traceback" not in err


@pytest.mark.parametrize("config", [{EP: 0}, {TP: "eight"}, {MBS: 1.5}, {PP: None}, {"nope": 1}])
def test_out_of_space_values_are_judged_not_trusted(logged, tmp_path: Path, config: dict):
    recipe, log, line = logged
    _forge(log, line, config)
    out = tmp_path / "out.json"
    assert main(["tune", str(recipe), *ARGS, "--budget", "6", "--resume", str(log), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["best"]["tokens_per_s_per_gpu"] < 1e9
    assert all(row["tokens_per_s_per_gpu"] is None or row["tokens_per_s_per_gpu"] < 1e9 for row in doc["ranked"])
