"""Synthetic logs for each awkward case (inline fixtures in Megatron-core 0.16's training_log layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus_ext.errors import PrimusExtError
from primus_ext.logs import LogError, read_log
from primus_ext.logs.read import MAX_LINE_CHARS


def it_line(i: int, ms: float, *, total: int = 20, tflops: float | None = 400.0, gbs: int = 32) -> str:
    """One line as megatron/training/training.py (core_v0.16.1) lays it out."""
    thr = f" throughput per GPU (TFLOP/s/GPU): {tflops:.1f} |" if tflops is not None else ""
    return (f" [2025-01-01 00:00:{i:02d}.000000] iteration {i:8d}/{total:8d} | consumed samples: {i * gbs:12d} |"
            f" elapsed time per iteration (ms): {ms:.1f} |{thr} learning rate: 1.000000E-05 |"
            f" global batch size: {gbs:5d} | lm loss: 1.000000E+01 | loss scale: 1.0 | grad norm: 1.000 |"
            " number of skipped iterations:   0 | number of nan iterations:   0 |")


def mem_line(rank: int, after: int, reserved: float) -> str:
    return (f"[Rank {rank}] (after {after} iterations) memory (MB) | allocated: 100.00 | max allocated: 200.00"
            f" | reserved: {reserved:.2f} | max reserved: {reserved:.2f}")


def run(times: list[float], **kw) -> list[str]:
    return [it_line(i, ms, **kw) for i, ms in enumerate(times, start=1)]


STEADY = [900.0, 700.0, 500.0, 510.0, 490.0, 505.0, 495.0, 500.0]


def test_plain_megatron_lines_median_of_the_stable_segment() -> None:
    log = read_log([*run(STEADY), mem_line(0, 2, 4096.0)])
    assert log.format == "megatron"
    assert log.stats.median_s == pytest.approx(0.5)
    assert log.stats.excluded == ((1, "warm-up"), (2, "warm-up"))
    assert (log.stats.first, log.stats.n) == (3, 6)
    assert log.tflops_per_gpu == pytest.approx(400.0)
    assert log.peak_reserved_bytes == 4096 * 2**20 and log.peak_allocated_bytes == 200 * 2**20
    assert log.memory[0].rank == 0 and log.memory[0].after_iterations == 2
    assert log.iterations[0].total == 20 and log.global_batch_size == 32


def test_memory_report_of_older_releases_unformatted_floats() -> None:
    # core_v0.15's report_memory prints the raw float division (megatron/training/utils.py)
    old = ("[Rank 3] (after 10 iterations) memory (MB) | allocated: 9554.87939453125 | max allocated: "
           "12003.60400390625 | reserved: 12232.0 | max reserved: 12232.0")
    log = read_log([*run(STEADY), old, mem_line(0, 10, 100.0)])
    assert log.peak_reserved_bytes == 12232 * 2**20
    assert log.peak_allocated_bytes == round(12003.60400390625 * 2**20)
    assert {m.rank for m in log.memory} == {0, 3}


def test_older_release_without_throughput_and_with_skipped_samples() -> None:
    lines = [it_line(i, 500.0, tflops=None).replace("|", "| skipped samples:            0 |", 2)
             for i in range(1, 6)]
    log = read_log(lines)
    assert log.stats.median_s == pytest.approx(0.5) and log.tflops_per_gpu is None


@pytest.mark.parametrize("prefix", ["[rank-7/8] ", "[default0]:", "0: ", "2025-01-01T00:00:00.123Z ",
                                    "\x1b[32m[20260511 02:18:01]\x1b[0m[\x1b[36mrank-0/8\x1b[0m] "])
def test_prefixes_timestamps_and_ansi_codes(prefix: str) -> None:
    log = read_log([prefix + line for line in run(STEADY)])
    assert log.stats.median_s == pytest.approx(0.5) and len(log.iterations) == len(STEADY)


def test_lines_printed_twice_and_interleaved_ranks_count_once() -> None:
    lines = run(STEADY)
    doubled = [x for line in lines for x in (f"[default0]:{line}", f"[default7]:{line}")]
    interleaved = [*doubled[:5], doubled[6], doubled[5], *doubled[7:]]
    log = read_log(interleaved)
    assert [it.index for it in log.iterations] == list(range(1, len(STEADY) + 1))
    assert log.restarts == 0


def test_ranks_printing_their_own_timer_interleaved_are_not_restarts() -> None:
    lines = []
    for i, ms in enumerate(STEADY, start=1):
        lines.append(f"[default0]:{it_line(i, ms)}")
        if i > 1:
            lines.append(f"[default1]:{it_line(i - 1, STEADY[i - 2] + 3)}")  # rank 1 lags one line behind
    log = read_log(lines)
    assert log.restarts == 0 and [it.step_time_s for it in log.iterations] == pytest.approx(
        [t / 1000 for t in STEADY])


def test_restart_in_one_file_uses_the_last_run() -> None:
    first = run([900.0, 800.0, 1000.0, 1000.0, 1000.0])
    second = run(STEADY)
    log = read_log([*first, "Traceback ... restarting", *second])
    assert log.restarts == 1
    assert log.stats.median_s == pytest.approx(0.5)
    assert log.iterations[0].line == len(first) + 2


def test_memory_reports_of_an_earlier_run_are_not_used() -> None:
    log = read_log([*run([800.0] * 3), mem_line(0, 2, 9000.0), *run(STEADY), mem_line(0, 2, 4000.0)])
    assert log.restarts == 1 and log.peak_reserved_bytes == 4000 * 2**20


def test_truncated_last_line_is_flagged_not_used(tmp_path: Path) -> None:
    last = it_line(9, 50000.0)
    text = "\n".join(run(STEADY)) + "\n" + last[:last.index("(ms): 5") + 7]  # "... (ms): 5" cut mid-number
    path = tmp_path / "cut.log"
    path.write_text(text)
    log = read_log(path)
    assert [it.index for it in log.iterations][-1] == len(STEADY)
    assert any("truncated" in f.why for f in log.flags)


def test_crlf_and_non_utf8_bytes(tmp_path: Path) -> None:
    path = tmp_path / "win.log"
    body = "\r\n".join(run(STEADY)).encode() + b"\r\n\xff\xfe garbage \x80\r\n"
    path.write_bytes(body.replace(b"learning rate", b"learning\xe9 rate", 1))
    log = read_log(path)
    assert log.stats.median_s == pytest.approx(0.5) and len(log.iterations) == len(STEADY)


def test_text_with_newlines_is_read_as_the_log() -> None:
    assert read_log("\n".join(run(STEADY))).stats.n == 6


def test_over_long_line_is_cut_and_the_rest_still_read(tmp_path: Path) -> None:
    path = tmp_path / "long.log"
    with path.open("w") as f:
        f.write("x" * (3 * MAX_LINE_CHARS) + "\n")
        f.write("\n".join(run(STEADY)) + "\n")
    log = read_log(path)
    assert len(log.iterations) == len(STEADY) and log.iterations[0].line == 2


def test_large_file_streams(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    noise = "[rank-3/8] some other output line that is not an iteration | value: 1\n" * 25  # 52 000 lines: read whole
    with path.open("w") as f:
        for i in range(1, 2001):
            f.write(noise + it_line(i, 500.0 + (i % 3), total=2000) + "\n")
    log = read_log(path)
    assert log.stats.n == 1998 and log.stats.median_s == pytest.approx(0.501)


def test_spike_and_non_positive_excluded_listed_and_flagged() -> None:
    times = [900.0, 700.0, 500.0, 510.0, 4000.0, 0.0, 490.0, -3.0, 500.0]
    log = read_log(run(times))
    reasons = dict(log.stats.excluded)
    assert reasons[5].startswith("spike (8.0x")
    assert reasons[6].startswith("non-positive") and reasons[8].startswith("non-positive")
    assert log.stats.median_s == pytest.approx(0.5) and log.stats.n == 4
    assert {f.line for f in log.flags} == {6, 8}


def test_not_settled_leading_steps_are_warm_up() -> None:
    log = read_log(run([9000.0, 8000.0, 2000.0, 500.0, 500.0, 510.0, 490.0]))
    assert dict(log.stats.excluded)[3].startswith("warm-up (not settled")
    assert log.stats.first == 4


def test_impossible_tflops_and_mfu_flagged_not_used() -> None:
    lines = run(STEADY)
    lines[3] = it_line(4, 505.0, tflops=99999.0)
    lines[4] = lines[4].replace("learning rate", "MFU: 120.5 % | learning rate")
    log = read_log(lines)
    assert log.iterations[3].tflops_per_gpu is None and log.tflops_per_gpu == pytest.approx(400.0)
    assert {f.field for f in log.flags} == {"TFLOP/s/GPU", "MFU"}


def test_primus_instant_average_pairs_and_tokens() -> None:
    lines = [it_line(i, 0).replace("(ms): 0.0", f"(ms): {ms}/{ms + 50}").replace(
        "| learning rate", f"| tokens per GPU (tokens/s/GPU): {60000 + i}.0/1.0 | learning rate")
        for i, ms in enumerate(STEADY, start=1)]
    log = read_log(lines)
    assert log.format == "primus" and log.stats.median_s == pytest.approx(0.5)
    assert log.tokens_per_s_per_gpu == pytest.approx(60005.5)


def test_log_interval_marks_averaged_lines() -> None:
    args = ["------------------------ arguments ------------------------",
            "  log_interval .................................... 5",
            "  seq_length ...................................... 4096",
            "-------------------- end of arguments ---------------------"]
    log = read_log([*args, it_line(5, 700.0), it_line(10, 500.0), it_line(15, 510.0)])
    assert log.config == {"log_interval": "5", "seq_length": "4096"} and log.seq_length == 4096
    assert [it.averaged_over for it in log.iterations] == [5, 5, 5]
    assert log.stats.excluded == ((5, "warm-up (averages iterations 1-5)"),)
    assert not log.stats.averaged and log.stats.n == 2


def test_nemo_lines() -> None:
    lines = [f"Training epoch 0, iteration {i}/5 | lr: 1e-06 | global_batch_size: 64 | global_step: {i} | "
             f"train_step_timing in s: {t}" for i, t in enumerate([3.0, 0.6, 0.5, 0.5, 0.52, 0.48])]
    log = read_log(lines)
    assert log.format == "nemo" and log.stats.first == 2 and log.stats.median_s == pytest.approx(0.5)
    assert log.global_batch_size == 64


def test_unreadable_log_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(LogError, match=r"no iteration lines: expected Megatron.*train_step_timing in s"):
        read_log(["hello", "world"])
    with pytest.raises(LogError, match="no iteration with a positive step time"):
        read_log(run([0.0, -1.0]))
    with pytest.raises(PrimusExtError, match="cannot read training log"):
        read_log(tmp_path / "absent.log")
