"""One projection session (issue 46): ``project``, ``compare`` and ``tune`` give the same figure for the same recipe
and store with a stored calibration, and ``compare`` names the record that changed it.

    python -m pytest -q tests/test_session.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from runlogs import TARGET, TINY, kernel_step, steady, write_log

from primus_ext.cli import compare, main
from primus_ext.cli._args import session_of
from primus_ext.session import CostChoice, Session


@pytest.fixture
def calibrated(tmp_path: Path, capsys) -> tuple[Path, Path]:
    recipe, store = tmp_path / "tiny.yaml", tmp_path / "timings.sqlite"
    recipe.write_text(TINY)
    log = write_log(tmp_path / "run.log", steady(kernel_step(recipe, 1.3), 20))
    assert main(["calibrate", str(recipe), str(log), *TARGET, "--store", str(store)]) == 0
    capsys.readouterr()
    return recipe, store


def _compare_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    compare.register(parser.add_subparsers())
    return parser.parse_args(["compare", *argv])


def test_project_compare_and_tune_give_one_figure(calibrated, tmp_path: Path, capsys):
    recipe, store = calibrated
    projected = tmp_path / "project.json"
    assert main(["project", str(recipe), *TARGET, "--store", str(store), "--json", str(projected)]) == 0
    doc = json.loads(projected.read_text())
    assert doc["calibration"]["match"] == "exact"
    figure = doc["tokens_per_s_per_gpu"]
    assert doc["step_time_s"] > doc["calibration"]["uncalibrated_step_time_s"]  # kernels x1.3: the record applied

    args = _compare_args(str(recipe), str(recipe), *TARGET, "--store", str(store))
    side, _ = compare.parse_sides(args.a, args.b)
    _, a = compare.project_side(side, session_of(args, calibrated=not args.uncalibrated), cluster="h100", nodes=1)
    assert a.calibration is not None and a.tokens_per_s_per_gpu == pytest.approx(figure, rel=1e-9)
    assert main(["compare", str(recipe), str(recipe), *TARGET, "--store", str(store)]) == 0
    assert "calibrated (exact)" in capsys.readouterr().out  # the console says which record changed it

    tuned = tmp_path / "tune.json"
    assert main(["tune", str(recipe), *TARGET, "--store", str(store), "--strategy", "exhaustive", "--no-regret",
                 "--pin", "tp=1", "--pin", "pp=1", "--pin", "mbs=1", "--json", str(tuned)]) == 0
    baseline = json.loads(tuned.read_text())["baseline"]
    assert baseline["tokens_per_s_per_gpu"] == pytest.approx(figure, rel=1e-9)
    assert any("run.log" in note for note in json.loads(tuned.read_text())["notes"])


def test_uncalibrated_and_analytic_sessions(calibrated):
    recipe, store = calibrated
    plain = Session(CostChoice(store=str(store), calibrated=False))
    loaded = plain.load(recipe, cluster="h100", nodes=1)
    assert plain.project(loaded).calibration is None and plain.records(loaded.model, loaded.system) == ()
    session = Session(CostChoice(store=str(store)))
    assert len(session.records(loaded.model, loaded.system)) == 1
    assert session.project(loaded).step_time_s > plain.project(loaded).step_time_s  # kernels x1.3
    assert Session.analytic().costs("H100") is None and Session.analytic().choice.calibrated is False


def test_a_cluster_record_gives_one_figure_in_project_compare_and_tune(tmp_path: Path, capsys):
    """A cluster record (``calibrate --scope cluster``) moves every command's figure the same way, and names it."""
    from primus_ext.calibration.cluster import ClusterRecord, ClusterRun, save_cluster_record

    recipe, store = tmp_path / "tiny.yaml", tmp_path / "timings.sqlite"
    recipe.write_text(TINY)
    run = ClusterRun(log="/logs/a.log", model="tiny", configuration="c", measured_s=1.0, before_s=0.5, after_s=1.0)
    save_cluster_record(ClusterRecord(profile="h100", gpu="h100", values={"scaleup_link": 0.05, "kernels": 1.2},
                                      profile_values={"scaleup_link": 0.75}, runs=(run,)), store)
    projected = tmp_path / "project.json"
    assert main(["project", str(recipe), *TARGET, "--store", str(store), "--json", str(projected)]) == 0
    doc = json.loads(projected.read_text())
    assert doc["cluster_calibration"]["values"] == {"scaleup_link": 0.05, "kernels": 1.2}
    plain = Session(CostChoice(store=str(store), calibrated=False))
    loaded = plain.load(recipe, cluster="h100", nodes=1)
    assert doc["step_time_s"] > 1.2 * plain.project(loaded).step_time_s  # slower kernels and links
    args = _compare_args(str(recipe), str(recipe), *TARGET, "--store", str(store))
    side, _ = compare.parse_sides(args.a, args.b)
    _, a = compare.project_side(side, session_of(args, calibrated=not args.uncalibrated), cluster="h100", nodes=1)
    assert a.cluster_calibration is not None and a.tokens_per_s_per_gpu == pytest.approx(doc["tokens_per_s_per_gpu"],
                                                                                         rel=1e-9)
    tuned = tmp_path / "tune.json"
    assert main(["tune", str(recipe), *TARGET, "--store", str(store), "--strategy", "exhaustive", "--no-regret",
                 "--pin", "tp=1", "--pin", "pp=1", "--pin", "mbs=1", "--json", str(tuned)]) == 0
    result = json.loads(tuned.read_text())
    assert result["baseline"]["tokens_per_s_per_gpu"] == pytest.approx(doc["tokens_per_s_per_gpu"], rel=1e-9)
    assert any("cluster environment" in note for note in result["notes"])
    assert Session.analytic().cluster_record(loaded.system) == (None, "")  # validate's session: never applied
