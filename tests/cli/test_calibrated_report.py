"""One truth after calibration (issue 53 part 5): once ``calibrate`` stored a record, every time figure ``project``
shows (console tables, JSON, the HTML timeline, the Chrome trace) adds up to the calibrated headline step.

    python -m pytest -q tests/cli/test_calibrated_report.py
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest
from tiny import tiny_recipe

from primus_ext.calibration.apply import parts_of
from primus_ext.cli import main
from primus_ext.launcher.verify_top.local import megatron_log_lines
from primus_ext.projection import project
from primus_ext.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]
SHARED = Path("/work/shared")
LLAMA = REPO / "tests" / "support" / "recipes" / "primus_llama3.2_1b_fp8_mi355x.yaml"
LLAMA_LOG = SHARED / "validation" / "logs" / "primus-llama3.2-1b-fp8-8xMI355X.log"
PRIMUS_CONFIGS = SHARED / "primus_configs"
MS = 0.051
"""Rounding of a figure printed to 0.1 ms (half of it, and a little more for the sums of rounded parts)."""


def _stage_column(console: str, index: int) -> list[float]:
    """A column of the console's pipeline-stage table, counted from the right (-3 finish, -1 mem GiB)."""
    block = console.split("Pipeline stages", 1)[1].split("\n\n", 1)[0].splitlines()
    assert block[1].split()[-4] == "finish"
    return [float(row.split()[index].replace(",", "")) for row in block[3:] if row.strip() and row.split()[0].isdigit()]


def _stage_finish_ms(console: str) -> list[float]:
    return _stage_column(console, -3)


def _check_one_truth(tmp_path: Path, console: str) -> None:
    doc = json.loads((tmp_path / "p.json").read_text())
    step = doc["step_time_s"]
    headline = float(re.search(r"step time\s+([\d,.]+) ms", console).group(1).replace(",", ""))
    assert headline == pytest.approx(step * 1e3, abs=MS)
    b = doc["breakdown"]
    tail = (b["comm"].get("dp_grad", {}).get("exposed_s", 0.0) + b["optimizer_s"]
            + b["comm"].get("dp_param", {}).get("exposed_s", 0.0))
    makespan = max(s["finish_s"] for s in doc["stages"])
    assert makespan + tail == pytest.approx(step, rel=1e-6)  # JSON: the stages end where the step's tail begins
    assert all(s["busy_s"] + s["idle_s"] == pytest.approx(makespan, rel=1e-6) for s in doc["stages"])
    assert max(_stage_finish_ms(console)) + tail * 1e3 == pytest.approx(headline, abs=2 * MS)  # console table
    if doc["memory"] is not None and doc["calibration"]["memory_factor"]:  # the per-stage peaks are the peak's
        peak = float(re.search(r"memory peak\s+([\d,.]+) GiB", console).group(1).replace(",", ""))
        assert max(_stage_column(console, -1)) == pytest.approx(peak, abs=0.051)
    trace = json.loads((tmp_path / "t.json").read_text())
    end_us = max(e["ts"] + e["dur"] for e in trace["traceEvents"] if e["ph"] == "X")
    assert end_us == pytest.approx(step * 1e6, abs=1.0)  # the trace's step ends at the headline
    assert trace["otherData"]["step_time_s"] == step
    assert trace["otherData"]["calibration"]["uncalibrated_step_time_s"] < step  # labelled in its metadata
    page = (tmp_path / "r.html").read_text()
    data = json.loads(re.search(r'<script id="report-data" type="application/json">(.*?)</script>', page,
                                re.S).group(1))
    assert data["timeline"]["total_us"] == pytest.approx(step * 1e6, abs=1.0)  # the HTML timeline too
    for ms in re.findall(r'<td class="n">([\d,.]+)</td><td class="n">([\d,.]+)</td>', page):
        busy, idle = (float(x.replace(",", "")) for x in ms)
        assert busy + idle == pytest.approx(makespan * 1e3, abs=2 * MS)  # the HTML stage table


def _project(tmp_path: Path, args: list[str], capsys) -> str:
    out = [f"--html={tmp_path / 'r.html'}", f"--trace={tmp_path / 't.json'}", f"--json={tmp_path / 'p.json'}"]
    assert main(["project", *args, *out]) == 0
    return capsys.readouterr().out


def test_tiny_pipeline_calibrated_every_figure_agrees(tmp_path: Path, capsys):
    """A synthetic cluster 1.6x slower in its kernels, 12 ms per step more: PP 2 (a simulated timeline)."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(tiny_recipe(micro_batch_size=1, global_batch_size=64, tensor_model_parallel_size=1,
                                  pipeline_model_parallel_size=2))
    loaded = load_recipe(recipe, cluster="h100", nodes=1)
    parts = parts_of(project(loaded.model, loaded.execution, loaded.system, None).breakdown)
    step = 1.6 * parts.kernels_s + parts.links_s
    log = tmp_path / "run.log"
    log.write_text("\n".join(megatron_log_lines([3 * step, 2 * step] + [step] * 8, [], global_batch_size=64,
                                                end=datetime(2026, 1, 1))) + "\n")
    store = str(tmp_path / "store.sqlite")
    target = ["--cluster", "h100", "--nodes", "1", "--analytic", "--store", store]
    assert main(["calibrate", str(recipe), str(log), *target]) == 0
    capsys.readouterr()
    console = _project(tmp_path, [str(recipe), *target], capsys)
    assert "calibrated" in console
    _check_one_truth(tmp_path, console)


@pytest.mark.skipif(not (LLAMA_LOG.is_file() and PRIMUS_CONFIGS.is_dir()),
                    reason="shared/validation logs or shared/primus_configs absent")
def test_real_primus_log_calibrated_every_figure_agrees(tmp_path: Path, capsys):
    """The issue's report: headline 507.7 ms, the stage table 247.1 ms, HTML and trace uncalibrated."""
    store = str(tmp_path / "store.sqlite")
    target = [str(LLAMA), "--config-root", str(PRIMUS_CONFIGS), "--cluster", "mi355x", "--nodes", "1",
              "--store", store]
    assert main(["calibrate", target[0], str(LLAMA_LOG), *target[1:]]) == 0
    capsys.readouterr()
    console = _project(tmp_path, target, capsys)
    assert "507.7 ms" in console
    _check_one_truth(tmp_path, console)
