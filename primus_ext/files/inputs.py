"""The inputs of a command: what no output may replace (``note_input``), and the one bounded reader.

    note_input("recipe.yaml")                           # read by this command: no output may be written over it
    input_problem("out.html", "--html")                 # None, or why it is an input (symlinks, hard links)
    data = read_input(path, max_bytes=32 << 20, what="log")   # a regular file only, bounded, noted as an input
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
from collections.abc import Collection
from pathlib import Path
from typing import IO, Any, BinaryIO

from primus_ext.errors import PrimusExtError, Problem, redact

_INPUT_PATHS: dict[str, str] = {}
"""Real path of every input file this process read -> how it was named (``note_input``)."""
_INPUT_IDS: dict[tuple[int, int], str] = {}
"""(device, inode) of every input file -> its name: a hard link or a bind mount is the same file."""
_JOURNALS: set[str] = set()
"""Real paths of the journals read to be continued (``note_journal``)."""


_NOTED: set[str] = set()
"""The names already noted (a profile is looked up many times a command)."""


def note_input(path: str | Path) -> None:
    """Remember ``path`` as an input of this command: no output may be written over it (``input_problem``)."""
    if str(path) in _NOTED:
        return
    _NOTED.add(str(path))
    with contextlib.suppress(OSError, ValueError):
        real = os.path.realpath(path)
        _INPUT_PATHS.setdefault(real, str(path))
        found = os.stat(real)
        if stat.S_ISREG(found.st_mode):
            _INPUT_IDS.setdefault((found.st_dev, found.st_ino), str(path))


_IN_PLACE: set[str] = set()
"""Real paths of the files this command reads and writes in place on purpose (a timing store opened to write)."""
_PLANNED: dict[str, str] = {}
"""Every output this command will write (``plan_output``: flag -> path), checked again against the inputs read
since (``planned_problems``) before the first byte of any is written."""


def forget_inputs() -> None:
    """Clear the inputs noted so far (a new command in the same process: tests, the hostile campaign)."""
    _NOTED.clear()
    _INPUT_PATHS.clear()
    _INPUT_IDS.clear()
    _JOURNALS.clear()
    _IN_PLACE.clear()
    _PLANNED.clear()


def note_in_place(path: str | Path) -> None:
    """``path`` is read and written in place on purpose (a timing store, ``bench --out``): still an input no other
    output may replace, but its own planned output is not refused for it."""
    with contextlib.suppress(OSError, ValueError):
        _IN_PLACE.add(os.path.realpath(path))


def plan_output(flag: str, path: str | Path) -> None:
    """``path`` will be written (``--junit``): every write checks it again against every input read by then."""
    _PLANNED.setdefault(flag, str(path))


def written(path: str | Path) -> None:
    """``path`` was written: no longer a planned output (a command may read what it wrote: ``train --auto-tune``
    projects its tuned copy)."""
    with contextlib.suppress(OSError, ValueError):
        real = os.path.realpath(path)
        for flag in [f for f, p in _PLANNED.items() if os.path.realpath(p) == real]:
            del _PLANNED[flag]


def planned_problems() -> list[Problem]:
    """Why the planned outputs cannot be written now: each one that is, through symlinks or hard links, an input
    read since it was checked (a GPU profile a suite entry loaded, a baseline, a log; a journal read to be continued
    excepted). Asked before any output is written, so that one refused output means none written."""
    problems = []
    for flag, path in _PLANNED.items():
        with contextlib.suppress(OSError, ValueError):
            if os.path.realpath(path) in _JOURNALS | _IN_PLACE:
                continue
        problem = input_problem(path, flag)
        if problem is not None:
            problems.append(problem)
    return problems


def input_problem(target: str | Path, label: str | None = None, *,
                  rewritten: Collection[str] = ()) -> Problem | None:
    """Why ``target`` must not be written: it is, through symlinks or hard links, an input of this command
    (``rewritten``: inputs, as they were noted, that this write replaces on purpose: a refit's GPU profiles)."""
    try:
        real = os.path.realpath(target)
        named = _INPUT_PATHS.get(real)
        if named is None and os.path.exists(real):
            found = os.stat(real)
            named = _INPUT_IDS.get((found.st_dev, found.st_ino))
    except (OSError, ValueError):
        return None  # output_problem names what the OS refuses
    if named is None or named in rewritten:
        return None
    link = f" ({target} leads to {real})" if os.path.abspath(target) != real else ""
    return Problem(path=label or str(target), value=str(target) if label else None,
                   message=f"is {named}, an input of this command{link}: writing there would replace it; nothing "
                           "was written",
                   fix="give the output a new file name (the inputs are never overwritten; tune --apply rewrites "
                       "a recipe on purpose, keeping a backup)")


def note_journal(path: str | Path) -> None:
    """``path`` was read as a journal to continue it (``tune --resume``): ``open_journal`` may append to it."""
    with contextlib.suppress(OSError, ValueError):
        _JOURNALS.add(os.path.realpath(path))


def open_journal(target: str | Path, *, label: str | None = None) -> IO[str]:
    """An append-only journal (``tune --log``): refused like any output when it is an input (unless it was read as
    this journal, ``note_journal``), else opened for appending, so what it held stays whole and a killed run keeps
    every line written before the kill (a replace-on-close writer would lose them, and ``--resume`` reads them).
    A line a kill cut short is ended first, so the next line starts on its own."""
    from primus_ext.errors import RecipeError

    own = [] if os.path.realpath(target) in _JOURNALS else [input_problem(target, label)]
    problems = [p for p in (*own, *planned_problems()) if p is not None]
    if problems:
        raise RecipeError(problems=list({str(p): p for p in problems}.values()))
    fh = open(target, "a+", encoding="utf-8")  # noqa: SIM115 (the caller closes it)
    written(target)
    size = fh.seek(0, os.SEEK_END)
    if size:
        fh.seek(size - 1)
        if fh.read(1) != "\n":
            fh.write("\n")
    return _Redacting(fh)  # type: ignore[return-value]


class _Redacting:
    """A text handle whose every ``write`` shows text from the environment as its template (``errors.redact``);
    a journal is written a whole line a call."""

    def __init__(self, fh: IO[str]) -> None:
        self._fh = fh

    def write(self, text: str) -> int:
        return self._fh.write(redact(text))

    def __getattr__(self, name: str) -> object:
        return getattr(self._fh, name)

    def __enter__(self) -> _Redacting:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()


PSEUDO_FILE_SYSTEMS = ("/proc/", "/sys/")
"""Where Linux mounts files made up by the kernel (procfs, sysfs: proc(5)): ``stat`` calls them regular files of size
0, yet a read may never end (``/proc/kmsg`` waits for the next kernel message). No input of this tool lives there (a
device under /dev is refused as not a regular file)."""


class InputRefused(PrimusExtError):
    """An input path that is not a regular file, or larger than its reader allows (the message names it)."""


def open_input(path: str | Path, *, max_bytes: int, what: str = "file", note: bool = True) -> BinaryIO:
    """Open a user's input file for reading, or refuse it (``InputRefused``) before reading a byte: a FIFO, a
    device (``/dev/zero``, ``/dev/urandom``), a socket or a folder, a kernel pseudo-file (``/proc/kmsg``:
    ``PSEUDO_FILE_SYSTEMS``), or a regular file over ``max_bytes``. The file
    is opened without blocking (a FIFO with no writer would otherwise wait forever), checked with ``fstat`` on the
    open descriptor (no race with a rename), and noted as an input (``note_input``). The caller still bounds its
    reads (a file may grow): ``read_input`` does. ``note=False``: an output read before it is replaced (not an
    input)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise InputRefused(f"{what} {path} is a folder; give a file") from None
    try:
        found = os.fstat(fd)
        if stat.S_ISDIR(found.st_mode):
            raise InputRefused(f"{what} {path} is a folder; give a file")
        if not stat.S_ISREG(found.st_mode):
            kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(found.st_mode) else "a character device"
                    if stat.S_ISCHR(found.st_mode) else "a block device" if stat.S_ISBLK(found.st_mode) else
                    "a socket" if stat.S_ISSOCK(found.st_mode) else "not a regular file")
            raise InputRefused(f"{what} {path} is {kind}, not a regular file: it could be endless; save it to a "
                               "file first and give that")
        real = os.path.realpath(path)
        if real.startswith(PSEUDO_FILE_SYSTEMS):  # S_ISREG, size 0, and a read of /proc/kmsg waits forever
            raise InputRefused(f"{what} {path} is a kernel pseudo-file ({real}): its size is unknown and a read may "
                               "wait forever; save it to a file first and give that")
        if found.st_size > max_bytes:
            raise InputRefused(f"{what} {path} is {found.st_size:,} bytes, more than the {max_bytes:,} read; give "
                               "a shorter file (e.g. its last lines: tail -n 100000)")
        os.set_blocking(fd, True)
        if note:
            note_input(path)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_input(path: str | Path, *, max_bytes: int, what: str = "file", note: bool = True) -> bytes:
    """The bytes of a user's input file through ``open_input``, never more than ``max_bytes`` (a file that grew
    past the bound while read is refused as well)."""
    with open_input(path, max_bytes=max_bytes, what=what, note=note) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputRefused(f"{what} {path} holds more than {max_bytes:,} bytes; give a shorter file")
    return data


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is past a float's range")
    return value


MAX_JSON_DEPTH = 64
"""Nesting of a JSON document read from a user (a baseline, a trial line, a manifest, a store export: 3 to 5 levels
deep); deeper is refused before it reaches code that walks it recursively (``json.loads`` itself raises
``RecursionError`` near 1 000 levels)."""


def load_json(text: str | bytes, *, parse_constant: Any = None) -> Any:
    """``json.loads(text)`` for a user's file, every failure a ``ValueError`` naming it: not JSON, nested deeper
    than ``MAX_JSON_DEPTH`` (checked without recursion), an integer over Python's 4 300 digits, a number past a
    float's range (``1e999``)."""
    try:
        data = json.loads(text, parse_constant=parse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    level, stack = 0, [data]
    while stack:
        nxt = []
        for item in stack:
            if isinstance(item, dict):
                nxt.extend(item.values())
            elif isinstance(item, list):
                nxt.extend(item)
        level += bool(nxt)
        if level > MAX_JSON_DEPTH:
            raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
        stack = [x for x in nxt if isinstance(x, dict | list)]
    return data
