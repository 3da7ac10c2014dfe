"""Temporary files beside a target: unpredictable names claimed with ``O_EXCL``, swept after a crash; backups.

    with private_file(Path("out/tuned.yaml"), data, kind="check.yaml") as probe:   # beside the target, never a link
        load_recipe(probe)
    replace_all({Path("profiles/h100.yaml"): text, ...})    # every file written first, then all moved in

A temporary name is ``.NAME.primus-ext-PID-RANDOM.KIND``: the pid tells ``sweep`` whether its process still runs,
the 64 random bits (``secrets``) make the name unguessable, and ``claim`` creates it with ``O_CREAT | O_EXCL |
O_NOFOLLOW``: a file or a symlink already there is an error, never written through.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import secrets
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

BACKUP_SUFFIX = ".bak"
MAX_BACKUPS = 99
"""Backup generations kept beside a recipe (``.bak``, ``.bak.2`` .. ``.bak.99``); the first is never replaced."""

_TEMP = re.compile(r"\.primus-ext-(\d+)(?:-[0-9a-f]+)?\.[a-z.]+$")
_EXCLUSIVE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def claim(path: Path, mode: int = 0o600) -> int:
    """Create ``path`` for writing, only if nothing (no file, no symlink) is there: a file descriptor."""
    return os.open(path, _EXCLUSIVE, mode)


def temp_path(target: Path, kind: str = "tmp") -> Path:
    """A fresh temporary name for ``target`` (``kind``: ``tmp``, ``check.yaml``): this process's id, for ``sweep``,
    and 64 random bits, so nobody can plant a link at the name before it is claimed (``claim``)."""
    return target.with_name(f".{target.name}.primus-ext-{os.getpid()}-{secrets.token_hex(8)}.{kind}")


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
            fd = claim(candidate)
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


def _write_fd(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


@contextlib.contextmanager
def private_file(target: Path, data: bytes, *, kind: str = "check.yaml") -> Iterator[Path]:
    """A file holding ``data`` beside ``target`` (relative presets resolve from its folder as they will for the
    target), at a fresh name claimed with ``O_EXCL``, removed when the block ends (with a backup a writer took of
    it); the leftovers of killed runs beside ``target`` are swept first."""
    sweep(target)
    probe = temp_path(target, kind)
    _write_fd(claim(probe), data)
    try:
        yield probe
    finally:
        for leftover in (probe, Path(str(probe) + BACKUP_SUFFIX)):
            with contextlib.suppress(OSError):
                leftover.unlink()


def replace_all(texts: Mapping[Path, str | bytes]) -> None:
    """Write every file first (each at a fresh name beside its target, claimed with ``O_EXCL``, ``fsync``-ed),
    then move each into place with ``os.replace``: a full disk or a Ctrl-C while writing leaves every target as it
    was and no temporary file behind. A target that is a symlink is written through (as ``atomic_output`` does);
    only the temporary names are never followed. No input check here: its caller (``hardware.write_profiles``)
    refuses an input other than the profiles a refit rewrites on purpose."""
    temps: dict[Path, Path] = {}
    try:
        for named, data in texts.items():
            target = Path(os.path.realpath(named))
            sweep(target)
            tmp = temp_path(target)
            fd = claim(tmp, 0o666)
            temps[target] = tmp
            _write_fd(fd, data.encode("utf-8") if isinstance(data, str) else data)
        for target, tmp in temps.items():
            if target.is_file():
                shutil.copymode(target, tmp)
            os.replace(tmp, target)
    except BaseException:
        for tmp in temps.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise
