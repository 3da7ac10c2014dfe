"""Progress on stderr with elapsed time and an estimate of what is left: no silent minutes.

    with ProgressLine("training", total=3, expected_unit_s=12.0) as bar:   # ETA from the projection first
        for i in range(3):
            step()
            bar.update(i + 1, label=f"iteration {i + 1}")
    # stderr: "training  [######......]  2/3  iteration 2  elapsed 0:25  ETA ~0:12"

On a terminal the line is redrawn in place and a ticker refreshes the clock every second, so a long unit
(one slow layer, one training step) still shows time passing; ``poll`` lets the ticker read the count itself
(the tuner's projections spent) where the work has no hook to call ``update``. ``PhaseLine`` shows the steps
of a command (projecting, writing the report, drawing the PNG) with the elapsed time and no estimate.
Anywhere else (a log file, CI) it writes one line per update and a "still ..." line every ``HEARTBEAT_S``
seconds. Always stderr: stdout stays the command's result (JSON included). The estimate is plain arithmetic:
the mean duration of the units done so far (or the ``unit_s`` each update reports) times the units left;
before the first unit ends, the expected duration given by the caller (a projection), marked with ``~``.
(Not ``rich.progress``: it is not a dependency here, and it draws nothing on a stream that is not a terminal,
which is where silence hurts.)
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TextIO

TICK_S = 1.0
"""Redraw period on a terminal (seconds)."""
HEARTBEAT_S = 30.0
"""Off a terminal: a "still ..." line after this many seconds without an update."""
BAR_WIDTH = 20


def clock(seconds: float | None) -> str:
    """``1:02:03`` / ``2:03`` / ``?``."""
    if seconds is None:
        return "?"
    s = max(0, round(seconds))
    hours, rest = divmod(s, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def eta_s(done: int, total: int, unit_s: Sequence[float], expected_unit_s: float | None = None) -> float | None:
    """Seconds left: the mean of the finished units' durations times the units left; before any unit
    finished, ``expected_unit_s`` times them (``None`` when there is nothing to go on)."""
    left = max(0, total - done)
    if left == 0:
        return 0.0
    if unit_s:
        return left * sum(unit_s) / len(unit_s)
    return None if expected_unit_s is None else left * expected_unit_s


class ProgressLine:
    """One task's progress on ``stream`` (stderr); see the module docstring. Thread-safe updates."""

    def __init__(self, title: str, total: int, *, expected_unit_s: float | None = None, label: str = "",
                 enabled: bool = True, stream: TextIO | None = None, now: Callable[[], float] = time.monotonic,
                 poll: Callable[[], int] | None = None, eta: bool = True):
        """``poll``: the units done, read at every tick (drawn on a terminal, in the heartbeat elsewhere);
        ``eta``: show the estimate of what is left (not for steps of unlike lengths)."""
        self.title, self.total, self.expected = title, total, expected_unit_s
        self.poll, self.eta = poll, eta
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and total > 0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.now = now
        self.start = self.last = now()
        self.done, self.label = 0, label
        self.unit_s: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> ProgressLine:
        """Start the clock and the ticker (again only after ``close``)."""
        self.start = self.last = self.now()
        if self.enabled and self._ticker is None:
            self._write(self.line())
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, done: int, *, label: str = "", unit_s: float | None = None) -> None:
        """``done`` units finished (of ``total``); ``unit_s``: the duration of the unit just finished,
        when the caller knows it better than the time between two updates."""
        with self._lock:
            t = self.now()
            finished = done - self.done
            if finished > 0:
                each = unit_s if unit_s is not None else (t - self.last) / finished
                self.unit_s += [each] * finished
            self.done, self.label, self.last = done, label or self.label, t
            if self.enabled:
                self._write(self.line())

    def line(self) -> str:
        elapsed = self.now() - self.start
        left = eta_s(self.done, self.total, self.unit_s, self.expected)
        filled = BAR_WIDTH * min(self.done, self.total) // self.total if self.total else 0
        eta = f"ETA {'~' if left is not None and not self.unit_s and self.done < self.total else ''}{clock(left)}"
        label = f"  {self.label}" if self.label else ""
        return (f"{self.title}  [{'#' * filled}{'.' * (BAR_WIDTH - filled)}]  {self.done}/{self.total}{label}  "
                f"elapsed {clock(elapsed)}" + (f"  {eta}" if self.eta else ""))

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2 * TICK_S)
            self._ticker = None
            if self.tty:
                self._write_raw("\n")
        self.enabled = False

    def _tick(self) -> None:
        quiet_since = self.now()
        while not self._stop.wait(TICK_S):
            with self._lock:
                if self.poll is not None:
                    self._polled(self.poll())
                if self.tty:
                    self._write(self.line())
                elif self.now() - max(self.last, quiet_since) >= HEARTBEAT_S:
                    quiet_since = self.now()
                    self._write_raw(f"  still {self.line()}\n")

    def _polled(self, done: int) -> None:
        """A count read by ``poll``: the units since the last count share the time since it."""
        done = min(done, self.total)
        if done > self.done:
            t = self.now()
            self.unit_s += [(t - self.last) / (done - self.done)] * (done - self.done)
            self.done, self.last = done, t

    def _write(self, text: str) -> None:
        self._write_raw(f"\r{text}\x1b[K" if self.tty else text + "\n")

    def _write_raw(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


class LayerProgress:
    """``measure_many``'s ``progress(done, total, shape)`` as a ``ProgressLine`` (opened on the first call, closed
    when ``done == total``): the layer being measured, elapsed time and an estimate from the layers done."""

    def __init__(self, title: str = "measuring layers", *, enabled: bool = True):
        self.title, self.enabled = title, enabled
        self.bar: ProgressLine | None = None

    def __call__(self, done: int, total: int, shape: object) -> None:
        kind = getattr(shape, "kind", "")
        if self.bar is None:
            self.bar = ProgressLine(self.title, total, label=kind, enabled=self.enabled).__enter__()
            if done == 0:
                return
        self.bar.update(done, label=kind if done < total else "done")
        if done >= total:
            self.bar.close()


class PhaseLine:
    """The steps of one command as a ``ProgressLine`` without an estimate: ``phase("projecting")`` opens it (again
    after ``close``, e.g. around another progress line) and moves it to that step of ``phases``."""

    def __init__(self, title: str, phases: Sequence[str], *, enabled: bool = True, stream: TextIO | None = None,
                 now: Callable[[], float] = time.monotonic):
        self.title, self.phases, self.enabled, self.stream, self.now = title, tuple(phases), enabled, stream, now
        self.bar: ProgressLine | None = None

    def __call__(self, phase: str) -> None:
        done = self.phases.index(phase) if phase in self.phases else None
        if self.bar is None:
            self.bar = ProgressLine(self.title, len(self.phases), label=phase, enabled=self.enabled,
                                    stream=self.stream, now=self.now, eta=False)
            self.bar.done = done or 0
            self.bar.__enter__()  # draws the line
            return
        self.bar.update(self.bar.done if done is None else done, label=phase)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> PhaseLine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
