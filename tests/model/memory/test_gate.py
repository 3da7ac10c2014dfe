"""The launch gate's exit code of each memory verdict (issue 53), at the verdicts' edges, with and without strict.

    python -m pytest -q tests/model/memory/test_gate.py
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from primus_ext.model.memory import DEFAULT_MARGIN, MEMORY_ERROR, gate_exit, gate_note

GIB = 1024**3
CAP = 191.2 * GIB


def _memory(peak_gib: float) -> SimpleNamespace:
    return SimpleNamespace(peak_bytes=peak_gib * GIB, capacity_bytes=CAP)


@pytest.mark.parametrize(("peak", "plain", "strict"), [
    (100.0, 0, 0),                                    # fits
    (191.2 * (1 - DEFAULT_MARGIN) + 0.01, 0, 4),      # over the margin: a warning; --strict: 4
    (191.2, 0, 4),                                    # at capacity: still inside the HBM
    (191.21, 4, 4),                                   # just over capacity: within the model's error
    (211.9, 4, 4),                                    # the case: 10.8 % over
    (191.2 * (1 + MEMORY_ERROR) - 0.01, 4, 4),
    (191.2 * (1 + MEMORY_ERROR) + 0.01, 3, 3),        # out of memory
])
def test_each_verdict_has_its_code(peak: float, plain: int, strict: int):
    assert (gate_exit(_memory(peak)), gate_exit(_memory(peak), strict=True)) == (plain, strict)


def test_no_memory_estimate_passes():
    assert gate_exit(None) == gate_exit(None, strict=True) == 0 and gate_note(None) is None


def test_the_notes_carry_the_figures():
    over = gate_note(_memory(211.9))
    assert over is not None and over.startswith("over capacity, within the model's error (exit 4)")
    assert "211.9 of 191.2 GiB per GPU, 10.8% over" in over and "do not launch it unattended" in over
    margin = _memory(185.0)
    assert gate_note(margin).startswith("warning: fits, but inside the 5% memory margin")
    assert gate_note(margin, strict=True).startswith("over the margin (exit 4, --strict)")
    assert gate_note(_memory(100.0)) is None and gate_note(_memory(300.0)) is None  # OOM: the stages, by the caller
