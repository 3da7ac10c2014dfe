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
