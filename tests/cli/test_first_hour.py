"""What a new user meets in the first hour (issue 43, part 5), ``project`` and ``compare``: ``--json FILE`` keeps the
tables (only ``--json -`` replaces them); ``compare --json`` writes the one schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from primus_ext.cli import main

REPO = Path(__file__).resolve().parents[2]
RECIPE = str(REPO / "recipes" / "llama3.1_8B-pretrain.yaml")


@pytest.mark.parametrize("memory_only", [False, True])
def test_json_to_a_file_keeps_the_tables_and_json_to_stdout_replaces_them(memory_only, tmp_path, capsys):
    extra = ["--memory-only"] if memory_only else []
    out = tmp_path / "p.json"
    assert main(["project", RECIPE, "--analytic", *extra, "--json", str(out)]) == 0
    captured = capsys.readouterr()
    table = "per-GPU memory" if memory_only else "tokens/s/GPU"
    assert table in captured.out and "read (lowest precedence" in captured.out
    assert f"wrote {out}" in captured.err
    doc = json.loads(out.read_text())
    assert doc["kind"] == ("memory" if memory_only else "projection")
    assert main(["project", RECIPE, "--analytic", *extra, "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out) == doc
