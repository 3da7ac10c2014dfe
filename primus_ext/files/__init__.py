"""Files the user asked for: checked before any work, written atomically, backups that keep the original.

    check_outputs(("--html", args.html), inputs=[args.recipe])   # before any work: RecipeError, exit 2
    write_output(args.html, page, label="--html")                 # temp file + fsync + os.replace
    problem = output_problem("tuned.yaml", "--out")        # None, or why it cannot be written (before a search)
    saved = atomic_write(Path("recipe.yaml"), text)         # recipe.yaml.bak the first time, then .bak.2, .bak.3 ...

Every output a command writes goes through ``write_output`` / ``atomic_output`` (a report, a JSON document, a
trace, an export), which refuse a path that is, or resolves through symlinks and hard links to, a file this process
read as input (``inputs.note_input``: the recipe, every preset and ``extends`` parent, a GPU profile, a suite, a
baseline, a CSV, a training log, a store): an output flag pointed at an input is refused with exit 2 instead of
replacing it. A text output shows text from the environment as its template (``errors.redact``, issue 56): it
is written whole once its block ends. ``tune --apply`` rewrites the recipe on purpose, through ``atomic_write``,
after a backup whose name is taken with ``O_EXCL`` (two concurrent applies never share one).

``-``, ``/dev/stdout`` and ``/dev/stderr`` (and ``/dev/fd/1``, ``/dev/fd/2``, ``/proc/self/fd/1``, ...) are the
streams (``stream_of``): the output is written to the stream when the work is done, never by replacing what the
stream leads to (``--json /dev/stdout >> build.log`` appends to the log; a pipe is written as a pipe).

Temporary files are named ``.NAME.primus-ext-PID-RANDOM.KIND`` beside their target (an atomic rename needs the same
file system) and created with ``O_EXCL`` (``temps``): a symlink planted there is never followed. They are removed on
every exit path Python sees (exceptions, Ctrl-C, SIGTERM / SIGHUP, which ``install_signal_exit`` turns into a
normal exit); a process killed with SIGKILL cannot clean up, so the next write beside the same target removes the
temporary files of processes that no longer exist (``sweep``).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import stat
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from primus_ext.errors import Problem, redact
from primus_ext.files.inputs import (
    InputRefused,
    forget_inputs,
    input_problem,
    load_json,
    note_in_place,
    note_input,
    note_journal,
    open_input,
    open_journal,
    plan_output,
    planned_problems,
    read_input,
    written,
)
from primus_ext.files.temps import (
    BACKUP_SUFFIX,
    MAX_BACKUPS,
    claim,
    next_backup,
    private_file,
    replace_all,
    sweep,
    take_backup,
    temp_path,
)

_STREAMS = {"-": 1, "/dev/stdout": 1, "/dev/stderr": 2, "/dev/fd/1": 1, "/dev/fd/2": 2, "/proc/self/fd/1": 1,
            "/proc/self/fd/2": 2}


def stream_of(target: str | Path | None) -> int | None:
    """1 (stdout) or 2 (stderr) when ``target`` names a stream (``-``, ``/dev/stdout``, ``/dev/fd/2``, ...), else
    None."""
    if target is None:
        return None
    text = str(target)
    return _STREAMS.get(text if text == "-" else os.path.normpath(text))


def real_path(path: str | Path) -> Path:
    """``path`` with every symlink resolved, as ``Path.resolve`` would, but a symlink loop is left as it is (no
    ``RuntimeError``: the file's reader then says it cannot be opened)."""
    return Path(os.path.realpath(path))


def atomic_write(path: Path, text: str, *, backup: bool = True, mode_from: Path | None = None) -> str | None:
    """Replace ``path`` with ``text`` atomically (``_replacing``), after copying the old file to its next backup
    (``take_backup``); returns the backup's name. A new file takes the permissions of ``mode_from`` (the recipe it
    came from). No input check: ``tune --apply`` rewrites its own recipe on purpose."""
    saved = str(take_backup(path)) if backup and path.exists() else None
    with _replacing(path, binary=False, mode_from=mode_from) as fh:
        fh.write(text)
    return saved


@contextlib.contextmanager
def _replacing(path: Path, *, binary: bool, mode_from: Path | None = None) -> Iterator[IO[Any]]:
    """The one atomic replace behind ``atomic_write`` and ``atomic_output``: a handle on a temporary file beside
    ``path``, flushed, ``fsync``-ed and moved over ``path`` with ``os.replace`` only when the block ends without an
    exception; on any failure (a full disk, Ctrl-C, SIGTERM) the old file stays whole and the temporary file goes.
    The file keeps ``path``'s permissions, a new one ``mode_from``'s; the folder is synced after the rename."""
    sweep(path)
    tmp = temp_path(path)
    try:
        fd = claim(tmp, 0o666)
        with os.fdopen(fd, "wb") if binary else open(fd, "w", encoding="utf-8", newline="") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        model = path if path.is_file() else mode_from
        if model is not None and model.exists():
            shutil.copymode(model, tmp)
        os.replace(tmp, path)
        written(path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.filename is None:  # a full disk names no file: name the output
            raise OSError(err.errno, f"{err.strerror or err} (nothing written; the old file, if any, is as it "
                          "was)", str(path)) from None
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a power cut once its folder is synced
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def _name_problem(real: Path) -> str:
    try:
        os.fsencode(str(real))
    except UnicodeError:
        return "the name cannot be encoded for this file system"
    try:
        limit = os.pathconf(real.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255  # POSIX NAME_MAX on Linux file systems
    if len(os.fsencode(real.name)) + len(".bak.99") + 32 > limit:  # the name, its backup and temporary names
        return f"the file name is too long ({len(os.fsencode(real.name))} bytes; this file system allows {limit})"
    return ""


def output_problem(target: str | Path, label: str | None = None, *, replace_read_only: bool = False) -> Problem | None:
    """Why ``target`` cannot be written as a file, else ``None``; a symlink is judged by its destination.
    ``label``: the problem's path (the command-line flag). An existing read-only file is a problem unless
    ``replace_read_only`` (the user forced it)."""
    where = label or str(target)
    value = str(target) if label else None
    if stream_of(target) is not None:
        return None  # written to the stream, whatever it leads to
    try:
        real = Path(os.path.realpath(target))
        bad_name = _name_problem(real)
        if bad_name:
            return Problem(path=where, value=value, message=bad_name, fix="choose a shorter name")
        if real.is_dir():
            return Problem(path=where, value=value, message="is a folder, not a file",
                           fix="give a file name, e.g. tuned.yaml")
        if real.exists() and not real.is_file():  # a FIFO, a device: a replace would swap the node itself
            return Problem(path=where, value=value, message="is not a regular file (a device, a pipe or a socket)",
                           fix="give a file name; `-` writes to stdout where the flag allows it")
        if not real.parent.is_dir():
            return Problem(path=where, value=value, message=f"folder {real.parent} does not exist",
                           fix="create the folder first, or write elsewhere")
        if not os.access(real.parent, os.W_OK | os.X_OK):
            return Problem(path=where, value=value, message=f"folder {real.parent} is not writable",
                           fix="write elsewhere, or make the folder writable")
        if real.exists() and not replace_read_only and (
                not real.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(real, os.W_OK)):
            # by its mode bits: root may write anything, but a file marked read-only was marked so for a reason
            return Problem(path=where, value=value, message="the file is read-only",
                           fix="make it writable (chmod u+w), write elsewhere, or pass --force to replace it")
    except (OSError, ValueError) as err:  # a NUL byte, a name the OS refuses
        return Problem(path=where, value=value, message=f"cannot be written: {err}", fix="choose another path")
    return None


def check_outputs(*outputs: tuple[str, str | Path | None], inputs: Sequence[str | Path | None] = ()) -> None:
    """Refuse, all at once and before any work, the (flag, path) outputs that cannot be written (``-``: stdout):
    unwritable, not a regular file, one of ``inputs`` (noted as inputs here) or of the inputs read so far, or
    the same file as another output. Each is planned (``plan_output``): every later write checks it again against
    the inputs read by then."""
    from primus_ext.errors import RecipeError

    for path in inputs:
        if path:
            note_input(path)
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for flag, value in outputs:
        if not value or stream_of(value) is not None:
            continue
        plan_output(flag, value)
        problem = output_problem(value, flag) or input_problem(value, flag)
        real = os.path.realpath(value) if problem is None else ""
        if problem is None and real in seen:
            problem = Problem(path=flag, value=str(value), message=f"is also the {seen[real]} output",
                              fix="give each output its own file")
        if problem is not None:
            problems.append(problem)
        seen.setdefault(real, flag)
    if problems:
        raise RecipeError(problems=problems)


@contextlib.contextmanager
def atomic_output(target: str | Path, *, label: str | None = None, binary: bool = False) -> Iterator[IO[Any]]:
    """A file handle whose content replaces ``target`` only when the block ends without an exception: written to
    a temporary file beside the destination (a symlink is written through), flushed, ``fsync``-ed and moved in
    with ``os.replace``; on any failure (a full disk, Ctrl-C, SIGTERM) the old file stays whole and the temporary
    file goes. An input of this command (``input_problem``) is refused with a ``RecipeError`` before anything
    is opened, and so is any write while another output ``check_outputs`` planned has become an input since (a GPU
    profile a CI entry loaded: ``planned_problems``), so that a refused command writes none of its outputs. An
    existing file keeps its permissions; a text output shows text from the environment as its template."""
    from primus_ext.errors import RecipeError

    stream = stream_of(target)
    if stream is not None:
        with _to_stream(stream, binary=binary) as fh:
            yield fh
        return
    problems = [p for p in (input_problem(target, label), *planned_problems()) if p is not None]
    if problems:  # this output or another one planned is an input read since it was checked: none is written
        raise RecipeError(problems=list({str(p): p for p in problems}.values()))
    if binary:
        with _replacing(Path(os.path.realpath(target)), binary=True) as fh:  # a symlink is written through
            yield fh
        return
    buffer = io.StringIO()  # whole, so that text from the environment is found however the writer chunks it
    yield buffer
    with _replacing(Path(os.path.realpath(target)), binary=False) as fh:
        fh.write(redact(buffer.getvalue()))


@contextlib.contextmanager
def _to_stream(fd: int, *, binary: bool) -> Iterator[IO[Any]]:
    """A handle whose content goes to stdout (1) or stderr (2) when the block ends without an exception: written
    to the stream as it stands (appended where the shell appends, down a pipe), never by replacing a file."""
    buffer: IO[Any] = io.BytesIO() if binary else io.StringIO()
    yield buffer
    data = buffer.getvalue() if binary else redact(buffer.getvalue())
    stream = sys.stdout if fd == 1 else sys.stderr
    stream.flush()
    raw = getattr(stream, "buffer", None)
    if binary and raw is not None:
        raw.write(data)
        raw.flush()
    else:  # text, or a stream replaced by a text-only one (a test's capture)
        stream.write(data if not binary else data.decode("utf-8", "replace"))
        stream.flush()


def write_output(target: str | Path, data: str | bytes, *, label: str | None = None) -> None:
    """Write ``data`` to ``target`` through ``atomic_output`` (the one writer of every command's outputs)."""
    with atomic_output(target, label=label, binary=isinstance(data, bytes)) as fh:
        fh.write(data)


def install_signal_exit() -> None:
    """SIGTERM and SIGHUP end the process as an exception would: ``finally`` blocks run, temporary files go."""
    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):  # not the main thread / not supported here
            signal.signal(sig, _exit)


__all__ = ["BACKUP_SUFFIX", "MAX_BACKUPS", "InputRefused", "atomic_output", "atomic_write", "check_outputs", "claim",
           "forget_inputs", "input_problem", "install_signal_exit", "load_json", "next_backup", "note_in_place",
           "note_input", "note_journal", "open_input", "open_journal", "output_problem", "plan_output",
           "planned_problems", "private_file", "read_input", "real_path", "replace_all", "stream_of", "sweep",
           "take_backup", "temp_path", "write_output"]
