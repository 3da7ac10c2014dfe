"""The four real logs of shared/validation/logs against the hand-read figures of its index.csv (skipped when absent)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from primus_ext.logs import read_log

LOGS = Path("/work/shared/validation/logs")
INDEX = LOGS / "index.csv"
pytestmark = pytest.mark.skipif(not INDEX.is_file(), reason="shared/validation/logs not present")


def _rows() -> dict[str, dict[str, str]]:
    with INDEX.open(newline="") as f:
        return {r["file"]: r for r in csv.DictReader(f)}


def _log(prefix: str):
    rows = _rows()
    name = next(n for n in rows if n.startswith(prefix))
    if not (LOGS / name).is_file():
        pytest.skip(f"{name} absent")
    return read_log(LOGS / name), rows[name]


@pytest.mark.parametrize("prefix, fmt", [("primus-llama", "primus"), ("primus-dsv2", "primus"),
                                         ("megatron-bridge", "megatron-bridge"), ("nemo2", "nemo")])
def test_step_time_within_one_percent_of_the_hand_read_figure(prefix: str, fmt: str) -> None:
    log, row = _log(prefix)
    assert log.format == fmt
    expected_ms = float(row["measured_step_time_ms"])
    assert log.stats.median_s * 1000 == pytest.approx(expected_ms, rel=0.01)


@pytest.mark.parametrize("prefix", ["primus-llama", "primus-dsv2", "megatron-bridge"])
def test_peak_reserved_memory_exactly(prefix: str) -> None:
    log, row = _log(prefix)
    reserved_mb = float(re.search(r"([\d.]+) max reserved", row["measured_peak_mem_mb"]).group(1))
    allocated_mb = float(re.search(r"([\d.]+) max alloc", row["measured_peak_mem_mb"]).group(1))
    assert log.peak_reserved_bytes == round(reserved_mb * 2**20)
    assert log.peak_allocated_bytes / 2**20 == pytest.approx(allocated_mb, abs=0.01)


def test_primus_doubled_lines_are_deduplicated_and_throughput_read() -> None:
    log, row = _log("primus-llama")
    assert [it.index for it in log.iterations] == list(range(1, 13))
    assert (log.stats.first, log.stats.last, log.stats.n) == (3, 12, 10)
    assert log.stats.excluded == ((1, "warm-up"), (2, "warm-up"))
    assert log.tflops_per_gpu == pytest.approx(float(row["measured_tflops_per_gpu"]), rel=0.01)
    assert log.tokens_per_s_per_gpu == pytest.approx(64545.5, rel=0.001)  # index.csv notes
    assert log.framework_version == "megatron-core 0.16.0rc0"
    assert (log.global_batch_size, log.seq_length) == (32, 8192)
    assert log.config["tensor_model_parallel_size"] == "1"
    assert log.restarts == 0 and not log.flags


def test_dsv2_profiled_step_is_kept_below_the_spike_threshold() -> None:
    log, _row = _log("primus-dsv2")
    assert (log.stats.first, log.stats.last) == (3, 20)
    assert log.tokens_per_s_per_gpu == pytest.approx(14309.5, rel=0.001)
    assert (log.global_batch_size, log.seq_length) == (896, 4096)


def test_bridge_impossible_tflops_flagged_and_only_line_averaged() -> None:
    log, _ = _log("megatron-bridge")
    assert log.tflops_per_gpu is None
    assert any(f.field == "TFLOP/s/GPU" and f.value == "59892.5" for f in log.flags)
    assert len(log.iterations) == 1 and log.iterations[0].averaged_over == 10
    assert log.stats.averaged and log.stats.n == 1
    assert log.global_batch_size == 512


def test_nemo_negative_step_and_spike_excluded_and_listed() -> None:
    log, _ = _log("nemo2")
    reasons = dict(log.stats.excluded)
    assert reasons[8].startswith("spike") and reasons[9].startswith("non-positive")
    assert reasons[0] == reasons[1] == "warm-up"
    assert (log.stats.first, log.stats.last, log.stats.n) == (2, 19, 16)
    assert any(f.field == "step time" and f.value.startswith("-12.71") for f in log.flags)
    assert log.peak_reserved_bytes is None and log.global_batch_size == 64
