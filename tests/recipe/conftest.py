"""Shared fixtures for the recipe tests: write small YAML trees into a temp folder."""

from __future__ import annotations

import io
import subprocess
import tarfile
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


PRIMUS_GIT = Path("/work/.mirror/AMD-AGI+Primus/repo")
"""The Primus mirror the DeepSeek-V4 and Kimi-K3 recipe tests read Primus HEAD's recipes from (skipped without it)."""


@pytest.fixture(scope="module")
def primus_tree(tmp_path_factory) -> Path:
    """The MI355X recipes and ``primus/configs`` of Primus HEAD, as a user's checkout holds them."""
    if not PRIMUS_GIT.is_dir():
        pytest.skip("Primus mirror not found")
    tar = subprocess.run(["git", "-C", str(PRIMUS_GIT), "archive", "--format=tar", "HEAD",
                          "examples/megatron/configs/MI355X", "primus/configs"], capture_output=True)
    if tar.returncode:
        pytest.skip("the Primus mirror has no MI355X recipes")
    root = tmp_path_factory.mktemp("primus")
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        archive.extractall(root, filter="data")
    return root
