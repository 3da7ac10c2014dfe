"""Issue 47: the log reader refuses what is not a file, costs the same per line whatever came before, and reads a
long log at its head and its tail (bounded time and memory at any size)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest
from test_read_log import it_line

from primus_ext.logs import LogError, read_log, window
from primus_ext.logs.stats import _suffix_medians, stable_stats


@pytest.mark.parametrize("make", ["fifo", "/dev/zero", "/dev/urandom", "folder"])
def test_what_is_not_a_regular_file_is_refused_before_a_byte(tmp_path: Path, make: str) -> None:
    path = tmp_path / "log"
    if make == "fifo":
        os.mkfifo(path)  # a FIFO with no writer: opening it for reading used to wait forever
    elif make == "folder":
        path.mkdir()
    else:
        path = Path(make)
    with pytest.raises(LogError, match=r"not a regular file|folder"):
        read_log(path)


def test_a_long_log_is_read_at_its_head_and_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window, "HEAD_BYTES", 20_000)
    monkeypatch.setattr(window, "TAIL_BYTES", 60_000)
    path = tmp_path / "train.log"
    with path.open("w") as fh:
        fh.write("".join(it_line(i, 1000.0 + i % 7, total=2000) + "\n" for i in range(1, 2001)))
    log = read_log(path)
    n_line = len(it_line(1, 1.0, total=2000)) + 1
    assert log.iterations[-1].index == 2000 and len(log.iterations) < 2000 * 80_000 // (2000 * n_line) + 10
    gap = log.flags[0]
    assert gap.field == "log" and "not read" in gap.why
    # line numbers after the gap stay exact (the middle's newlines counted)
    assert all(it.line == it.index for it in log.iterations)
    assert log.stats.median_s == pytest.approx(statistics.median(1.0 + (i % 7) / 1000 for i in range(3, 2001)),
                                               rel=2e-3)


def test_short_lines_are_bounded_by_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window, "HEAD_LINES", 100)
    monkeypatch.setattr(window, "TAIL_LINES", 300)
    path = tmp_path / "train.log"
    path.write_text("\n" * 100_000 + "".join(it_line(i, 1000.0) + "\n" for i in range(1, 21)))
    log = read_log(path)
    assert [it.index for it in log.iterations] == list(range(1, 21))
    assert log.flags[0].field == "log" and log.iterations[0].line == 100_001


def test_one_endless_line_costs_its_cap(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    with path.open("wb") as fh:
        fh.truncate(200 << 20)  # 200 MiB of NUL bytes, one line, sparse
    with pytest.raises(LogError, match="no iteration lines"):
        read_log(path)


def test_suffix_medians_match_their_definition() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 0.5]
    assert _suffix_medians(values) == [statistics.median(values[i:]) for i in range(len(values))]


def test_a_slow_first_half_is_settled_in_one_pass() -> None:
    from test_read_log import run

    from primus_ext.logs import read_log as read

    times = [3000.0] * 2000 + [1000.0] * 2000  # each leading slow step used to recompute a median of the rest
    stats = stable_stats(read(run(times, total=4000)).iterations)
    assert stats is not None and stats.median_s == pytest.approx(1.0) and stats.first == 2001
