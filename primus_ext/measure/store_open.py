"""Opening the timing store's SQLite file, and every SQLite failure as a sentence with the path and the fix.

    db, read_only = open_database(path, tables, default=True)    # sqlite3.Connection; StoreError otherwise
    with store_errors(path):                                     # sqlite3.Error -> StoreError (exit 2)
        db.execute(...)

What can go wrong, and what is said (``StoreError``: no traceback, exit 2):

- the path is a folder, its folder cannot be created, or the OS refuses it: the path and the reason;
- the file is not an SQLite database (a text file, a truncated or corrupt one, ``file is not a database`` /
  ``database disk image is malformed``): the **default** store (``$PRIMUS_EXT_CACHE/timings.sqlite``) is moved
  aside to ``timings.sqlite.unreadable-<date>`` and a fresh one is made (said on stderr: nothing is deleted, and
  a corrupt cache no longer makes every ``project`` fail); a store given with ``--store`` / ``--out`` is the
  user's file and is never moved: the error says so and how to start a new one;
- a store of an older layout (a table missing columns) gains the missing columns (``ALTER TABLE ... ADD
  COLUMN``; existing rows read them as NULL); a read-only one is read as it is;
- a read-only file or folder: reading works (tables it lacks read as empty); a write says the store is
  read-only and where to write instead;
- a full disk (``database or disk is full``) or an I/O error: the path, and to free space or write elsewhere;
- a write cut short (a full disk, a size limit, a kill) leaves SQLite's journal beside the store: the next open
  lets SQLite roll it back (its own recovery, said on stderr), even for a command that only reads; a store it may
  not write is refused naming the journal; a journal SQLite cannot roll back is, for the default store, moved
  aside with it as an unreadable store is (said), and for a store given by path an error naming both files.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from primus_ext.errors import PrimusExtError

Columns = Sequence[tuple[str, str]]

_UNREADABLE = ("file is not a database", "malformed", "not a database", "file is encrypted", "has no column named")
"""SQLite's messages for a file that is not (or no longer) a database."""


class StoreError(PrimusExtError):
    """The timing store cannot be opened, read or written; the message names the file and the fix."""


class _Unrecoverable(StoreError):
    """A write cut short left a journal SQLite could not roll back (the default store is then moved aside)."""


def _recover(path: Path) -> None:
    """A write cut short (a full disk, a size limit, a kill) leaves SQLite's rollback journal beside the store
    (``PATH-journal``, a "hot journal"); a read-only open cannot undo it and SQLite then calls the store read-only.
    Open it once for writing, so SQLite rolls the interrupted write back (its own recovery), and say so; a store
    that may not be written is refused naming the journal; a journal SQLite cannot roll back is ``_Unrecoverable``.
    A journal still there after the read belongs to a write in progress in another process: left alone."""
    journal = Path(f"{path}-journal")
    try:
        if not journal.is_file() or journal.stat().st_size == 0:
            return
    except OSError:
        return
    if not _writable(path):
        raise StoreError(f"timing store {path} holds a write that was cut short (its journal {journal}); SQLite "
                         "undoes it when it may write the store, and it may not: make the store and its folder "
                         "writable once (chmod u+w) and run again, or move both files away to start a new store")
    try:
        db = sqlite3.connect(path)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # a read rolls a hot journal back
        finally:
            db.close()
    except sqlite3.Error as err:
        raise _Unrecoverable(f"timing store {path}: a write cut short left its journal {journal}, and SQLite could "
                             f"not roll it back ({err}); move both files away to start a new store, or give another "
                             "with --store") from None
    if not journal.exists() or journal.stat().st_size == 0:
        print(f"note: timing store {path}: a write cut short (a full disk, a size limit, a kill) had left its journal "
              f"{journal}; SQLite rolled it back: the store is as it was before that write", file=sys.stderr)


def _why(path: Path, err: BaseException) -> str:
    text = str(err)
    low = text.lower()
    if any(s in low for s in _UNREADABLE):
        return (f"timing store {path} is not a readable SQLite database ({text}); move it away or delete it to "
                "start a new store, or give another with --store")
    if "readonly" in low or "read-only" in low:
        return (f"timing store {path} is read-only ({text}); make it writable (chmod u+w, and its folder), or "
                "write elsewhere: --store / --out PATH, or export PRIMUS_EXT_CACHE=DIR")
    if "full" in low or "disk i/o" in low:
        return (f"timing store {path}: {text}; free space on its disk, or write elsewhere: --store / --out PATH, "
                "or export PRIMUS_EXT_CACHE=DIR")
    if "unable to open" in low:
        return (f"timing store {path} cannot be opened ({text}); check that it is a file in a folder you can "
                "write, or give another path with --store / --out")
    if "no such column" in low or "has no column" in low or "no such table" in low or "columns but" in low:
        return (f"timing store {path} has another layout ({text}): not a primus-ext timing store; move it away "
                "or give another path with --store / --out")
    return f"timing store {path}: {text}; check the file, or give another with --store / --out"


@contextlib.contextmanager
def store_errors(path: Path) -> Iterator[None]:
    """Every ``sqlite3.Error`` (and the OS's refusals) inside the block as a ``StoreError`` naming ``path``."""
    try:
        yield
    except sqlite3.Error as err:
        raise StoreError(_why(path, err)) from None
    except OSError as err:
        raise StoreError(f"timing store {path}: {err.strerror or err}; check the path and its folder's "
                         "permissions, or give another with --store / --out") from None


def table_columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _schema(db: sqlite3.Connection, tables: Mapping[str, tuple[Columns, Sequence[str]]], read_only: bool) -> None:
    """Create the tables a store lacks (not when read-only); a table without its key columns is another program's
    (``sqlite3.DatabaseError``, said as another layout). Columns an older store lacks are added on its first
    write (``add_missing_columns``), so reading never changes the file."""
    have = {table: table_columns(db, table) for table in tables}
    for table, (_, key) in tables.items():  # every table checked before any is created: a refusal changes nothing
        missing = [k for k in key if have[table] and k not in have[table]]
        if missing:
            raise sqlite3.DatabaseError(f"table {table} has no column named {missing[0]} (has columns but not "
                                        "a primus-ext store's)")
    absent = [table for table in tables if not have[table]]
    if absent and not read_only:
        for table in absent:
            columns, key = tables[table]
            cols = ", ".join(f"{name} {decl}" for name, decl in columns)
            db.execute(f"CREATE TABLE {table} ({cols}, PRIMARY KEY ({', '.join(key)}))")
        db.commit()


def add_missing_columns(db: sqlite3.Connection, table: str, columns: Columns) -> None:
    """Give an older store's ``table`` the columns it lacks (their rows read them as NULL)."""
    have = table_columns(db, table)
    for name, decl in columns:
        if name not in have:  # NOT NULL needs a default on ALTER: the added column is nullable
            db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl.replace(' NOT NULL', '')}")


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)


def _connect(path: Path, tables: Mapping[str, tuple[Columns, Sequence[str]]],
             reading: bool = False) -> tuple[sqlite3.Connection, bool]:
    if str(path) == ":memory:":
        db = sqlite3.connect(":memory:")
        _schema(db, tables, read_only=False)
        return db, False
    if path.is_dir():
        raise StoreError(f"timing store {path} is a folder; give a file path (e.g. {path / 'timings.sqlite'})")
    if path.exists() and not path.is_file():  # a FIFO or a device: SQLite's open would block or read forever
        raise StoreError(f"timing store {path} is not a regular file (a FIFO, socket or device); give the path of a "
                         "store file written by `primus-ext bench`")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        _recover(path)
    read_only = path.exists() and (reading or not _writable(path))
    db = sqlite3.connect(f"{Path(os.path.realpath(path)).as_uri()}?mode=ro", uri=True) if read_only else (
        sqlite3.connect(path))
    try:
        db.execute("PRAGMA schema_version").fetchone()  # reads the header: a text file fails here
        _schema(db, tables, read_only)
    except BaseException:
        db.close()
        raise
    return db, read_only


def open_database(path: Path, tables: Mapping[str, tuple[Columns, Sequence[str]]], *,
                  default: bool, reading: bool = False) -> tuple[sqlite3.Connection, bool]:
    """A connection to the store at ``path`` with its tables, and whether it is read-only. ``default``: the
    user's cache (``default_store_path``): an unreadable one is moved aside and replaced by a fresh store.
    ``reading``: opened read-only (a command that only reads a store never changes its file)."""
    try:
        with store_errors(path):
            return _connect(path, tables, reading)
    except StoreError as err:
        unreadable = isinstance(err, _Unrecoverable) or any(s in str(err).lower() for s in _UNREADABLE)
        if not (default and unreadable and path.is_file()):
            raise
    aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%dT%H%M%S')}")
    with store_errors(path):
        os.replace(path, aside)
        for extra in ("-journal", "-wal", "-shm"):  # SQLite's side files belong to the moved database
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{path}{extra}", f"{aside}{extra}")
    print(f"warning: the timing store {path} was not a readable SQLite database: moved to {aside} (nothing "
          "deleted) and a new empty store started; measurements kept there are not used", file=sys.stderr)
    with store_errors(path):
        return _connect(path, tables, reading)


__all__ = ["StoreError", "add_missing_columns", "open_database", "store_errors", "table_columns"]
