"""``primus-ext tune``: what a new user meets in the first hour (issue 43, part 5): outputs checked before the
search, MFU in percent, ties inside the projection's band, no duplicate rows, ``--apply`` with nothing to write."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from primus_ext.cli import main

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
PINS = ["--pin", "tp=1,2", "--pin", "pp=2,4", "--pin", "cp=1", "--pin", "ep=4,8", "--pin", "mbs=1,2"]


@pytest.fixture
def recipes(tmp_path):
    shutil.copytree(RECIPES, tmp_path / "recipes")
    return tmp_path / "recipes"


def test_out_in_a_folder_that_resolves_other_presets_exits_2_before_the_search(recipes, tmp_path, capsys,
                                                                                 monkeypatch):
    """A copy of the recipe outside its tree reads other presets (here primus-ext's bundled ones): refused before
    the search spends its budget, nothing written."""
    import primus_ext.tune.run as results

    def no_search(*_a, **_k):
        raise AssertionError("the search ran")

    monkeypatch.setattr(results, "tune", no_search)
    (tmp_path / "elsewhere").mkdir()
    out = tmp_path / "elsewhere" / "tuned.yaml"
    code = main(["tune", str(recipes / "mixtral_8x22B-pretrain.yaml"), "--cluster", "mi355x", "--nodes", "8",
                 "--analytic", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "--out" in err and "presets read" in err and "nothing was searched" in err
    assert list((tmp_path / "elsewhere").iterdir()) == []


def _own_pins(recipe: Path) -> list[str]:
    """``--pin`` of every axis to the recipe's own value: the recipe is the only candidate."""
    from primus_ext.recipe import load_recipe
    from primus_ext.tune.space import build_space

    loaded = load_recipe(recipe, validate=False)
    config = build_space(loaded.model, loaded.execution, loaded.system).config_of(loaded.execution)
    def text(value: object) -> str:
        return "true" if value is True else "false" if value is False else "none" if value is None else str(value)

    return [x for axis, value in config.items() for x in ("--pin", f"{axis}={text(value)}")]


def test_apply_with_nothing_to_change_moves_the_target_comment(recipes, capsys):
    """The recipe's own configuration wins on another node count: --apply rewrites the target comment only (the
    file must load for the cluster it was tuned for); a second run has nothing to write."""
    recipe = recipes / "mixtral_8x22B-pretrain.yaml"
    before = recipe.read_text()
    assert "# primus-ext: {cluster: mi355x, nodes: 8}" in before
    argv = ["tune", str(recipe), "--cluster", "mi355x", "--nodes", "16", "--analytic", "--no-regret",
            "--strategy", "exhaustive", *_own_pins(recipe), "--apply"]
    assert main(argv) == 0
    after = recipe.read_text()
    assert "# primus-ext: {cluster: mi355x, nodes: 16}" in after and "nodes: 8}" not in after
    assert [a for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b] == [
        "# primus-ext: {cluster: mi355x, nodes: 8}"]
    capsys.readouterr()
    assert main(argv) == 0
    assert "nothing to write" in capsys.readouterr().out and recipe.read_text() == after


def test_out_with_nothing_to_change_still_writes_the_copy(recipes, capsys):
    recipe, out = recipes / "mixtral_8x22B-pretrain.yaml", recipes / "tuned.yaml"
    argv = ["tune", str(recipe), "--cluster", "mi355x", "--nodes", "8", "--analytic", "--no-regret",
            "--strategy", "exhaustive", *_own_pins(recipe), "--out", str(out)]
    assert main(argv) == 0 and out.read_text() == recipe.read_text()
    capsys.readouterr()
    assert main(argv) == 0 and "nothing to write" in capsys.readouterr().out


def test_default_recipe_ties_keep_the_recipe_without_duplicate_rows(tmp_path, capsys):
    """The README's recipe: the fastest found is ~1 % ahead, inside the projection's ~+-10 % band: the recipe is
    kept and the output says so; the recipe's row is listed once; MFU in percent on the console, a fraction in
    the JSON."""
    import json

    pytest.importorskip("optuna")
    doc = tmp_path / "tune.json"
    assert main(["tune", str(RECIPES / "llama3.1_8B-pretrain.yaml"), "--budget", "40", "--analytic", "--no-regret",
                 "--top", "40", "--json", str(doc)]) == 0
    out = capsys.readouterr().out
    data = json.loads(doc.read_text())
    assert data["kept_recipe"] and data["best"] == data["baseline"] and data["gain"] == 0.0
    assert data["tie_band"]["low"] < data["baseline"]["tokens_per_s_per_gpu"] <= data["fastest"]["tokens_per_s_per_gpu"]
    assert "best: the recipe's own configuration" in out and "tie inside the fastest's band" in out
    table = [row for row in out.split("\n\n")[1].splitlines()[2:] if not row.startswith("MFU:")]
    assert len(table) == len(data["ranked"][:40]) and sum(" recipe " in row for row in table) == 1
    rows = [row.split(None, 1)[1].replace(" recipe ", " ") for row in table]
    assert len(set(rows)) == len(rows)  # no two rows alike
    mfu = data["ranked"][0]["mfu"]
    assert 0 < mfu < 1 and f"{mfu:.1%}" in table[0]
    assert "MFU: model TFLOP/s over the mi325x dense peak of the row's precision; fp8: the FP8 peak" in out
