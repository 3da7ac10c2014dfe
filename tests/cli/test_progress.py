"""Progress lines on stderr: the estimate's arithmetic, the lines written off a terminal, and the layer hook."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from primus_ext.cli._progress import LayerProgress, ProgressLine, clock, eta_s


def test_eta_is_the_mean_unit_times_the_units_left():
    assert eta_s(2, 5, [10.0, 20.0]) == pytest.approx(45.0)
    assert eta_s(0, 3, [], expected_unit_s=4.0) == pytest.approx(12.0)  # before any unit: the caller's estimate
    assert eta_s(0, 3, []) is None and eta_s(3, 3, [1.0]) == 0.0
    assert (clock(None), clock(62), clock(3723)) == ("?", "1:02", "1:02:03")


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_lines_off_a_terminal_carry_elapsed_and_eta():
    out, now = io.StringIO(), FakeClock()
    with ProgressLine("training", 3, expected_unit_s=10.0, stream=out, now=now, label="starting") as bar:
        now.t += 12
        bar.update(1, label="iteration 1", unit_s=8.0)  # the unit's own duration wins over the clock's
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 2
    assert "0/3  starting" in lines[0] and "ETA ~0:30" in lines[0]  # 3 x the expected 10 s
    assert "1/3  iteration 1" in lines[1] and "elapsed 0:12" in lines[1] and "ETA 0:16" in lines[1]


def test_layer_progress_follows_measure_many_calls():
    out = io.StringIO()
    hook = LayerProgress()
    dense, output = SimpleNamespace(kind="dense"), SimpleNamespace(kind="output")
    hook.bar = ProgressLine("measuring layers", 2, stream=out).__enter__()
    for done, shape in ((0, dense), (1, output), (2, output)):
        hook(done, 2, shape)
    text = out.getvalue()
    assert "0/2  dense" in text and "1/2  output" in text and "2/2  done" in text
    assert hook.bar.enabled is False  # closed at the end


def test_a_polled_count_reaches_the_heartbeat(monkeypatch):
    """Work without a hook (the tuner's search): the ticker reads the count and the heartbeat line carries it."""
    import time

    import primus_ext.cli._progress as progress

    monkeypatch.setattr(progress, "TICK_S", 0.01)
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.0)
    out, spent = io.StringIO(), [0]
    with ProgressLine("tune", 10, stream=out, poll=lambda: spent[0]):
        spent[0] = 7
        deadline = time.monotonic() + 5
        while "7/10" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert any(line.startswith("  still tune") and "7/10" in line for line in out.getvalue().splitlines())


def test_phase_line_names_each_step_without_an_estimate():
    from primus_ext.cli._progress import PhaseLine

    out = io.StringIO()
    with PhaseLine("projection-only", ("a", "b", "c"), stream=out) as phases:
        phases("a")
        phases("c")
        phases.close()  # another line may take over ...
        phases("b")     # ... and the steps go on after it
    lines = out.getvalue().splitlines()
    assert ["0/3  a" in lines[0], "2/3  c" in lines[1], "1/3  b" in lines[2]] == [True] * 3 and len(lines) == 3
    assert not any("ETA" in line for line in lines) and all("elapsed" in line for line in lines)
