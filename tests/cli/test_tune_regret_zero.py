"""``primus-ext tune`` by default (issue 53): exhaustive where the space enumerates in time, regret 0; a TPE run
still applies the exhaustive reference's optimum; ``--max-changes`` in the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from primus_ext.cli import main

ROOT = Path(__file__).resolve().parents[2]
PRIMUS_CASE = (ROOT.parent / "shared" / "primus_configs" / "examples" / "megatron" / "configs" / "MI300X"
               / "llama3.1_70B-FP8-pretrain.yaml")


def _tune(capsys, *argv):
    assert main(["tune", *map(str, argv), "--analytic", "--json", "-"]) == 0
    return json.loads(capsys.readouterr().out)


def _never_slower(doc):
    best = doc["best"]["tokens_per_s_per_gpu"]
    assert doc["regret"] == 0.0 and doc["fastest"]["config"] == doc["optimum"]["config"]
    assert doc["fastest"]["tokens_per_s_per_gpu"] >= max(t["tokens_per_s_per_gpu"] for t in doc["ranked"])
    if not doc["kept_recipe"]:  # the recipe's own is kept only on a tie (the tie-band rule)
        assert best == doc["optimum"]["tokens_per_s_per_gpu"]


@pytest.mark.skipif(not PRIMUS_CASE.is_file(), reason="../shared/primus_configs (Primus's recipes) not present")
def test_the_issue_case_applies_the_optimum_by_default(capsys):
    doc = _tune(capsys, PRIMUS_CASE, "--nodes", "4")
    assert doc["strategy"] == "exhaustive" and any(n.startswith("strategy auto: exhaustive") for n in doc["notes"])
    _never_slower(doc)
    assert not doc["kept_recipe"] and doc["best"] == doc["optimum"]  # the recipe is illegal on 4 nodes


@pytest.mark.skipif(not PRIMUS_CASE.is_file(), reason="../shared/primus_configs (Primus's recipes) not present")
def test_the_issue_case_with_tpe_still_applies_the_optimum(capsys):
    pytest.importorskip("optuna")
    doc = _tune(capsys, PRIMUS_CASE, "--nodes", "4", "--strategy", "tpe", "--budget", "20")
    assert doc["strategy"] == "tpe" and doc["search_regret"] > 0  # TPE alone misses it (issue 53: 6.2 %)
    _never_slower(doc)
    assert doc["best"] == doc["optimum"]


def test_a_shipped_recipe_tunes_exhaustively_by_default(capsys):
    doc = _tune(capsys, ROOT / "recipes" / "llama3.1_70B-pretrain.yaml")
    assert doc["strategy"] == "exhaustive" and doc["candidates"] <= 75_000
    _never_slower(doc)
    assert doc["max_changes"] is None and doc["search_regret"] == 0.0


def test_max_changes_is_in_the_document(capsys):
    doc = _tune(capsys, ROOT / "recipes" / "llama3.1_70B-pretrain.yaml", "--max-changes", "1")
    assert doc["max_changes"] == 1
    _never_slower(doc)
