"""``project --trace FILE``: a Chrome trace (JSON trace event format) whose events tile the simulated step."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from primus_ext.cli import main
from primus_ext.report.trace import THREADS, chrome_trace

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _check(doc: dict, step_s: float, stages: int) -> None:
    events = doc["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete and all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
    assert {e["tid"] for e in complete} <= set(THREADS.values())
    names = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {(r + 1, f"stage {r}") for r in range(stages)}
    per_stage = defaultdict(float)
    for e in complete:
        per_stage[e["pid"]] += e["dur"]
    # the three threads of a stage partition its step: the durations add up to the step time (µs)
    assert set(per_stage) == set(range(1, stages + 1))
    for total in per_stage.values():
        assert total == pytest.approx(step_s * 1e6, rel=1e-6)
    assert max(e["ts"] + e["dur"] for e in complete) == pytest.approx(step_s * 1e6, rel=1e-9)


def test_trace_of_deepseek_v3_covers_the_step(deepseek_v3):
    doc = chrome_trace(deepseek_v3)
    _check(doc, deepseek_v3.step_time_s, deepseek_v3.execution.pp)
    cats = {e.get("cat") for e in doc["traceEvents"]}
    assert {"forward", "backward", "ep", "pp", "bubble", "dp_grad"} <= cats
    json.dumps(doc)


def test_project_writes_the_trace(tmp_path: Path, capsys):
    out = tmp_path / "step.json"
    code = main(["project", str(RECIPES / "llama3.1_70B-pretrain.yaml"), "--compute", "analytic",
                 "--trace", str(out)])
    assert code == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    step_ms = float(doc["otherData"]["step_time_s"]) * 1e3
    assert "wrote" in capsys.readouterr().err
    _check(doc, step_ms / 1e3, 8)
    ops = [e for e in doc["traceEvents"] if e.get("cat") in ("forward", "backward")]
    assert len(ops) == 2 * 8 * 128 * 5  # F and B of 128 micro-batches x 5 chunks on 8 stages
