"""Files the user asked for: checked before any work, written atomically, backups that keep the original.

    problem = output_problem("tuned.yaml", "--out")        # None, or why it cannot be written (before a search)
    saved = atomic_write(Path("recipe.yaml"), text)         # recipe.yaml.bak the first time, then .bak.2, .bak.3 ...

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
from pathlib import Path

from primus_ext.errors import Problem

BACKUP_SUFFIX = ".bak"
MAX_BACKUPS = 99
"""Backup generations kept beside a recipe (``.bak``, ``.bak.2`` .. ``.bak.99``); the first is never replaced."""

_TEMP = re.compile(r"\.primus-ext-(\d+)\.[a-z.]+$")


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


def next_backup(path: Path) -> Path:
    """Where the next backup of ``path`` goes: ``.bak`` the first time (never overwritten), then ``.bak.2``..."""
    first = Path(str(path) + BACKUP_SUFFIX)
    if not first.exists():
        return first
    for n in range(2, MAX_BACKUPS + 1):
        candidate = Path(f"{path}{BACKUP_SUFFIX}.{n}")
        if not candidate.exists():
            return candidate
    raise OSError(f"{MAX_BACKUPS} backups of {path} exist already; remove the ones you do not need")


def atomic_write(path: Path, text: str, *, backup: bool = True, mode_from: Path | None = None) -> str | None:
    """Replace ``path`` with ``text`` atomically, after copying the old file to its next backup (``next_backup``);
    returns the backup's name. A new file takes the permissions of ``mode_from`` (the recipe it came from)."""
    sweep(path)
    saved = None
    if backup and path.exists():
        saved = str(next_backup(path))
        shutil.copy2(path, saved)
    tmp = temp_path(path)
    with contextlib.suppress(FileNotFoundError):  # this pid's own leftover: a killed process had the same pid
        os.unlink(tmp)
    try:
        with open(tmp, "x", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        model = path if path.exists() else mode_from
        if model is not None and model.exists():
            shutil.copymode(model, tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return saved


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


def check_outputs(*outputs: tuple[str, str | Path | None]) -> None:
    """Refuse, all at once and before any work, the (flag, path) outputs that cannot be written (``-``: stdout)."""
    from primus_ext.errors import RecipeError

    problems = [p for flag, value in outputs
                if value and str(value) != "-" and (p := output_problem(value, flag)) is not None]
    if problems:
        raise RecipeError(problems=problems)


def install_signal_exit() -> None:
    """SIGTERM and SIGHUP end the process as an exception would: ``finally`` blocks run, temporary files go."""
    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):  # not the main thread / not supported here
            signal.signal(sig, _exit)


__all__ = ["BACKUP_SUFFIX", "atomic_write", "check_outputs", "install_signal_exit", "next_backup", "output_problem",
           "sweep", "temp_path"]
