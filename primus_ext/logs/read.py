"""``read_log``: stream a training log line by line into a ``TrainingLog``.

Bounded: only a regular file is read (a FIFO, ``/dev/zero`` or ``/dev/urandom`` is refused before the first byte,
``files.open_input``); of a long one only its head and tail (``window``: at most 32 MiB and 70 000 lines, the
middle skipped and flagged), each line cut to ``MAX_LINE_CHARS``; at most ``MAX_ITERATIONS`` iterations and
``dump.MAX_CONFIG`` arguments are kept. Linear: each line costs the same whatever came before it (the current run's
highest iteration is kept as it grows, not recomputed per line; only the current and the last finished run are
held), so any log costs a few seconds and well under 1 GiB.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import IO

from primus_ext.errors import cut
from primus_ext.logs import lines as L
from primus_ext.logs.dump import DumpReader, run_config
from primus_ext.logs.records import Iteration, LogError, LogFlag, MemoryReport, TrainingLog
from primus_ext.logs.stats import stable_median, stable_stats
from primus_ext.logs.window import MAX_LINE_CHARS, Gap, file_lines

MAX_LOG_BYTES = 1 << 40
"""1 TiB: a larger file is refused unread; any size below costs the same (``window``: head and tail only)."""
MAX_ITERATIONS = 1_000_000
MAX_ECHOES = 10_000
MAX_DEVICES = 8
"""Distinct GPU device names kept (a node has one kind; a mixed log names a few)."""
MAX_RANK_LAG = 2
"""Another rank's line of the same iteration may arrive this many iterations late (interleaved output)."""
"""Repeated lines remembered since the last new one (a restart's first lines may repeat the old run's)."""

MISSING = ("no iteration lines: expected Megatron/Primus 'iteration N/M | ... | elapsed time per iteration (ms): T |', "
           "NeMo 'iteration N/M | ... | train_step_timing in s: T' (Megatron-Bridge prints Megatron's line)")


@cache
def max_dense_tflops() -> float:
    """The largest dense peak (any precision) of any GPU profile: a printed TFLOP/s/GPU above it is impossible."""
    from primus_ext.hardware import list_profiles, load_gpu

    peaks = [getattr(load_gpu(name), f.name) for name in list_profiles()
             for f in dataclasses.fields(load_gpu(name)) if f.name.endswith("_dense_tflops")]
    return max(p for p in peaks if isinstance(p, int | float))


Line = tuple[int, str, bool]
"""(1-based number, text, complete): ``complete`` is False for an unterminated last line."""


def _source(path_or_lines: str | os.PathLike[str] | Iterable[str]) -> tuple[Iterator[Line], IO[bytes] | None,
                                                                          list[Gap]]:
    if isinstance(path_or_lines, str) and "\n" in path_or_lines:
        path_or_lines = path_or_lines.splitlines()
    if isinstance(path_or_lines, str | os.PathLike):
        from primus_ext.files import InputRefused, open_input

        path = Path(path_or_lines)
        try:  # a regular file only: a FIFO or a device is refused before its first byte
            raw = open_input(path, max_bytes=MAX_LOG_BYTES, what="training log")
        except InputRefused as err:
            raise LogError(str(err)) from None
        except (OSError, ValueError) as err:
            raise LogError(f"cannot read training log {cut(path)}: {getattr(err, 'strerror', None) or err}") from None
        lines, gaps = file_lines(raw)
        return lines, raw, gaps
    return ((n, str(s)[:MAX_LINE_CHARS], True) for n, s in enumerate(path_or_lines, start=1)), None, []


class _Reader:
    def __init__(self) -> None:
        self.format_hints: set[str] = set()
        self.run: dict[int, Iteration] = {}  # the current run (a restart in the same file starts a new one)
        self.top = -1  # the current run's highest iteration index
        self.memory: dict[tuple[int, int | None], MemoryReport] = {}  # the current run's memory reports
        self.finished: dict[int, Iteration] = {}  # the last finished run with iterations
        self.kept_memory: dict[tuple[int, int | None], MemoryReport] = {}  # of the last run with both
        self.restarts = 0
        self.flags: list[LogFlag] = []
        self.dump = DumpReader()  # the configuration dumps (Megatron, Megatron-Bridge, NeMo) and world-size lines
        self.version: str | None = None
        self.log_interval: int | None = None
        self.pending_tflops: float | None = None  # from Megatron-Bridge's "Step Time" line, for the next iteration
        self.kept = 0
        self.signatures: dict[int, int] = {}  # the current run's lines (hash of their fields), for dedupe
        self.ranks: dict[int, int | None] = {}  # the rank prefix each kept line carried
        self.echoes: list[tuple[Iteration, int]] = []  # repeats since the last new line
        self.devices: dict[str, None] = {}  # GPU device names printed (nvidia-smi, rocm-smi, torch)

    def flag(self, line: int, name: str, value: object, why: str) -> None:
        if len(self.flags) < 1000:
            self.flags.append(LogFlag(line=line, field=name, value=cut(value), why=why))

    def feed(self, raw: str, n: int, complete: bool) -> None:
        text = L.clean(raw)
        self._hints(text)
        if self._arguments(text):
            return
        if self.version is None:
            self.version = L.version_of(text)
        if len(self.devices) < MAX_DEVICES and ("NVIDIA" in text or "AMD Instinct" in text):
            self.devices.update(dict.fromkeys(m.group().strip() for m in L.DEVICE.finditer(text)))
        if self.log_interval is None and "log_interval" in text:
            m = L.LOG_INTERVAL.search(text)
            if m:
                self.log_interval = int(m.group(1))
        step = L.BRIDGE_STEP.search(text) if "Step Time" in text else None
        tflops = L.first_number(step.group(2)) if step and step.group(2) else None
        if tflops is not None:  # `e`, `+-` and a figure past a float's range are no figure
            self._bridge_step(n, tflops)
        got = L.iteration_fields(text)
        if got:
            if not complete:
                self.flag(n, "iteration line", text[-60:], "truncated last line, not used")
                return
            self._iteration(n, *got, rank=L.rank_tag(text), text=text)
            return
        mem = L.memory_fields(text)
        if mem and complete:
            self._memory(n, *mem)

    def _hints(self, text: str) -> None:
        hints = self.format_hints
        if "nemo" not in hints and L.NEMO_STEP in text:
            hints.add("nemo")
        if "megatron-bridge" not in hints and ("Step Time :" in text or "megatron.bridge" in text):
            hints.add("megatron-bridge")
        if "primus" not in hints and ("rocm mem usage" in text or "hip mem usage" in text or L.TOKENS in text
                                      or "primus" in text.lower()):
            hints.add("primus")

    def _arguments(self, text: str) -> bool:
        if not self.dump.feed(text):
            return False
        if self.log_interval is None and L.small_int(self.dump.config.get("log_interval", "")) is not None:
            self.log_interval = L.small_int(self.dump.config["log_interval"])
        return True

    def _iteration(self, n: int, index: int, total: int, got: dict[str, str], *, rank: int | None,
                   text: str = "MFU") -> None:
        signature = hash(tuple(got.items()))  # the same printer writes the same fields in the same order
        seen = self.run.get(index)
        if seen is not None and rank != self.ranks.get(index) and index >= self.top - MAX_RANK_LAG:
            return  # another rank's line of an iteration just read (its own timer): the first one is kept
        step_ms = L.first_number(got[L.STEP_MS]) if L.STEP_MS in got else None
        step_s = step_ms / 1000 if step_ms is not None else L.first_number(got.get(L.NEMO_STEP, ""))
        if step_s is None:
            self.flag(n, "step time", got.get(L.STEP_MS, got.get(L.NEMO_STEP)), "not a number, line not used")
            return
        if step_s <= 0:
            self.flag(n, "step time", f"{step_s:g} s", "non-positive step time, not used")
        tflops = L.first_number(got[L.TFLOPS]) if L.TFLOPS in got else None
        if tflops is None and self.pending_tflops is not None:
            tflops = self.pending_tflops
        self.pending_tflops = None
        if tflops is not None and not self._possible_tflops(n, tflops):
            tflops = None
        tokens = L.first_number(got[L.TOKENS]) if L.TOKENS in got else None
        if tokens is not None and tokens <= 0:
            self.flag(n, "tokens/s/GPU", f"{tokens:g}", "non-positive, not used")
            tokens = None
        mfu = next((m for k, v in got.items() if "MFU" in k or "MFU" in v
                    if (m := L.MFU.search(f"{k}: {v}"[:L.MAX_MFU_CHARS]))), None) if "MFU" in text else None
        if mfu and not 0 < float(mfu.group(1)) <= 100:
            self.flag(n, "MFU", f"{mfu.group(1)} %", "impossible: MFU must lie in (0, 100] %")
        written = got.get(L.BATCH[0]) or got.get(L.BATCH[1])
        batch = L.first_number(written) if written else None
        batch = int(batch) if batch and batch < 10**L.MAX_DIGITS else None
        it = Iteration(index=index, total=total, step_time_s=step_s, tflops_per_gpu=tflops,
                       tokens_per_s_per_gpu=tokens, global_batch_size=batch, line=n,
                       averaged_over=self.log_interval or 1)
        run = self.run
        if seen is not None and self.signatures.get(index) == signature:
            if len(self.echoes) < MAX_ECHOES:
                self.echoes.append((it, signature))  # the same line printed twice, or by another rank
            return
        if run and (seen is not None or index < self.top):  # numbering went back: a new run in the same file
            self._new_run()
            run = self.run
            for echo, sig in self.echoes:  # its earlier lines repeated the old run's exactly
                if echo.index < index:
                    run[echo.index], self.signatures[echo.index] = echo, sig
                    self.top = max(self.top, echo.index)
        self.echoes = []
        if self.kept < MAX_ITERATIONS:
            run[index], self.signatures[index], self.ranks[index] = it, signature, rank
            self.top = max(self.top, index)
            self.kept += 1

    def skipped(self, gap: Gap) -> None:
        """Say, first among the flags, what of a long log was not read."""
        lines = f"{gap.lines:,} lines" if gap.lines is not None else "lines not counted; later line numbers are off"
        self.flags.insert(0, LogFlag(line=gap.first_line, field="log", value=f"{gap.nbytes:,} bytes ({lines})",
                                     why="not read: a long log is read at its head and its tail (the last run); the "
                                         "iterations in between are not used"))
        del self.flags[1000:]

    def _new_run(self) -> None:
        """A restart: the current run becomes the last finished one (older runs are only counted)."""
        if self.run:
            self.finished = self.run
            self.restarts += 1
            if self.memory:
                self.kept_memory = self.memory
        self.run, self.memory, self.top = {}, {}, -1
        self.signatures, self.ranks = {}, {}

    def _possible_tflops(self, n: int, tflops: float) -> bool:
        if 0 < tflops <= max_dense_tflops():
            return True
        self.flag(n, "TFLOP/s/GPU", f"{tflops:g}", f"impossible: above every GPU profile's dense peak "
                  f"({max_dense_tflops():g}) or non-positive, not used")
        return False

    def _bridge_step(self, n: int, tflops: float) -> None:
        """Megatron-Bridge's ``Step Time : Xs GPU utilization: Y TFLOP/s/GPU``: Y goes to the next iteration line."""
        self.pending_tflops = tflops if self._possible_tflops(n, tflops) else None

    def _memory(self, n: int, rank: int, after: int | None, got: dict[str, float | None]) -> None:
        key = (rank, after)
        if key not in self.memory:
            self.memory[key] = MemoryReport(
                rank=rank, after_iterations=after, allocated_mb=got["allocated"],
                max_allocated_mb=got["max allocated"], reserved_mb=got["reserved"],
                max_reserved_mb=got["max reserved"], line=n)

    def result(self, name: str) -> TrainingLog:
        last, restarts = (self.run, self.restarts) if self.run else (self.finished, self.restarts - 1)
        if not last:
            raise LogError(f"{name}: {MISSING}")
        iterations = tuple(sorted(last.values(), key=lambda it: it.index))
        stats = stable_stats(iterations)
        if stats is None:
            raise LogError(f"{name}: no iteration with a positive step time ({len(iterations)} iteration line(s) "
                           "read, every time zero or negative)")
        # the memory reports of the last run with iterations and reports, else the last reports read
        memory = self.memory if self.run and self.memory else self.kept_memory or self.memory
        fmt = next((f for f in ("nemo", "megatron-bridge", "primus") if f in self.format_hints), "megatron")
        batch = next((it.global_batch_size for it in iterations if it.global_batch_size), None)
        run = run_config(self.dump.config, self.dump.facts)
        batch = batch or run.global_batch_size
        return TrainingLog(
            format=fmt, iterations=iterations, memory=tuple(memory.values()), flags=tuple(self.flags), stats=stats,
            tokens_per_s_per_gpu=stable_median(iterations, stats, "tokens_per_s_per_gpu"),
            tflops_per_gpu=stable_median(iterations, stats, "tflops_per_gpu"), framework_version=self.version,
            restarts=restarts, config=dict(self.dump.config), run=run,
            global_batch_size=batch, seq_length=run.seq_length, devices=tuple(self.devices)[:MAX_DEVICES])


def read_log(path_or_text_lines: str | os.PathLike[str] | Iterable[str]) -> TrainingLog:
    """Read a Megatron / Primus / Megatron-Bridge / NeMo training log (a path, or its lines).

    A ``str`` holding a newline is the log's text; any other ``str`` is a path. Raises ``LogError``
    naming what was missing when the log holds no iteration line."""
    lines, stream, gaps = _source(path_or_text_lines)
    name = cut(path_or_text_lines) if isinstance(path_or_text_lines, str | os.PathLike) else "(log text)"
    reader = _Reader()
    try:
        for n, raw, complete in lines:
            reader.feed(raw, n, complete)
        for gap in gaps:
            reader.skipped(gap)
    except OSError as err:
        raise LogError(f"cannot read training log {name}: {err.strerror or err}") from None
    finally:
        if stream is not None:
            stream.close()
    return reader.result(name)
