"""Which lines of a training-log file are read: all of a log up to a bound, else its head and its tail.

    lines, gap = file_lines(fh)          # fh: a regular file opened in binary (files.open_input)
    for number, text, complete in lines: ...
    gap                                   # None, or what was skipped (bytes, lines) between head and tail

A log costs bounded time and memory whatever its size: at most ``HEAD_BYTES`` / ``HEAD_LINES`` from its start
(the arguments block, the framework version, the first iterations) and ``TAIL_BYTES`` / ``TAIL_LINES`` from its
end (the last run, whose stable segment is what every figure is taken from) are read; a longer log's middle is
skipped, its newlines counted (up to ``COUNT_BYTES``, so line numbers after the gap stay exact) and reported
(``Gap``). A log of 10^6 Megatron iteration lines (~0.6 GB) is read as its first ~7 000 and last ~50 000
iterations. Lines end at ``\\n``, ``\\r\\n`` or a lone ``\\r`` (as Python's ``newline=""`` reads them), each cut
to ``MAX_LINE_CHARS`` characters (the rest of a longer line is skipped); bytes that are not UTF-8 are replaced.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

HEAD_BYTES = 4 << 20
"""4 MiB from the start: Megatron's arguments block is ~30 kB; the rest are the first run's iterations."""
TAIL_BYTES = 28 << 20
"""28 MiB from the end: ~50 000 Megatron iteration lines (~600 bytes each)."""
HEAD_LINES = 10_000
TAIL_LINES = 60_000
"""Lines read from each end: the last run's 60 000 iterations are far more than a steady-state median needs, and each
iteration line costs ~25-30 us here (cProfile of ``calibrate`` on a 150 000-line log: 117 000 lines read at the
earlier 25 000 + 100 000 took 3.3 CPU-s, 5 s while the machine was shared), so at most ~2 s."""
COUNT_BYTES = 256 << 20
"""A skipped middle up to 256 MiB has its newlines counted (~0.1 s); a larger (or sparse) one is not read at all."""
MAX_LINE_CHARS = 16 * 1024
"""Longer lines are cut here (an iteration line is ~600-1 000 characters with colour codes and prefixes)."""
_CHUNK = 16 << 20


@dataclass(frozen=True, kw_only=True)
class Gap:
    """The middle of a long log, not read."""

    nbytes: int
    first_line: int
    """The first line number skipped."""
    lines: int | None
    """Lines skipped (``None``: more than ``COUNT_BYTES`` were skipped, not counted; later numbers are off)."""


def _cut_after_lines(block: bytes, limit: int) -> int:
    """Offset just past the ``limit``-th newline of ``block`` (``len(block)`` when it has fewer)."""
    pos = 0
    for _ in range(limit):
        found = block.find(b"\n", pos)
        if found < 0:
            return len(block)
        pos = found + 1
    return pos


def _start_of_last_lines(block: bytes, limit: int) -> int:
    """Offset where the last ``limit`` lines of ``block`` start (0 when it has fewer)."""
    end = len(block) - 1 if block.endswith(b"\n") else len(block)
    for _ in range(limit):
        found = block.rfind(b"\n", 0, end)
        if found < 0:
            return 0
        end = found
    return end + 1


def _count_newlines(fh: IO[bytes], start: int, stop: int) -> int | None:
    if stop - start > COUNT_BYTES:
        return None
    fh.seek(start)
    count, left = 0, stop - start
    while left > 0:
        chunk = fh.read(min(_CHUNK, left))
        if not chunk:
            break
        count += chunk.count(b"\n")
        left -= len(chunk)
    return count


def _lines(block: bytes, first: int, final: bool) -> Iterator[tuple[int, str, bool]]:
    """(number, text, complete) of each line of ``block``; ``final``: the block ends the file (its last line may
    be unterminated: ``complete`` False)."""
    n, pos, size = first, 0, len(block)
    while pos < size:
        found = block.find(b"\n", pos)
        end = size if found < 0 else found + 1
        raw = block[pos:min(end, pos + 4 * MAX_LINE_CHARS)]
        text = raw.decode("utf-8", errors="replace")
        terminated = found >= 0
        pieces = text.split("\r") if "\r" in text.rstrip("\r\n") else [text]  # a lone \r ends a line too
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            line = piece if last else piece + "\r"
            if not line:
                continue
            complete = (terminated or not final or not last) or len(text) >= MAX_LINE_CHARS
            yield n, line[:MAX_LINE_CHARS], complete
            n += 1
        pos = end


def file_lines(fh: IO[bytes]) -> tuple[Iterator[tuple[int, str, bool]], list[Gap]]:
    """The lines read of the open file ``fh`` (see the module docstring), and the gap skipped (a list holding at
    most one ``Gap``, filled once the head has been read)."""
    gaps: list[Gap] = []

    def generate() -> Iterator[tuple[int, str, bool]]:
        head = fh.read(HEAD_BYTES)
        rest = fh.read(1)
        if not rest:  # the whole file is the head
            head_end = _cut_after_lines(head, HEAD_LINES)
            yield from _lines(head[:head_end], 1, final=True)
            if head_end < len(head):  # more lines than the head takes: the rest is the tail's to read
                yield from _tail(head, head_end, len(head), head[:head_end].count(b"\n") + 1)
            return
        partial = head.rfind(b"\n") < 0  # one line longer than the head: its rest is skipped
        cut = head.rfind(b"\n") + 1 or len(head)  # a line is read whole, by the head or the tail
        head_end = _cut_after_lines(head[:cut], HEAD_LINES)
        yield from _lines(head[:head_end], 1, final=False)
        next_line = head[:head_end].count(b"\n") + 1
        fh.seek(0, 2)
        size = fh.tell()
        start = max(head_end, size - TAIL_BYTES)
        if start > head_end:  # begin at a line start: just after a newline
            fh.seek(start - 1)
            block = fh.read(TAIL_BYTES + 1)
            skip = block.find(b"\n") + 1 if not block.startswith(b"\n") else 1
            if skip == 0:  # one line longer than the tail: nothing whole to read
                skip = len(block)
            tail_start, block = start - 1 + skip, block[skip:]
        else:
            fh.seek(head_end)
            tail_start, block = head_end, fh.read(TAIL_BYTES)
            if partial:
                skip = block.find(b"\n") + 1 or len(block)
                tail_start, block = tail_start + skip, block[skip:]
        yield from _tail(block, 0, len(block), next_line, skipped_from=head_end, tail_start=tail_start)

    def _tail(data: bytes, begin: int, end: int, next_line: int, *, skipped_from: int | None = None,
              tail_start: int | None = None) -> Iterator[tuple[int, str, bool]]:
        block = data[begin:end]
        keep = _start_of_last_lines(block, TAIL_LINES)
        middle_lines = block[:keep].count(b"\n")
        nbytes = keep
        if skipped_from is not None and tail_start is not None and tail_start > skipped_from:
            counted = _count_newlines(fh, skipped_from, tail_start)
            nbytes += tail_start - skipped_from
            middle_lines = None if counted is None else counted + middle_lines
        if nbytes:
            gaps.append(Gap(nbytes=nbytes, first_line=next_line, lines=middle_lines))
        first = next_line + (middle_lines or 0)
        yield from _lines(block[keep:], first, final=True)

    return generate(), gaps


__all__ = ["COUNT_BYTES", "HEAD_BYTES", "HEAD_LINES", "MAX_LINE_CHARS", "TAIL_BYTES", "TAIL_LINES", "Gap",
           "file_lines"]
