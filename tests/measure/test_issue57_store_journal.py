"""Issue 57, part 5: a store write cut short (a real ``RLIMIT_FSIZE``) leaves SQLite's journal; the next command
lets SQLite roll it back and says so, instead of calling every projection's store read-only (exit 2).

    python -m pytest -q tests/measure/test_issue57_store_journal.py
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from runlogs import TARGET, TINY, kernel_step, steady, write_log

from primus_ext.calibration import load_records
from primus_ext.cli import main

REPO = Path(__file__).resolve().parents[2]


def _store_with_records(tmp_path: Path, store: Path) -> Path:
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(TINY)
    for i, k in enumerate((1.1, 1.2, 1.3)):
        batch = 64 * (i + 1)
        log = write_log(tmp_path / f"l{i}.log", steady(kernel_step(recipe, k, [f"global_batch_size={batch}"]), 20),
                        global_batch_size=batch)
        assert main(["calibrate", str(recipe), str(log), *TARGET, "--store", str(store), "--follow-log"]) == 0
    return recipe


def _forget_cut_short(store: Path) -> None:
    """`calibrate --forget` in a child whose files may not grow past a limit between the journal's size and the
    store's: the journal is written whole, the store's rewrite fails (EFBIG, as a full disk's ENOSPC)."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    size = store.stat().st_size
    for limit in range(size // 2, size, 4096):
        def cap(limit: int = limit) -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        copy = store.with_name("before.sqlite")
        copy.write_bytes(store.read_bytes())
        run = subprocess.run([sys.executable, "-m", "primus_ext", "calibrate", "--forget", "--store", str(store)],
                             capture_output=True, text=True, env=env, preexec_fn=cap, timeout=120)
        if Path(f"{store}-journal").exists():
            assert run.returncode == 2 and "Traceback" not in run.stderr
            return
        store.write_bytes(copy.read_bytes())  # no journal at this limit: the next one
    pytest.fail("no size limit left a journal")


def test_a_hot_journal_is_rolled_back_and_said(tmp_path: Path, capsys) -> None:
    store = tmp_path / "timings.sqlite"
    recipe = _store_with_records(tmp_path, store)
    before = len(load_records(store))
    _forget_cut_short(store)
    capsys.readouterr()
    assert main(["calibrate", "--list", "--store", str(store)]) == 0
    err = capsys.readouterr().err
    assert "SQLite rolled it back" in err and "read-only" not in err
    assert not Path(f"{store}-journal").exists() and len(load_records(store)) == before  # as before the write
    assert main(["project", str(recipe), *TARGET, "--store", str(store)]) == 0


def test_the_default_store_with_a_hot_journal_projects(tmp_path: Path, capsys, monkeypatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    store = cache / "timings.sqlite"
    recipe = _store_with_records(tmp_path, store)
    _forget_cut_short(store)
    monkeypatch.setenv("PRIMUS_EXT_CACHE", str(cache))
    capsys.readouterr()
    assert main(["project", str(recipe), *TARGET]) == 0
    assert "SQLite rolled it back" in capsys.readouterr().err


def test_a_read_only_store_with_a_hot_journal_names_the_journal(tmp_path: Path, capsys) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes read-only files: the refusal cannot be seen")
    store = tmp_path / "timings.sqlite"
    _store_with_records(tmp_path, store)
    _forget_cut_short(store)
    store.chmod(0o444)
    capsys.readouterr()
    assert main(["calibrate", "--list", "--store", str(store)]) == 2
    assert "journal" in capsys.readouterr().err
