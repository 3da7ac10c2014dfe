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
    import primus_ext.tune.results as results

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
