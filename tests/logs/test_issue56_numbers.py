"""Issue 56, part 4: a number in a training log longer than Python converts (a 5 001-digit iteration, rank, interval
or batch; a figure past a float's range; ``e`` where a figure goes) is no number: the line is read as any line that
is not a log line, never a ``ValueError`` / ``OverflowError`` traceback."""

from __future__ import annotations

import pytest
from test_read_log import it_line, mem_line, run

from primus_ext.logs import read_log

HUGE = "9" * 5001  # Python's int() refuses more than 4 300 digits (sys.get_int_max_str_digits)
STEADY = [900.0, 700.0, 500.0, 510.0, 490.0, 505.0, 495.0, 500.0]


@pytest.mark.parametrize("line", [
    it_line(9, 500.0).replace("iteration        9/", f"iteration {HUGE}/"),
    it_line(9, 500.0).replace("/      20 |", f"/{HUGE} |"),
    mem_line(0, 2, 4096.0).replace("[Rank 0]", f"[Rank {HUGE}]"),
    mem_line(0, 2, 4096.0).replace("after 2 iterations", f"after {HUGE} iterations"),
    f" log_interval ........ {HUGE}",
    f"[rank-{HUGE}/8] " + it_line(9, 500.0),
    " Step Time : 4.65s GPU utilization: e TFLOP/s/GPU",
    f" Step Time : 4.65s GPU utilization: 1{'0' * 400} TFLOP/s/GPU",
])
def test_a_number_no_int_or_float_holds_is_no_number(line: str) -> None:
    log = read_log([*run(STEADY), line])
    assert log.stats.median_s == pytest.approx(0.5)  # the steady lines around it are read as before
    assert log.global_batch_size == 32


def test_arguments_with_huge_values_are_not_read() -> None:
    args = ["------------------------ arguments ------------------------",
            f"  global_batch_size ............................... {HUGE}",
            f"  log_interval .................................... {HUGE}",
            f"  seq_length ...................................... {HUGE}",
            "  seq_length ...................................... ²",
            "-------------------- end of arguments ---------------------"]
    log = read_log([*args, *run(STEADY)])
    assert log.seq_length is None and log.global_batch_size == 32


def test_a_step_time_past_a_floats_range_is_flagged_not_used() -> None:
    lines = [*run(STEADY), it_line(9, 500.0).replace("(ms): 500.0", f"(ms): 1{'0' * 400}.0")]
    log = read_log(lines)
    assert max(it.index for it in log.iterations) == 8
    assert any(f.field == "step time" for f in log.flags)


@pytest.mark.parametrize("line", [
    f"using world size: {HUGE}, data-parallel size: 8, context-parallel size: 1",
    f"setting number of microbatches to constant {HUGE}",
    f"[Primus:Env] rank=0, world_size={HUGE}",
    f"  num_layers ...................................... {HUGE}",
])
def test_a_configuration_dump_with_a_huge_count_is_read_without_it(line: str) -> None:
    """The configuration-dump reader (``logs.dump``) takes counts through the same bound as the iteration lines."""
    log = read_log([line, *run(STEADY)])
    assert log.stats.median_s == pytest.approx(0.5)
    assert log.run.world_size in (None, 8) and log.run.num_layers is None
