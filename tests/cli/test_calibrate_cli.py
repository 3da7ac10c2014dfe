"""``primus-ext calibrate``: a ``tune --verify-top`` folder (one record across its candidates), the real Primus
MI355X Llama log (shared/validation/logs) and the refusal of a recipe that is not the logged run's.

    python -m pytest -q tests/cli/test_calibrate_cli.py
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from tiny import tiny_recipe

from primus_ext.calibration.apply import parts_of
from primus_ext.cli import main
from primus_ext.launcher.verify_top.local import megatron_log_lines
from primus_ext.launcher.verify_top.variants import write_manifest
from primus_ext.projection import project
from primus_ext.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]
SHARED = Path("/work/shared")
LLAMA = REPO / "tests" / "support" / "recipes" / "primus_llama3.2_1b_fp8_mi355x.yaml"
LLAMA_LOG = SHARED / "validation" / "logs" / "primus-llama3.2-1b-fp8-8xMI355X.log"
PRIMUS_CONFIGS = SHARED / "primus_configs"

TINY = tiny_recipe(micro_batch_size=1, global_batch_size=2048, tensor_model_parallel_size=1)
TARGET = ["--cluster", "h100", "--nodes", "1"]
# the search varies the micro-batch only: candidates of different step sizes (~110, 220, 440 ms projected)
SEARCH = [*TARGET, "--strategy", "exhaustive", "--analytic", "--no-regret", "--pin", "tp=1", "--pin", "pp=1",
          "--pin", "recompute=none", "--pin", "dp_overlap=none", "--pin", "sharding=ddp"]
K, OVERHEAD_S = 1.6, 0.012
"""The synthetic cluster the candidates' logs come from: kernels 1.6x slower than projected, 12 ms per step more."""


def _verify_folder(tmp_path: Path, capsys, ran: int) -> tuple[Path, Path, list[float]]:
    """``tune --verify-top 3`` of the tiny recipe, and logs of the first ``ran`` candidates measuring
    ``K * kernels + links + OVERHEAD_S`` (the first two iterations slower: warm-up)."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(TINY)
    assert main(["tune", str(recipe), *SEARCH, "--verify-top", "3", "--verify-iters", "10"]) == 0
    capsys.readouterr()
    folder = tmp_path / "tiny-verify-top"
    manifest = json.loads((folder / "manifest.json").read_text())
    measured = []
    for entry in manifest["candidates"][:ran]:
        variant = load_recipe(folder / entry["file"], cluster="h100", nodes=1)
        parts = parts_of(project(variant.model, variant.execution, variant.system, None).breakdown)
        step = K * parts.kernels_s + parts.links_s + OVERHEAD_S
        measured.append(step)
        times = [3 * step, 2 * step] + [step] * 8
        (folder / entry["log"]).write_text("\n".join(megatron_log_lines(
            times, [], global_batch_size=2048, end=datetime(2026, 1, 1))) + "\n")
    return recipe, folder, measured


def test_verify_top_folder_fits_one_record_across_the_candidates(tmp_path: Path, capsys):
    recipe, folder, measured = _verify_folder(tmp_path, capsys, ran=3)
    store = tmp_path / "timings.sqlite"
    out = tmp_path / "calibration.json"
    # a --store that does not exist yet: nothing to read (roofline costs), the record creates it
    assert main(["calibrate", str(folder), "--store", str(store), "--json", str(out)]) == 0
    captured = capsys.readouterr()
    doc = json.loads(out.read_text())
    assert [Path(r["log"]).name for r in doc["runs"]] == ["candidate-1.log", "candidate-2.log", "candidate-3.log"]
    assert [r["measured"]["step_s"] for r in doc["runs"]] == pytest.approx(measured, rel=1e-3)
    correction = doc["record"]["correction"]
    # three step sizes separate the factor from the fixed overhead (the log rounds each step to 0.1 ms)
    assert correction["runs"] == 3 and correction["kernel_factor"] == pytest.approx(K, rel=0.01)
    assert correction["overhead_s"] == pytest.approx(OVERHEAD_S, rel=0.05)
    assert doc["model"] == "tiny" and doc["record"]["workload"]["label"].startswith("tiny on 8 x")
    assert "correction: kernels x1.6" in captured.out
    # the record is of the user's model: their recipe laid out as candidate-1 is an exact match
    best = json.loads((folder / "manifest.json").read_text())["candidates"][0]
    layout = [f"{k}={v}" for k, v in best["changes"].items() if k in ("micro_batch_size",)]
    projected = tmp_path / "projected.json"
    assert main(["project", str(recipe), *layout, *TARGET, "--store", str(store), "--json", str(projected)]) == 0
    calibrated = json.loads(projected.read_text())
    assert calibrated["calibration"]["match"] == "exact"
    assert calibrated["step_time_s"] == pytest.approx(measured[0], rel=calibrated["calibration"]["band"])


def test_verify_top_folder_candidates_not_run_and_refusals(tmp_path: Path, capsys):
    _, folder, measured = _verify_folder(tmp_path, capsys, ran=1)
    assert main(["calibrate", str(folder), "--analytic", "--dry-run", "--json", "-"]) == 0
    captured = capsys.readouterr()
    assert "skipped candidate-2: no candidate-2.log (not run)" in captured.err and "skipped candidate-3" in captured.err
    [run] = json.loads(captured.out)["runs"]
    assert run["measured"]["step_s"] == pytest.approx(measured[0], rel=1e-3)
    (folder / "candidate-1.log").unlink()
    assert main(["calibrate", str(folder), "--analytic", "--dry-run"]) == 2
    assert "no candidate has a log yet" in capsys.readouterr().err
    manifest = json.loads((folder / "manifest.json").read_text())
    write_manifest(folder, {**manifest, "local": {"iters": 3, "scale": 0.5, "nproc": 1, "device": "cpu"}})
    assert main(["calibrate", str(folder), "--analytic", "--dry-run"]) == 2
    assert "--verify-run local" in capsys.readouterr().err


needs_shared = pytest.mark.skipif(not (LLAMA_LOG.is_file() and PRIMUS_CONFIGS.is_dir()),
                                  reason="shared/validation logs or shared/primus_configs absent")
REAL = [str(LLAMA), str(LLAMA_LOG), "--config-root", str(PRIMUS_CONFIGS), "--cluster", "mi355x", "--nodes", "1",
        "--dry-run"]


@needs_shared
def test_real_primus_mi355x_llama_log(capsys):
    assert main(["calibrate", *REAL, "--json", "-"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    [run] = doc["runs"]
    assert run["measured"]["step_s"] == pytest.approx(0.5077, abs=0.0005)  # index.csv: 507.7 ms
    assert run["format"] == "primus" and run["iterations_used"] >= 8
    correction = doc["record"]["correction"]
    # the MI355X profile's efficiencies are an NVIDIA-pooled prior: its kernels run ~2x slower than projected
    assert 1.5 < correction["kernel_factor"] < 2.5
    assert 1.0 < correction["memory_factor"] < 1.4  # max reserved over the projected peak
    assert doc["stored_in"] is None and "507.7 ms" in captured.err


@needs_shared
def test_real_log_against_another_micro_batch_exits_2_naming_it(capsys):
    assert main(["calibrate", *REAL, "micro_batch_size=2"]) == 2
    err = capsys.readouterr().err
    assert "micro_batch_size" in err and "the run logged micro_batch_size = 4" in err
    assert "Traceback" not in err
