"""Files the user asked for: checked before any work, written atomically, backups that keep the original.

    check_outputs(("--html", args.html), inputs=[args.recipe])   # before any work: RecipeError, exit 2
    write_output(args.html, page, label="--html")                 # temp file + fsync + os.replace
    problem = output_problem("tuned.yaml", "--out")        # None, or why it cannot be written (before a search)
    saved = atomic_write(Path("recipe.yaml"), text)         # recipe.yaml.bak the first time, then .bak.2, .bak.3 ...

Every output a command writes goes through ``write_output`` / ``atomic_output`` (a report, a JSON document, a
trace, an export), which refuse a path that is, or resolves through symlinks and hard links to, a file this process
read as input (``note_input``: the recipe, every preset and ``extends`` parent, a training log, a store): an output
flag pointed at the recipe is refused with exit 2 instead of replacing it. ``tune --apply`` rewrites the recipe on
purpose, through ``atomic_write``, after a backup whose name is taken with ``O_EXCL`` (two concurrent applies
never share one).

Temporary files are named ``.NAME.primus-ext-PID.KIND`` beside their target (an atomic rename needs the same
file system). They are removed on every exit path Python sees (exceptions, Ctrl-C, SIGTERM / SIGHUP, which
``install_signal_exit`` turns into a normal exit); a process killed with SIGKILL cannot clean up, so the next
write beside the same target removes the temporary files of processes that no longer exist (``sweep``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import signal
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, BinaryIO

from primus_ext.errors import PrimusExtError, Problem

BACKUP_SUFFIX = ".bak"
MAX_BACKUPS = 99
"""Backup generations kept beside a recipe (``.bak``, ``.bak.2`` .. ``.bak.99``); the first is never replaced."""

_TEMP = re.compile(r"\.primus-ext-(\d+)\.[a-z.]+$")


def real_path(path: str | Path) -> Path:
    """``path`` with every symlink resolved, as ``Path.resolve`` would, but a symlink loop is left as it is (no
    ``RuntimeError``: the file's reader then says it cannot be opened)."""
    return Path(os.path.realpath(path))


def temp_path(target: Path, kind: str = "tmp") -> Path:
    """This process's temporary file for ``target`` (``kind``: ``tmp``, ``check.yaml``)."""
    return target.with_name(f".{target.name}.primus-ext-{os.getpid()}.{kind}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def sweep(target: Path) -> list[Path]:
    """Remove the temporary files a killed process left beside ``target``; returns what was removed."""
    removed = []
    for name in glob.glob(glob.escape(str(target.parent / f".{target.name}")) + ".primus-ext-*"):
        found = _TEMP.search(name)
        if found and int(found.group(1)) != os.getpid() and not _alive(int(found.group(1))):
            with contextlib.suppress(OSError):
                os.unlink(name)
                removed.append(Path(name))
    return removed


def _backup_names(path: Path) -> list[Path]:
    return [Path(str(path) + BACKUP_SUFFIX), *(Path(f"{path}{BACKUP_SUFFIX}.{n}") for n in range(2, MAX_BACKUPS + 1))]


def next_backup(path: Path) -> Path:
    """Where the next backup of ``path`` would go: ``.bak`` the first time (never overwritten), then ``.bak.2``...
    (a hint: ``take_backup`` claims the name atomically)."""
    for candidate in _backup_names(path):
        if not candidate.exists():
            return candidate
    raise OSError(f"{MAX_BACKUPS} backups of {path} exist already; remove the ones you do not need")


def take_backup(path: Path) -> Path:
    """Copy ``path`` to its next free backup name, the name claimed with ``O_CREAT | O_EXCL`` (two processes
    backing up one recipe at once get two names, never one); the copy keeps the file's mode and times."""
    for candidate in _backup_names(path):
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        try:
            with os.fdopen(fd, "wb") as out, open(path, "rb") as src:
                shutil.copyfileobj(src, out)
                out.flush()
                os.fsync(out.fileno())
            shutil.copystat(path, candidate)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(candidate)
            raise
        return candidate
    raise OSError(f"{MAX_BACKUPS} backups of {path} exist already; remove the ones you do not need")


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
    with contextlib.suppress(FileNotFoundError):  # this pid's own leftover: a killed process had the same pid
        os.unlink(tmp)
    try:
        with open(tmp, "xb") if binary else open(tmp, "x", encoding="utf-8", newline="") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        model = path if path.is_file() else mode_from
        if model is not None and model.exists():
            shutil.copymode(model, tmp)
        os.replace(tmp, path)
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


_INPUT_PATHS: dict[str, str] = {}
"""Real path of every input file this process read -> how it was named (``note_input``)."""
_INPUT_IDS: dict[tuple[int, int], str] = {}
"""(device, inode) of every input file -> its name: a hard link or a bind mount is the same file."""
_JOURNALS: set[str] = set()
"""Real paths of the journals read to be continued (``note_journal``)."""


def note_input(path: str | Path) -> None:
    """Remember ``path`` as an input of this command: no output may be written over it (``input_problem``)."""
    with contextlib.suppress(OSError, ValueError):
        real = os.path.realpath(path)
        _INPUT_PATHS.setdefault(real, str(path))
        found = os.stat(real)
        if stat.S_ISREG(found.st_mode):
            _INPUT_IDS.setdefault((found.st_dev, found.st_ino), str(path))


def forget_inputs() -> None:
    """Clear the inputs noted so far (a new command in the same process: tests, the hostile campaign)."""
    _INPUT_PATHS.clear()
    _INPUT_IDS.clear()
    _JOURNALS.clear()


def input_problem(target: str | Path, label: str | None = None) -> Problem | None:
    """Why ``target`` must not be written: it is, through symlinks or hard links, an input of this command."""
    try:
        real = os.path.realpath(target)
        named = _INPUT_PATHS.get(real)
        if named is None and os.path.exists(real):
            found = os.stat(real)
            named = _INPUT_IDS.get((found.st_dev, found.st_ino))
    except (OSError, ValueError):
        return None  # output_problem names what the OS refuses
    if named is None:
        return None
    link = f" ({target} leads to {real})" if os.path.abspath(target) != real else ""
    return Problem(path=label or str(target), value=str(target) if label else None,
                   message=f"is {named}, an input of this command{link}: writing there would replace it; nothing "
                           "was written",
                   fix="give the output a new file name (the inputs are never overwritten; tune --apply rewrites "
                       "a recipe on purpose, keeping a backup)")


def check_outputs(*outputs: tuple[str, str | Path | None], inputs: Sequence[str | Path | None] = ()) -> None:
    """Refuse, all at once and before any work, the (flag, path) outputs that cannot be written (``-``: stdout):
    unwritable, not a regular file, one of ``inputs`` (noted as inputs here) or of the inputs read so far, or
    the same file as another output."""
    from primus_ext.errors import RecipeError

    for path in inputs:
        if path:
            note_input(path)
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for flag, value in outputs:
        if not value or str(value) == "-":
            continue
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
    is opened. An existing file keeps its permissions."""
    from primus_ext.errors import RecipeError

    problem = input_problem(target, label)
    if problem is not None:
        raise RecipeError(problems=[problem])
    with _replacing(Path(os.path.realpath(target)), binary=binary) as fh:  # a symlink is written through
        yield fh


def write_output(target: str | Path, data: str | bytes, *, label: str | None = None) -> None:
    """Write ``data`` to ``target`` through ``atomic_output`` (the one writer of every command's outputs)."""
    with atomic_output(target, label=label, binary=isinstance(data, bytes)) as fh:
        fh.write(data)


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

    problem = None if os.path.realpath(target) in _JOURNALS else input_problem(target, label)
    if problem is not None:
        raise RecipeError(problems=[problem])
    fh = open(target, "a+", encoding="utf-8")  # noqa: SIM115 (the caller closes it)
    size = fh.seek(0, os.SEEK_END)
    if size:
        fh.seek(size - 1)
        if fh.read(1) != "\n":
            fh.write("\n")
    return fh


class InputRefused(PrimusExtError):
    """An input path that is not a regular file, or larger than its reader allows (the message names it)."""


def open_input(path: str | Path, *, max_bytes: int, what: str = "file", note: bool = True) -> BinaryIO:
    """Open a user's input file for reading, or refuse it (``InputRefused``) before reading a byte: a FIFO, a
    device (``/dev/zero``, ``/dev/urandom``), a socket or a folder, or a regular file over ``max_bytes``. The file
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


def install_signal_exit() -> None:
    """SIGTERM and SIGHUP end the process as an exception would: ``finally`` blocks run, temporary files go."""
    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):  # not the main thread / not supported here
            signal.signal(sig, _exit)


__all__ = ["BACKUP_SUFFIX", "InputRefused", "atomic_output", "atomic_write", "check_outputs", "forget_inputs",
           "input_problem", "install_signal_exit", "next_backup", "note_input", "note_journal", "open_input",
           "open_journal", "output_problem", "read_input", "real_path", "sweep", "take_backup", "temp_path",
           "write_output"]
