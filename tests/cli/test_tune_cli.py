"""``primus-ext tune`` end to end on a shipped recipe (real memory model and projection, small pinned space)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from primus_ext.cli import main
from primus_ext.recipe import load_recipe
from primus_ext.tune.axes import CP, DP_OVERLAP, EP, EP_OVERLAP, ETP, MBS, PP, RECOMPUTE, SHARDING, TP, TP_OVERLAP, VPP

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
PINS = ["--pin", "tp=1,2", "--pin", "pp=2,4", "--pin", "cp=1", "--pin", "ep=4,8", "--pin", "mbs=1,2"]


@pytest.fixture
def recipe(tmp_path):
    shutil.copytree(RECIPES, tmp_path / "recipes")
    return tmp_path / "recipes" / "mixtral_8x22B-pretrain.yaml"


def test_tune_writes_json_log_and_a_tuned_copy(recipe, tmp_path, capsys):
    pytest.importorskip("optuna")
    out, doc, log = tmp_path / "recipes" / "tuned.yaml", tmp_path / "result.json", tmp_path / "trials.jsonl"
    argv = ["tune", str(recipe), "--cluster", "mi355x", "--nodes", "8", "--strategy", "tpe", "--budget", "10",
            *PINS, "--out", str(out), "--json", str(doc), "--log", str(log), "--analytic"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "best:" in printed and "sensitivity" in printed and "regret vs exhaustive" in printed
    data = json.loads(doc.read_text())
    assert {"best", "baseline", "gain", "regret", "ranked", "pareto", "sensitivity", "stats", "notes"} <= set(data)
    assert data["stats"]["projected"] <= 10 and data["regret"] is not None and data["regret"] >= 0
    tuned = load_recipe(out)
    assert tuned.execution.tp == data["best"]["config"][TP] and tuned.execution.ep == data["best"]["config"][EP]
    assert tuned.execution.micro_batch_size == data["best"]["config"][MBS]
    lines = log.read_text().splitlines()
    assert "header" in json.loads(lines[0]) and len(lines) > 10
    # resuming with a larger budget continues from the log (10 of 20 spent: the search is not done)
    assert main([*argv[:8], "--budget", "20", *PINS, "--resume", str(log), "--no-regret", "--analytic"]) == 0
    assert len(log.read_text().splitlines()) > len(lines)


def test_apply_is_idempotent_and_bad_pins_exit_2(recipe, capsys):
    argv = ["tune", str(recipe), "--cluster", "mi355x", "--nodes", "8", "--strategy", "exhaustive", *PINS,
            "--pin", "pp=2", "--apply", "--analytic"]  # the recipe (PP 4) is no candidate: not kept on a tie
    assert main(argv) == 0
    first = recipe.read_text()
    assert Path(str(recipe) + ".bak").exists()
    assert main(argv) == 0
    assert recipe.read_text() == first and "nothing to write" in capsys.readouterr().out
    assert main(["tune", str(recipe), "--pin", "tensor_parallel=2"]) == 2
    assert "--pin" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic notes inside litellm
def test_llm_strategy_key_never_reaches_output_log_or_json(recipe, tmp_path, capsys, monkeypatch):
    pytest.importorskip("litellm")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "tune"))
    from tune_llm_server import FakeLLM, reply, status

    secret = "sk-cli-test-9f8e7d6c5b4a"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    good = {"rationale": f"cut the bubble; my key is {secret}",
            "configs": [{TP: 1, ETP: 1, PP: 2, VPP: 1, CP: 1, EP: 8, MBS: 1, RECOMPUTE: "full",
                         SHARDING: "distopt", TP_OVERLAP: False, EP_OVERLAP: False,
                         DP_OVERLAP: "grad+param"}]}
    doc, log = tmp_path / "llm.json", tmp_path / "llm.jsonl"
    with FakeLLM([reply(json.dumps(good)), status(401, f"Incorrect API key provided: {secret}")]) as server:
        code = main(["tune", str(recipe), "--cluster", "mi355x", "--nodes", "8", "--strategy", "llm",
                     "--llm", "openai/fake", "--llm-api-base", server.api_base, "--llm-timeout", "2",
                     "--budget", "6", *PINS, "--json", str(doc), "--log", str(log), "--no-regret", "--analytic"])
    assert code == 0
    captured = capsys.readouterr()
    everything = captured.out + captured.err + doc.read_text() + log.read_text()
    assert secret not in everything
    assert "[redacted]" in everything and "fell back to tpe" in everything
    assert any(json.loads(line).get("trial", {}).get("origin") == "llm" for line in log.read_text().splitlines())


@pytest.mark.parametrize("flag", ["--out", "--json", "--log"])
def test_unwritable_outputs_exit_2_before_the_search(recipe, tmp_path, capsys, flag):
    for bad in (tmp_path / "missing" / "x.yaml", tmp_path):
        code = main(["tune", str(recipe), "--cluster", "mi355x", "--nodes", "8", "--budget", "2", "--no-regret",
                     "--analytic", flag, str(bad)])
        assert code == 2 and flag in capsys.readouterr().err
    assert main(["tune", str(recipe), "--resume", str(tmp_path / "none.jsonl")]) == 2
    assert f"{tmp_path / 'none.jsonl'}: cannot read the log" in capsys.readouterr().err


def test_tuned_copy_elsewhere_is_checked_where_it_lands(tmp_path, capsys):
    """A copy in another folder loses the recipe's relative extends: refused, nothing written."""
    base = tmp_path / "recipes"
    shutil.copytree(RECIPES, base)
    child = base / "child.yaml"
    child.write_text("extends: [mixtral_8x22B-pretrain.yaml]\n")
    (tmp_path / "elsewhere").mkdir()
    out = tmp_path / "elsewhere" / "tuned.yaml"
    argv = ["tune", str(child), "--cluster", "mi355x", "--nodes", "8", "--strategy", "exhaustive", *PINS,
            "--analytic", "--no-regret", "--out"]
    assert main([*argv, str(out)]) == 2
    assert "recipe's folder" in capsys.readouterr().err and list((tmp_path / "elsewhere").iterdir()) == []
    assert main([*argv, str(base / "tuned.yaml")]) == 0  # beside it, the copy resolves (and is checked)
    assert load_recipe(base / "tuned.yaml").execution.micro_batch_size in (1, 2)
