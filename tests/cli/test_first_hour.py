"""What a new user meets in the first hour (issue 43, part 5), ``project`` and ``compare``: ``--json FILE`` keeps the
tables (only ``--json -`` replaces them); ``compare --json`` writes the one schema."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

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


def test_tune_and_projection_only_show_progress_on_stderr(tmp_path, capsys, monkeypatch):
    """No silent seconds: the tuner's phases and projections spent, projection-only's steps, all on stderr (stdout
    stays the report / the JSON); no GPU device file here: projection-only does not import torch to ask."""
    import sys

    pytest.importorskip("optuna")
    assert main(["tune", RECIPE, "--analytic", "--strategy", "tpe", "--budget", "10", "--json", "-"]) == 0
    captured = capsys.readouterr()  # TPE (auto would enumerate this space): every phase shows
    assert json.loads(captured.out)["kind"] == "tune"
    for phase in ("counting the candidates", "searching (tpe)", "exhaustive reference for the regret",
                  "ties and sensitivity"):
        assert "tune llama3.1_8B  [" in captured.err and phase in captured.err, phase
    import primus_ext.cli.train as train

    monkeypatch.setattr(train.sys, "platform", "linux")
    monkeypatch.setattr(train.os.path, "exists", lambda _path: False)
    monkeypatch.setitem(sys.modules, "torch", None)  # importing torch would raise
    assert train._device(SimpleNamespace(device=None)) == "cpu"
    monkeypatch.undo()
    assert main(["train", "--config", RECIPE, "--projection-only", "--analytic", "--workspace", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    steps = [line for line in captured.err.splitlines() if line.startswith("projection-only  [")]
    assert [s.split("  ")[2].split("/")[0] for s in steps] == ["1", "2", "3", "4"]  # projecting .. the PNG
    assert "drawing the timeline PNG" in steps[-1] and "tokens/s/GPU" in captured.out
