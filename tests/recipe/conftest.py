"""Shared fixtures for the recipe tests: write small YAML trees into a temp folder."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from recipe_data import BASE, MOE, REPO, primus_root  # noqa: F401  (re-exported)


@pytest.fixture
def write(tmp_path: Path) -> Callable[..., Path]:
    """``write("a/b.yaml", text_or_mapping)`` -> path under tmp_path."""

    def _write(name: str, content: str | dict) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump(content, sort_keys=False) if isinstance(content, dict) else textwrap.dedent(content)
        path.write_text(text, encoding="utf-8")
        return path

    return _write
