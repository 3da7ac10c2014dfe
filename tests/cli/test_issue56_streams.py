"""Issue 56, part 6: standard output or error that refuses a write (``> /dev/full``, ``>&-``) ends the command with
exit code 74 (``EX_IOERR``) and one line saying so, never a traceback (exit 120 with a traceback from the progress
writer, before). Run as the issue ran it: a real shell redirection in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "llama3.1_8B-pretrain.yaml"
PROJECT = f"{sys.executable} -m primus_ext project {RECIPE} --cluster h100 --nodes 1"
TUNE = f"{sys.executable} -m primus_ext tune {RECIPE} --cluster h100 --nodes 1 --budget 3 --no-regret --strategy tpe"


def _sh(command: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PRIMUS_EXT_CACHE": str(tmp_path)}
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("command", [f"{PROJECT} --json - > /dev/full", f"{PROJECT} > /dev/full",
                                     f"{TUNE} > /dev/full"])
def test_stdout_on_a_full_device_says_so_and_exits_74(tmp_path: Path, command: str) -> None:
    run = _sh(command, tmp_path)
    assert run.returncode == 74, run.stderr
    assert "error: cannot write to standard output: No space left on device" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_stderr_on_a_full_device_ends_quietly_with_74(tmp_path: Path) -> None:
    run = _sh(f"{TUNE} 2>/dev/full; echo rc=$? >&2", tmp_path)  # the progress line's writer met ENOSPC
    assert run.stderr.strip() == "rc=74"


def test_a_closed_stdout_says_so_and_exits_74(tmp_path: Path) -> None:
    run = _sh(f"{PROJECT} >&-", tmp_path)
    assert run.returncode == 74 and "cannot write to standard output: the stream is closed" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_reader_that_leaves_still_costs_nothing(tmp_path: Path) -> None:
    run = _sh(f"{PROJECT} | head -c 10 > /dev/null; exit ${{PIPESTATUS:-0}}", tmp_path)
    assert "Traceback" not in run.stderr and "cannot write" not in run.stderr
