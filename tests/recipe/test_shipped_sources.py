"""Shipped recipes cite what a user's clone can open: the public source of each run and architecture, never the
development data under ``../shared`` that a clone does not have (issue 43)."""

from __future__ import annotations

from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
FILES = sorted(RECIPES.rglob("*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(RECIPES)))
def test_no_shipped_recipe_cites_files_outside_the_clone(path):
    text = path.read_text(encoding="utf-8")
    assert "shared/" not in text and "measured_throughput.csv" not in text and "model_archs.csv" not in text


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*-pretrain.yaml")), ids=lambda p: p.name)
def test_each_experiment_names_the_published_run_it_reproduces(path):
    head = path.read_text(encoding="utf-8").split("\nwork_group:")[0]
    assert "published in" in head and ("@" in head or "https://" in head)
