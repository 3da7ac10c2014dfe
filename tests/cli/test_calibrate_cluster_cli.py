"""``primus-ext calibrate --scope cluster`` through the CLI: a synthetic cluster whose links and kernels are known
(logs written from the projection on that environment), then the two real Primus MI355X logs (skipped without
``/work/shared``): calibrated on one model, the other model's error shrinks.

    python -m pytest -q tests/cli/test_calibrate_cluster_cli.py
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest
from runlogs import TARGET, TINY, steady, write_log
from tiny import tiny_recipe

from primus_ext.calibration.cluster import load_cluster_records
from primus_ext.calibration.environment import apply_environment
from primus_ext.cli import main
from primus_ext.projection import evaluate
from primus_ext.recipe import load_recipe

WIDE = tiny_recipe(micro_batch_size=1, global_batch_size=8, tensor_model_parallel_size=1, hidden_size=1024,
                   ffn_hidden_size=4096, num_attention_heads=8, vocab_size=32768)
"""A wider model, one micro-batch per rank: its step is ~40 % gradient reduction on the h100 profile (the tiny DP8
one: ~1 %)."""


def env_step(recipe: Path, values: Mapping[str, float]) -> float:
    """The step the synthetic cluster measures: the projection on ``values`` (its links and kernels)."""
    r = load_recipe(recipe, cluster="h100", nodes=1)
    return evaluate(r.model, r.execution, apply_environment(r.system, values)).step_time_s


@pytest.fixture
def cluster(tmp_path: Path):
    """``make(values)``: the two recipes (wide: communication-heavy, dp: compute-bound) and a log of each run on a
    cluster with ``values``."""

    def make(values: Mapping[str, float]) -> dict[str, tuple[Path, Path]]:
        out = {}
        for name, text, batch in (("wide", WIDE, 8), ("dp", TINY, 64)):
            recipe = tmp_path / f"{name}.yaml"
            recipe.write_text(text)
            out[name] = recipe, write_log(tmp_path / f"{name}.log", steady(env_step(recipe, values), 20),
                                          global_batch_size=batch)
        return out

    return make


def _project(recipe: Path, store: Path, capsys, *extra: str) -> dict:
    assert main(["project", str(recipe), *TARGET, "--store", str(store), "--json", "-", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_one_log_fits_the_links_alone_and_every_model_on_the_cluster_gets_them(cluster, tmp_path: Path, capsys):
    import jsonschema

    from primus_ext.results.schema import SCHEMA

    runs = cluster({"scaleup_link": 0.12})
    store, out = tmp_path / "timings.sqlite", tmp_path / "cluster.json"
    recipe, log = runs["wide"]
    assert main(["calibrate", "--scope", "cluster", str(recipe), str(log), *TARGET, "--store", str(store),
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["scope"] == "cluster" and doc["record"]["values"]["scaleup_link"] == pytest.approx(0.12, rel=0.02)
    assert set(doc["record"]["held"]) == {"scaleout_link", "kernels", "overlap"}
    assert "every model projected on profile h100" in doc["applies_to"][0] and "any node count" in printed
    other = _project(runs["dp"][0], store, capsys)  # another model: the cluster's links
    jsonschema.validate(other, SCHEMA)
    applied = other["cluster_calibration"]
    assert applied["origin"] == "cluster" and applied["logs"] == [str(log.resolve())]
    assert other["step_time_s"] == pytest.approx(env_step(runs["dp"][0], applied["values"]), rel=1e-9)
    assert "calibration" not in other and any("cluster environment" in n for n in other["notes"])
    plain = _project(runs["dp"][0], store, capsys, "--uncalibrated")
    assert "cluster_calibration" not in plain and plain["step_time_s"] < other["step_time_s"]


def test_logs_of_two_models_fit_links_and_kernels_and_reproduce_both(cluster, tmp_path: Path, capsys):
    truth = {"scaleup_link": 0.12, "kernels": 1.4}
    runs = cluster(truth)
    store = tmp_path / "timings.sqlite"
    argv = [x for name in ("wide", "dp") for x in map(str, runs[name])]
    assert main(["calibrate", "--scope", "cluster", *argv, *TARGET, "--store", str(store)]) == 0
    assert "2 factor(s) from 2 configuration(s)" in capsys.readouterr().out
    [record] = load_cluster_records(store)
    assert record.values == pytest.approx(truth, rel=0.03)
    for recipe, _ in runs.values():
        measured = env_step(recipe, truth)
        assert _project(recipe, store, capsys)["step_time_s"] == pytest.approx(measured, rel=0.02)
    # one log of each model: a record of two configurations is not replaced by one log, unless --force
    assert main(["calibrate", "--scope", "cluster", *map(str, runs["wide"]), *TARGET, "--store", str(store)]) == 2
    assert "resting on more configurations" in capsys.readouterr().err
    assert load_cluster_records(store)[0].configurations == 2


def test_a_model_record_takes_precedence_on_the_environment_it_was_fitted_on(cluster, tmp_path: Path, capsys):
    runs = cluster({"scaleup_link": 0.3})
    store = tmp_path / "timings.sqlite"
    (wide, wide_log), (dp, _) = runs["wide"], runs["dp"]
    measured = env_step(wide, {"scaleup_link": 0.3})
    assert main(["calibrate", str(wide), str(wide_log), *TARGET, "--store", str(store)]) == 0  # model record first
    assert main(["calibrate", "--scope", "cluster", str(wide), str(wide_log), *TARGET, "--store", str(store)]) == 0
    capsys.readouterr()
    own = _project(wide, store, capsys)  # the model record, on the profile it was fitted on; the cluster's not applied
    assert own["calibration"]["match"] == "exact" and "cluster_calibration" not in own
    assert own["step_time_s"] == pytest.approx(measured, rel=0.02)
    assert any("not applied: the model record" in n for n in own["notes"])
    assert _project(dp, store, capsys)["cluster_calibration"]["origin"] == "cluster"  # other models: the cluster's
    # calibrated again, the model record is fitted over the cluster record and applied on it
    assert main(["calibrate", str(wide), str(wide_log), *TARGET, "--store", str(store), "--force"]) == 0
    assert "compared on the cluster record" in capsys.readouterr().err
    again = _project(wide, store, capsys)
    assert again["cluster_calibration"]["origin"] == "cluster" and again["calibration"]["match"] == "exact"
    assert again["step_time_s"] == pytest.approx(measured, rel=0.02)
    assert again["calibration"]["kernel_factor"] == pytest.approx(1.0, abs=0.02)  # the links explained the run
    assert main(["calibrate", "--list", "--store", str(store)]) == 0
    listed = capsys.readouterr().out
    assert "1 cluster record(s)" in listed and "fitted on the cluster record" in listed


def test_labels_the_plausibility_guard_and_forget(cluster, tmp_path: Path, capsys, monkeypatch):
    runs = cluster({"scaleup_link": 0.015})  # 6.8 GB/s of H100's 450 GB/s NVLink: slower than PCIe 3.0 x16
    store = tmp_path / "timings.sqlite"
    recipe, log = runs["wide"]
    argv = ["calibrate", "--scope", "cluster", str(recipe), str(log), *TARGET, "--store", str(store),
            "--cluster-label", "rack-3"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "PCIe 3.0 x16" in err and "--force" in err and "Traceback" not in err
    assert load_cluster_records(store) == []
    assert main([*argv, "--force"]) == 0
    [record] = load_cluster_records(store)
    assert record.label == "rack-3" and any("stored with --force" in n for n in record.notes)
    capsys.readouterr()
    unlabelled = _project(runs["dp"][0], store, capsys)
    assert "cluster_calibration" not in unlabelled and any("rack-3" in n for n in unlabelled["notes"])
    assert "cluster_calibration" in _project(runs["dp"][0], store, capsys, "--cluster-label", "rack-3")
    monkeypatch.setenv("PRIMUS_EXT_CLUSTER_LABEL", "rack-3")
    assert "cluster_calibration" in _project(runs["dp"][0], store, capsys)
    assert main(["calibrate", "--forget", "--scope", "cluster", "--cluster-label", "rack-2", "--store",
                 str(store)]) == 0
    assert "removed 0 cluster record(s)" in capsys.readouterr().out
    assert main(["calibrate", "--forget", "--store", str(store)]) == 0  # --forget alone: every record
    assert "removed 1 cluster record(s)" in capsys.readouterr().out and load_cluster_records(store) == []


SHARED = Path("/work/shared")
REPO = Path(__file__).resolve().parents[2]
LOGS = SHARED / "validation" / "logs"
LLAMA = (REPO / "tests" / "support" / "recipes" / "primus_llama3.2_1b_fp8_mi355x.yaml",
         LOGS / "primus-llama3.2-1b-fp8-8xMI355X.log")
DSV2 = (REPO / "tests" / "support" / "recipes" / "primus_dsv2_lite_fp8_mi355x.yaml",
        LOGS / "primus-dsv2-lite-fp8-8xMI355X.log")
MI355X = ["--config-root", str(SHARED / "primus_configs"), "--cluster", "mi355x", "--nodes", "1"]
needs_shared = pytest.mark.skipif(not (LLAMA[1].is_file() and DSV2[1].is_file()),
                                  reason="shared/validation logs or shared/primus_configs absent")


def _error(recipe: Path, log_step_s: float, store: Path, capsys, *extra: str) -> float:
    """Projected tokens/s over the logged (the step's inverse), in percent."""
    assert main(["project", str(recipe), *MI355X, "--store", str(store), "--json", "-", *extra]) == 0
    return (log_step_s / json.loads(capsys.readouterr().out)["step_time_s"] - 1) * 100


@needs_shared
@pytest.mark.parametrize(("fitted", "other", "step_s", "before"), [(LLAMA, DSV2, 32.05925, 273.4),
                                                                    (DSV2, LLAMA, 0.5077, 88.0)])
def test_real_mi355x_logs_calibrated_on_one_model_shrink_the_others_error(fitted, other, step_s, before, tmp_path,
                                                                           capsys):
    store = tmp_path / "timings.sqlite"
    assert main(["calibrate", "--scope", "cluster", *map(str, fitted), *MI355X, "--store", str(store)]) == 0
    assert "kernels x1.000 (the profile's)" in capsys.readouterr().out  # one log: the node's links alone
    assert _error(other[0], step_s, store, capsys, "--uncalibrated") == pytest.approx(before, abs=1.0)
    after = _error(other[0], step_s, store, capsys)
    assert abs(after) < abs(before) - 10  # Llama -> DeepSeek-V2-Lite: +273 % -> -53 %; the reverse: +88 % -> +74 %
