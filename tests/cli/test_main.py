"""The console entry point: a reader that leaves early silences the output, not the command."""

from __future__ import annotations

import json
import os
import sys

import pytest
from test_validate_cli import ARCH, RUNS

from primus_ext.cli import main


class _ReaderLeavesAfterFirstWrite:
    """A pipe whose reader (``head -1``) has gone after the first write; ``buffered``: writes land in a
    buffer and only the flush (at the end) meets the closed pipe, as a block-buffered stdout does."""

    def __init__(self, buffered: bool = False):
        self.read_end, self.write_end = os.pipe()
        self.buffered = buffered
        self.writes = 0
        self.flushes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        if self.writes > 1 and not self.buffered:
            raise BrokenPipeError(32, "Broken pipe")
        return len(text)

    def flush(self) -> None:
        self.flushes += 1
        if self.writes > 1:
            raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        return self.write_end


@pytest.mark.parametrize("buffered", [False, True])
def test_validate_finishes_and_writes_its_json_when_stdout_is_closed(tmp_path, monkeypatch, buffered):
    (tmp_path / "a.csv").write_text(ARCH)
    (tmp_path / "r.csv").write_text(RUNS)
    pipe = _ReaderLeavesAfterFirstWrite(buffered)
    monkeypatch.setattr(sys, "stdout", pipe)
    out = tmp_path / "v.json"
    try:
        assert main(["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv"), "--json", str(out)]) == 0
    finally:
        os.close(pipe.read_end)
        os.close(pipe.write_end)
    if buffered:
        assert pipe.flushes >= 1  # the held output met the closed pipe inside main, not at exit
    else:
        assert pipe.writes == 2  # silenced after the first failure, not retried line by line
    assert sys.stdout is pipe
    assert json.loads(out.read_text())["summary"]["n_projected"] == 3
