"""``primus-ext tune --verify-top K``: the folder it writes, --resume-verify on logs put there afterwards, the
refusals, and one end-to-end local run of three tiny candidates with the built-in trainer.

    python -m pytest -q tests/cli/test_tune_verify_top.py
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from tiny import tiny_recipe

from primus_ext.cli import main
from primus_ext.launcher.verify_top.local import megatron_log_lines

TINY = tiny_recipe(micro_batch_size=1, global_batch_size=16, tensor_model_parallel_size=1)
# TP1 PP1 pinned: each candidate runs on one local rank (DP 1); the search varies MBS, recompute, sharding, overlap
SEARCH = ["--cluster", "h100", "--nodes", "1", "--strategy", "exhaustive", "--analytic", "--no-regret",
          "--pin", "tp=1", "--pin", "pp=1"]


def _recipe(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def test_writes_the_folder_then_reranks_the_logs_put_there(tmp_path: Path, capsys):
    recipe = _recipe(tmp_path)
    assert main(["tune", str(recipe), *SEARCH, "--verify-top", "3", "--verify-iters", "10"]) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "tiny-verify-top"  # the default: beside the recipe
    assert f"to {folder}" in out and "selection regret: n/a" in out
    manifest = json.loads((folder / "manifest.json").read_text())
    assert [c["file"] for c in manifest["candidates"]] == [f"candidate-{i}.yaml" for i in (1, 2, 3)]
    assert manifest["tune"]["kind"] == "tune" and manifest["train_iters"] == 10
    steps = [c["step_time_s"] for c in manifest["candidates"]]
    assert steps == sorted(steps)  # the projection's order
    # the runs happen elsewhere; their logs come back: the projection's #2 is the fastest, #3 not run
    for index, step in ((1, 0.30), (2, 0.25)):
        times = [1.0, 0.5] + [step] * 8
        (folder / f"candidate-{index}.log").write_text("\n".join(megatron_log_lines(
            times, [], global_batch_size=16, end=datetime(2026, 1, 1))) + "\n")
    code = main(["tune", str(recipe), "--verify-dir", str(folder), "--resume-verify", "--json", "-"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == 0 and doc["kind"] == "tune" and doc["best"] == manifest["tune"]["best"]
    verify = doc["verify_top"]
    assert verify["regret"] == pytest.approx(0.30 / 0.25 - 1) and verify["not_run"] == ["candidate-3"]
    assert [c["measured_rank"] for c in verify["candidates"]] == [2, 1, None]
    assert "selection regret: 20.0 %" in captured.err  # the table goes to stderr with --json -
    # --force writes new candidates over the folder: the old logs are set aside, not read as the new ones'
    assert main(["tune", str(recipe), *SEARCH, "--verify-top", "2", "--force"]) == 0
    assert not (folder / "candidate-1.log").exists() and (folder / "candidate-1.log.bak").exists()
    assert "selection regret: n/a" in capsys.readouterr().out


def test_refusals_before_the_search(tmp_path: Path, capsys):
    recipe = _recipe(tmp_path)
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "keep.txt").write_text("x")
    assert main(["tune", str(recipe), *SEARCH, "--verify-top", "2", "--verify-dir", str(folder)]) == 2
    assert "not empty" in capsys.readouterr().err and (folder / "keep.txt").exists()
    assert main(["tune", str(recipe), *SEARCH, "--verify-top", "2", "--verify-iters", "2"]) == 2
    assert "--verify-iters" in capsys.readouterr().err
    assert main(["tune", str(recipe), *SEARCH, "--verify-run", "local"]) == 2
    assert "need --verify-top" in capsys.readouterr().err
    assert main(["tune", str(recipe), "--verify-dir", str(tmp_path / "none"), "--resume-verify"]) == 2
    assert "no manifest" in capsys.readouterr().err


@pytest.mark.slow
def test_three_candidates_run_here_and_rerank(tmp_path: Path, capsys):
    recipe = _recipe(tmp_path)
    folder = tmp_path / "verify"
    out = tmp_path / "tune.json"
    code = main(["tune", str(recipe), *SEARCH, "--verify-top", "3", "--verify-run", "local", "--verify-dir",
                 str(folder), "--verify-nproc", "1", "--verify-iters", "3", "--verify-scale", "0.5",
                 "--store", str(tmp_path / "timings.sqlite"), "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    verify = json.loads(out.read_text())["verify_top"]
    assert "same reduced run" in verify["basis"] and verify["not_run"] == []
    assert sorted(c["measured_rank"] for c in verify["candidates"]) == [1, 2, 3]
    assert all(c["measured_step_s"] > 0 and c["projected_step_s"] > 0 for c in verify["candidates"])
    assert verify["regret"] >= 0 and verify["spearman"] is not None
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["local"]["scale"] == 0.5
    for c in manifest["candidates"]:
        assert "elapsed time per iteration (ms)" in (folder / c["log"]).read_text()
        assert c["local"]["projected_step_s"] > 0 and any("hidden_size" in s for s in c["local"]["shrinks"])
    assert "selection regret:" in captured.out and "Spearman rank correlation:" in captured.out
