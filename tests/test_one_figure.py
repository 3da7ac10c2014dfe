"""One calibrated recipe, one figure (issue 55): ``project --memory-only``, ``project``, ``compare``, ``tune`` and
``train --projection-only`` (the built-in command and Primus's launcher gate) give the same peak memory, the same
band and the same exit code for a recipe whose stored calibration record corrects both its step and its memory;
and, for each memory verdict, the same exit code of the gate (issue 53: over capacity within the model's error
exits 4, not 0).

    python -m pytest -q tests/test_one_figure.py
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest
from runlogs import TARGET, TINY

from primus_ext.calibration import CalibrationRecord, Correction, RunFigures, Workload, save_record
from primus_ext.cli import main
from primus_ext.projection import project
from primus_ext.recipe import load_recipe

KERNELS, OVERHEAD_S, SPREAD, MEMORY = 1.3, 0.004, 0.03, 1.25
"""A record that moves everything: kernels x1.3 + 4 ms/step, a 3 % spread, the measured peak 1.25 x projected."""


def _store_record(store: Path, recipe: Path, overrides: list[str], memory: float) -> None:
    """A record of the recipe's own workload on one H100 node: kernels x1.3 + 4 ms/step, spread 3 %, and the
    measured peak ``memory`` x the projected one."""
    loaded = load_recipe(recipe, overrides, cluster="h100", nodes=1)
    p = project(loaded.model, loaded.execution, loaded.system, None, band=False)
    save_record(CalibrationRecord(
        workload=Workload.of(p.model, p.execution, p.system),
        correction=Correction(kernel_factor=KERNELS, overhead_s=OVERHEAD_S, spread=SPREAD, memory_factor=memory),
        measured=(RunFigures(step_s=p.step_time_s * KERNELS, spread=SPREAD, iterations=20),),
        projected=(RunFigures(step_s=p.step_time_s),), logs=("/runs/run.log",), date="2026-12-01T00:00:00Z"), store)


@pytest.fixture
def calibrated(tmp_path: Path) -> tuple[Path, Path]:
    recipe, store = tmp_path / "tiny.yaml", tmp_path / "timings.sqlite"
    recipe.write_text(TINY)
    _store_record(store, recipe, [], MEMORY)
    return recipe, store


def _figures(doc: dict) -> tuple[float, float, float]:
    """(peak GiB, band low, band high) of a projection document (or a side of a comparison)."""
    return doc["memory"]["peak_memory_gib"], doc["band"]["low"], doc["band"]["high"]


def test_every_command_gives_the_calibrated_figure(calibrated, tmp_path: Path, capsys):
    recipe, store = calibrated
    flags = [*TARGET, "--store", str(store)]
    out = tmp_path / "project.json"
    assert main(["project", str(recipe), *flags, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    peak, low, high = _figures(doc)
    tokens = doc["tokens_per_s_per_gpu"]
    assert doc["calibration"]["memory_factor"] == MEMORY and doc["calibration"]["band"] == pytest.approx(SPREAD)
    assert (low, high) == pytest.approx((tokens / (1 + SPREAD), tokens * (1 + SPREAD)), rel=1e-12)

    memory = tmp_path / "memory.json"
    assert main(["project", str(recipe), *flags, "--memory-only", "--json", str(memory)]) == 0
    assert json.loads(memory.read_text())["memory"]["peak_memory_gib"] == pytest.approx(peak, rel=1e-12)

    compared = tmp_path / "compare.json"
    assert main(["compare", str(recipe), str(recipe), *flags, "--json", str(compared)]) == 0
    for side in ("a", "b"):
        assert _figures(json.loads(compared.read_text())[side]) == pytest.approx((peak, low, high), rel=1e-12)

    tuned = tmp_path / "tune.json"  # one configuration: the recipe's own is the fastest, its band the tie band
    assert main(["tune", str(recipe), *flags, "--strategy", "exhaustive", "--no-regret", "--pin", "tp=1", "--pin",
                 "pp=1", "--pin", "mbs=1", "--pin", "recompute=none", "--json", str(tuned)]) == 0
    result = json.loads(tuned.read_text())
    assert result["baseline"]["tokens_per_s_per_gpu"] == pytest.approx(tokens, rel=1e-9)
    assert result["baseline"]["peak_memory_gib"] == pytest.approx(peak, rel=1e-9)
    assert result["fastest"]["config"] == result["baseline"]["config"]
    assert (result["tie_band"]["low"], result["tie_band"]["high"]) == pytest.approx((low, high), rel=1e-9)

    workspace = tmp_path / "train"
    assert main(["train", "--config", str(recipe), *flags, "--projection-only", "--workspace", str(workspace)]) == 0
    assert _figures(json.loads((workspace / "projection.json").read_text())) == pytest.approx((peak, low, high),
                                                                                             rel=1e-12)
    gate = tmp_path / "gate"
    assert _primus_gate(recipe, store, gate) == 0
    assert _figures(json.loads((gate / "projection.json").read_text())) == pytest.approx((peak, low, high),
                                                                                        rel=1e-12)
    capsys.readouterr()


def test_uncalibrated_the_tuner_ties_inside_the_band_project_prints(tmp_path: Path, capsys):
    """No record: ``project``'s band (the wider of the sensitivity band and the class's measured error, issue 53) is
    the tuner's tie band, the one band function (``tune.oracle.ProjectionOracle.band`` reads ``project``'s)."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(TINY)
    flags = [*TARGET, "--uncalibrated"]
    out = tmp_path / "project.json"
    assert main(["project", str(recipe), *flags, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert "calibration" not in doc and doc["band"]["evidence"]["class"]["family"] == "hopper"
    tuned = tmp_path / "tune.json"
    assert main(["tune", str(recipe), *flags, "--strategy", "exhaustive", "--no-regret", "--pin", "tp=1", "--pin",
                 "pp=1", "--pin", "mbs=1", "--pin", "recompute=none", "--json", str(tuned)]) == 0
    result = json.loads(tuned.read_text())
    assert result["fastest"]["config"] == result["baseline"]["config"]
    assert (result["tie_band"]["low"], result["tie_band"]["high"]) == pytest.approx(
        (doc["band"]["low"], doc["band"]["high"]), rel=1e-9)
    capsys.readouterr()


def _primus_gate(recipe: Path, store: Path, out: Path, overrides: list[str] | None = None, *,
                 strict: bool = False) -> int:
    """``primus-cli train pretrain --config RECIPE --projection-only ...`` through the patched gate (``overrides``:
    ``key=value``, passed on as Primus does, ``--key value``)."""
    from primus_ext.launcher.primus_gate import add_suite_args, run_gate

    parser = add_suite_args(argparse.ArgumentParser())
    parser.add_argument("--config")
    args = parser.parse_args(["--config", str(recipe), "--projection-only", "--projection-cluster", "h100",
                              "--projection-nodes", "1", "--projection-store", str(store), "--projection-out",
                              str(out), *(["--projection-strict"] if strict else [])])
    args.suite = "pretrain"
    passed_on = [part for item in overrides or [] for part in ("--" + item.split("=")[0], item.split("=")[1])]
    return run_gate(args, passed_on, stream=io.StringIO(), env={})


LLAMA = Path(__file__).parents[1] / "recipes" / "llama3.1_8B-pretrain.yaml"
FITS_UNCALIBRATED = ["tensor_model_parallel_size=2", "micro_batch_size=1"]
"""~60 GiB projected of the H100's 79.6: it fits; twice that does not (over the 17.5 % the memory model may miss), for
any projected peak from 46 to 92 GiB."""
MEASURED_TWICE = 2.0


def test_the_memory_verdict_is_the_calibrated_one(tmp_path: Path, capsys):
    """A measured peak over the HBM where the projected one fits: ``project``, ``--memory-only``, ``tune`` and ``train
    --projection-only`` say so with the same peak, and exit 3 (tune: the recipe's configuration is out of memory)."""
    store = tmp_path / "timings.sqlite"
    _store_record(store, LLAMA, FITS_UNCALIBRATED, MEASURED_TWICE)
    flags = [*FITS_UNCALIBRATED, *TARGET, "--store", str(store)]
    peaks = {}
    for name, extra in (("project", []), ("memory-only", ["--memory-only"]), ("uncalibrated", ["--uncalibrated"])):
        out = tmp_path / f"{name}.json"
        assert main(["project", str(LLAMA), *flags, *extra, "--json", str(out)]) == (0 if name == "uncalibrated"
                                                                                      else 3), name
        peaks[name] = json.loads(out.read_text())["memory"]["peak_memory_gib"]
    assert peaks["memory-only"] == pytest.approx(peaks["project"], rel=1e-12)
    assert peaks["project"] == pytest.approx(MEASURED_TWICE * peaks["uncalibrated"], abs=2e-3)
    workspace = tmp_path / "train"
    assert main(["train", "--config", str(LLAMA), *flags, "--projection-only", "--workspace", str(workspace)]) == 3
    assert json.loads((workspace / "projection.json").read_text())["memory"]["peak_memory_gib"] == pytest.approx(
        peaks["project"], rel=1e-12)
    written = tmp_path / "written.json"  # the recipe as written (tp 1, mbs 2): the record applies nearby
    assert main(["project", str(LLAMA), *TARGET, "--store", str(store), "--memory-only", "--json", str(written)]) == 3
    tuned = tmp_path / "tune.json"
    main(["tune", str(LLAMA), *TARGET, "--store", str(store), "--strategy", "exhaustive", "--no-regret", "--pin",
          "tp=1", "--pin", "mbs=2", "--pin", "pp=1", "--budget", "20", "--json", str(tuned)])
    baseline = json.loads(tuned.read_text())["baseline"]
    assert baseline["status"] == "oom"
    assert baseline["peak_memory_gib"] == pytest.approx(json.loads(written.read_text())["memory"]["peak_memory_gib"],
                                                        rel=1e-9)
    capsys.readouterr()


AT = {"fits": 0.5, "over the margin": 0.98, "within the model's error": 1.08, "out of memory": 1.3}
"""Calibrated peak / capacity for each verdict (a record's memory factor puts the measured peak there)."""
EXITS = {"fits": (0, 0), "over the margin": (0, 4), "within the model's error": (4, 4), "out of memory": (3, 3)}
"""The gate's exit code of each verdict (model.memory.gate), without and with --strict (issue 53)."""


@pytest.mark.parametrize("verdict", AT)
def test_every_gate_gives_the_verdicts_exit_code(verdict: str, tmp_path: Path, capsys):
    """``project``, ``--memory-only``, ``train --projection-only`` and Primus's launcher gate exit alike for each
    memory verdict of the same calibrated recipe: 0 fits, 0 over the margin (4 with ``--strict``), 4 over the
    capacity within the model's error (not 0: it may or may not fit), 3 out of memory."""
    loaded = load_recipe(LLAMA, FITS_UNCALIBRATED, cluster="h100", nodes=1)
    memory = project(loaded.model, loaded.execution, loaded.system, None, band=False).memory
    store = tmp_path / "timings.sqlite"
    _store_record(store, LLAMA, FITS_UNCALIBRATED, AT[verdict] * memory.capacity_bytes / memory.peak_bytes)
    flags = [*FITS_UNCALIBRATED, *TARGET, "--store", str(store)]
    for strict in (False, True):
        want = EXITS[verdict][strict]
        extra = ["--strict"] if strict else []
        out = tmp_path / f"project-{strict}.json"
        assert main(["project", str(LLAMA), *flags, *extra, "--json", str(out)]) == want, strict
        assert json.loads(out.read_text())["memory"]["verdict"] == verdict
        assert main(["project", str(LLAMA), *flags, *extra, "--memory-only"]) == want, strict
        assert main(["train", "--config", str(LLAMA), *flags, *extra, "--projection-only", "--workspace",
                     str(tmp_path / "train")]) == want, strict
        assert _primus_gate(LLAMA, store, tmp_path / "gate", FITS_UNCALIBRATED, strict=strict) == want, strict
        for folder in ("train", "gate"):
            assert json.loads((tmp_path / folder / "projection.json").read_text())["memory"]["verdict"] == verdict
        err = capsys.readouterr().err
        if want == 4 and verdict == "within the model's error":
            assert "over capacity, within the model's error (exit 4): projected peak" in err
