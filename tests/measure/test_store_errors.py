"""Issue 47: every SQLite failure is a sentence with the path and the fix; a corrupt default store is moved aside."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from primus_ext.measure.store import TimingStore, default_store_path, open_store_file
from primus_ext.measure.store_open import StoreError


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIMUS_EXT_CACHE", str(tmp_path / "cache"))
    return default_store_path()


@pytest.mark.parametrize("content", [b"hello, not a database\n", b"SQLite format 3\x00" + b"\xff" * 400])
def test_a_corrupt_default_store_is_moved_aside(cache, content, capsys):
    cache.parent.mkdir(parents=True)
    cache.write_bytes(content)
    with TimingStore(device="any", versions="any") as store:
        assert store.layer_rows() == []
    aside = [p for p in cache.parent.iterdir() if ".unreadable-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes() == content  # nothing deleted
    assert "moved to" in capsys.readouterr().err


def test_a_given_store_is_never_moved(tmp_path):
    path = tmp_path / "mine.sqlite"
    path.write_text("not a database")
    with pytest.raises(StoreError, match=r"mine\.sqlite.*move it away or delete it"):
        TimingStore(path, device="any", versions="any")
    assert path.read_text() == "not a database"


def test_a_folder_and_another_layout_are_named(tmp_path):
    with pytest.raises(StoreError, match="is a folder"):
        TimingStore(tmp_path, device="any")
    other = tmp_path / "other.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE calibrations (x INTEGER)")
    db.commit()
    db.close()
    before = _digest(other)
    with pytest.raises(StoreError, match=r"other\.sqlite"):
        TimingStore(other, device="any")
    assert _digest(other) == before  # a refusal changes nothing


def test_reading_leaves_the_file_as_it_was(tmp_path):
    path = tmp_path / "s.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE unrelated (x INTEGER)")
    db.commit()
    db.close()
    before = _digest(path)
    with open_store_file(path, device="any", reading=True) as store:
        assert store.layer_rows() == [] and store.calibrations() == []
    assert _digest(path) == before


def test_a_read_only_store_reads_and_refuses_writes_with_the_fix(tmp_path):
    path = tmp_path / "ro.sqlite"
    TimingStore(path, device="any", versions="any").close()
    path.chmod(0o444)  # read-only for a user; root writes anyway, so the store is also opened read-only here
    with TimingStore(path, device="any", versions="any", reading=True) as store:
        assert store.read_only and store.calibrations() == []
        with pytest.raises(StoreError, match=r"read-only.*PRIMUS_EXT_CACHE"):
            store.record_calibration(key="k", model="m", gpu="g", precision="bf16", record={})


def test_a_record_that_is_not_json_is_skipped_with_a_warning(tmp_path, capsys):
    path = tmp_path / "s.sqlite"
    with TimingStore(path, device="any", versions="any") as store:
        store._put("calibrations", {"key": "k", "model": "m", "gpu": "g", "precision": "bf16", "record": "{cut"})
        store._commit()
        assert store.calibrations() == []
    assert "not JSON" in capsys.readouterr().err


class _FullDisk:
    def execute(self, *_a, **_k):
        raise sqlite3.OperationalError("database or disk is full")

    def commit(self):
        raise sqlite3.OperationalError("database or disk is full")

    def close(self):
        pass


def test_a_full_disk_names_the_store_and_the_fix(tmp_path):
    store = TimingStore(tmp_path / "s.sqlite", device="any", versions="any")
    store._db.close()
    store._db = _FullDisk()
    with pytest.raises(StoreError, match=r"s\.sqlite: database or disk is full; free space"):
        store.record_calibration(key="k", model="m", gpu="g", precision="bf16", record={})


def test_a_fifo_store_is_refused_before_sqlite_opens_it(tmp_path, cache):
    """A FIFO as a store (``--store``, or a store only read for its calibration / cluster records) blocked SQLite's
    open for ever (the hostile campaign's ``fs/fifo-as-store``); refused at once, the default store too."""
    import os

    from primus_ext.calibration import load_records
    from primus_ext.calibration.cluster import load_cluster_records

    fifo = tmp_path / "s.sqlite"
    os.mkfifo(fifo)
    for read in (lambda: TimingStore(fifo, device="any", versions="any", reading=True),
                 lambda: load_records(fifo), lambda: load_cluster_records(fifo)):
        with pytest.raises(StoreError, match="not a regular file"):
            read()
    cache.parent.mkdir(parents=True)
    os.mkfifo(cache)
    with pytest.raises(StoreError, match="not a regular file"):
        TimingStore(device="any", versions="any")
    assert not [p for p in cache.parent.iterdir() if ".unreadable-" in p.name]  # not moved aside
