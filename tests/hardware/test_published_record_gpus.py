"""The GPUs of the published record (issue 52, part 4): A100 80 / 40 GB, A800, H20, MI250X. Each profile loads with a
source beside every figure, runs only the formats its tensor cores have (FP8 refused with a sentence where it has
none), carries a prior it says is a prior, with a band widened because no run or kernel of it calibrates it, and
projects and tunes from the command line."""

from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from primus_ext.cli import main
from primus_ext.hardware import PROFILE_DIR, load_gpu
from primus_ext.projection.project import band_reason
from primus_ext.recipe import load_recipe
from primus_ext.tune.axes import PRECISION, TP
from primus_ext.validate.amd import POOLED_PRIOR

NEW = ("a100", "a100_40gb", "a800", "h20", "mi250x")
NO_FP8 = ("a100", "a100_40gb", "a800", "mi250x")
FIGURES = ("bf16_dense_tflops", "fp8_dense_tflops", "hbm_gb", "hbm_tbps", "scaleup_gbps_per_direction",
           "scaleup_domain", "nic_gbit_per_gpu", "gpus_per_node", "tdp_w")
RECIPES = Path(__file__).resolve().parents[2] / "recipes"
RECIPE = str(RECIPES / "llama3.1_8B-pretrain.yaml")
FITS_ANYWHERE = ["tensor_model_parallel_size=4", "sequence_parallel=true", "micro_batch_size=1"]
"""Llama-3.1-8B at seq 8192 fits 40 GB (a100_40gb) at TP 4 with sequence parallelism, one sequence per micro-batch;
the recipe's own TP 1, MBS 2 needs ~140 GiB."""


@pytest.mark.parametrize("name", NEW)
def test_every_figure_states_its_source(name):
    text = (PROFILE_DIR / f"{name}.yaml").read_text(encoding="utf-8")
    assert "# Sources:" in text
    for key in FIGURES:
        line = re.search(rf"^{key}:\s*([^#\n]+?)\s*#\s*(\S.*)$", text, re.MULTILINE)
        assert line is not None, f"{name}.yaml: {key} has no comment naming its source"
        assert float(line.group(1)) >= 0 and len(line.group(2)) > 5, (name, key)


@pytest.mark.parametrize("name", NEW)
def test_datasheet_figures(name):
    gpu = load_gpu(name)
    expected = {  # dense BF16 TFLOP/s, HBM GB, TB/s, scale-up GB/s per direction, NIC Gb/s, W
        "a100": (312, 80, 2.039, 300, 200, 400), "a100_40gb": (312, 40, 1.555, 300, 200, 400),
        "a800": (312, 80, 2.039, 200, 200, 400), "h20": (148, 96, 4.0, 450, 400, 400),
        "mi250x": (191.5, 64, 1.6384, 50, 100, 250),  # one GCD: half an MI250X OAM
    }[name]
    got = (gpu.bf16_dense_tflops, gpu.hbm_bytes / 1e9, gpu.hbm_bandwidth_bytes_per_s / 1e12,
           gpu.scaleup_bandwidth_bytes_per_s / 1e9, gpu.nic_bandwidth_bytes_per_s * 8 / 1e9, gpu.tdp_w)
    assert got == pytest.approx(expected)
    assert gpu.gpus_per_node == 8 and gpu.scaleup_domain == 8 and gpu.fp4_dense_tflops == 0


def test_formats_and_device_arch():
    for name in NO_FP8:
        gpu = load_gpu(name)
        assert gpu.runs("fp8") is False and gpu.fp8_dense_tflops == 0, name
    assert load_gpu("a100").device_arch == 8 and load_gpu("mi250x").device_arch == 9
    h20 = load_gpu("h20")
    assert h20.family == "hopper" and h20.runs("fp8") and h20.fp8_dense_tflops == 2 * h20.bf16_dense_tflops


@pytest.mark.parametrize("name", ("a100", "a100_40gb", "a800"))
def test_a_gpu_without_runs_carries_the_pooled_prior_and_says_so(name):
    eff = load_gpu(name).efficiency
    assert replace(eff, band=POOLED_PRIOR.band, calibration=POOLED_PRIOR.calibration) == POOLED_PRIOR
    assert eff.calibration.startswith("pooled prior") and "no " in eff.calibration and "kernel" in eff.calibration
    assert eff.band > 0.3 and "no run or kernel measurement" in band_reason(load_gpu(name))


@pytest.mark.parametrize(("name", "source", "wider_than"), [("h20", "h100", 0.3), ("mi250x", "mi325x", 0.19)])
def test_a_gpu_without_runs_inherits_a_calibrated_block_with_a_wider_band(name, source, wider_than):
    """H20: its family's (Hopper) block; MI250X: the AMD board with the most rows (MI325X), never another vendor's."""
    gpu, parent = load_gpu(name), load_gpu(source)
    assert gpu.inherits_efficiency_from == source and gpu.vendor == parent.vendor
    assert replace(gpu.efficiency, band=parent.efficiency.band, calibration=parent.efficiency.calibration,
                   attention_sfu_exp_per_s=0.0) == parent.efficiency
    assert gpu.efficiency.band > max(wider_than, 0.10) and gpu.efficiency.band >= parent.efficiency.band
    assert f"no run or kernel measurement of {name}" in band_reason(gpu)
    assert band_reason(load_gpu("h100")) == ""  # a family calibrated on its own rows keeps the plain band


@pytest.mark.parametrize("name", NEW)
def test_project_on_each_new_gpu(name, capsys):
    bf16 = ["fp8=null"] if name in NO_FP8 else []
    argv = ["project", RECIPE, *FITS_ANYWHERE, *bf16, "--cluster", name, "--nodes", "1"]
    assert main([*argv, "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    figures = (doc["tokens_per_s_per_gpu"], doc["step_time_s"], doc["tflops_per_gpu"], doc["mfu"])
    assert all(math.isfinite(f) and f > 0 for f in figures) and doc["mfu"] <= 1.0
    assert doc["band"]["low"] < doc["tokens_per_s_per_gpu"] < doc["band"]["high"]
    assert f"no run or kernel measurement of {name}" in doc["band"]["what"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    said = {"h20": "inherited from h100", "mi250x": "inherited from mi325x"}.get(
        name, "pooled prior: no measured run of this GPU family")
    assert said in out and "widened: its efficiencies come from other GPUs" in out


@pytest.mark.parametrize("name", NO_FP8)
def test_fp8_is_refused_where_there_are_no_fp8_tensor_cores(name, capsys):
    assert main(["project", RECIPE, "--cluster", name, "--nodes", "1"]) == 2  # the recipe trains in FP8
    err = capsys.readouterr().err
    assert f"{name} " in err and "has no FP8 tensor cores" in err and "fp8=null" in err
    assert "tokens/s/GPU" not in err


def test_tune_on_a100_finds_a_legal_configuration(tmp_path, capsys):
    pytest.importorskip("optuna")
    shutil.copytree(RECIPES, tmp_path / "recipes")
    recipe = tmp_path / "recipes" / "llama3.1_8B-pretrain.yaml"
    recipe.write_text(recipe.read_text().replace("      fp8: hybrid", "      fp8: null"))
    tuned, doc = tmp_path / "recipes" / "tuned.yaml", tmp_path / "tune.json"
    assert main(["tune", str(recipe), "--cluster", "a100", "--nodes", "2", "--budget", "20", "--no-regret",
                 "--out", str(tuned), "--json", str(doc)]) == 0
    best = json.loads(doc.read_text())["best"]
    assert best is not None and best["config"][PRECISION] == "bf16"
    capsys.readouterr()
    assert load_recipe(tuned, cluster="a100", nodes=2).execution.tp == best["config"][TP]
    assert main(["project", str(tuned), "--cluster", "a100", "--nodes", "2"]) == 0  # legal, and it fits
