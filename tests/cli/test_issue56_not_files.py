"""Issue 56, part 4: every file a command reads is a regular file or refused before a byte is read: a recipe, an
``extends:`` parent or a GPU profile at ``/proc/kmsg`` (``stat`` calls it a regular file of size 0; its read waits
for the next kernel message: ``tune`` hung) or a named pipe (said to be "not found")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from primus_ext.cli import main
from primus_ext.files import InputRefused, read_input
from primus_ext.hardware import load_gpu

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "llama3.1_8B-pretrain.yaml"
TUNE = ["tune", "--cluster", "h100", "--nodes", "1", "--budget", "2", "--no-regret"]
KMSG = Path("/proc/kmsg")  # root may open it; anyone may stat it


def test_a_kernel_pseudo_file_is_refused_unread() -> None:
    with pytest.raises(InputRefused, match="kernel pseudo-file"):
        read_input("/proc/self/status", max_bytes=1 << 20)  # readable by anyone, and S_ISREG like /proc/kmsg


@pytest.mark.skipif(not os.access(KMSG, os.R_OK), reason="/proc/kmsg is readable by root only")
def test_tune_of_a_recipe_at_proc_kmsg_is_refused_not_a_hang(tmp_path: Path) -> None:
    parent = tmp_path / "r.yaml"
    parent.write_text(f"extends: {KMSG}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PRIMUS_EXT_CACHE": str(tmp_path)}
    for recipe in (KMSG, parent):  # in a child with a deadline: the hang it was fails the test, not the suite
        run = subprocess.run([sys.executable, "-m", "primus_ext", TUNE[0], str(recipe), *TUNE[1:]],
                             capture_output=True, text=True, env=env, timeout=120)
        assert run.returncode == 2 and "kernel pseudo-file" in run.stderr, run.stderr


def test_a_gpu_profile_linked_to_a_pseudo_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "myk.yaml").symlink_to("/proc/self/status")
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(tmp_path))
    load_gpu.cache_clear()
    try:
        with pytest.raises(Exception, match="kernel pseudo-file"):
            load_gpu("myk")
    finally:
        load_gpu.cache_clear()


def test_a_recipe_or_store_that_is_a_fifo_is_said_to_be_one(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "r.yaml"
    os.mkfifo(fifo)
    assert main([*TUNE[:1], str(fifo), *TUNE[1:]]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert main([*TUNE[:1], str(RECIPE), *TUNE[1:], "--store", str(fifo)]) == 2
    assert "not a regular file" in capsys.readouterr().err
