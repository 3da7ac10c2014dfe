"""The launch gate: a memory verdict (``margin_verdict``) as the exit code a scheduler reads, and the sentence said
with it on standard error. Every gate asks here: ``project`` (and ``--memory-only``), ``train --projection-only``,
and the Primus / Megatron-LM launcher hooks (``launcher.projection_only``).

    from primus_ext.model.memory import gate_exit, gate_note
    code = gate_exit(memory)               # 0 fits / over the margin, 4 within the model's error, 3 out of memory
    code = gate_exit(memory, strict=True)  # over the margin exits 4 too: a scheduler that wants the margin free
    note = gate_note(memory)               # the figures behind a 4 (or the margin's warning); None when it fits

=====  =====================================================================================================
code   verdict
=====  =====================================================================================================
0      ``fits``; ``over the margin`` (inside the HBM, inside the 5 % kept free: a warning) unless ``strict``
2      illegal input (every ``PrimusExtError``; decided before any verdict)
3      ``out of memory``: over the capacity by more than ``MEMORY_ERROR``
4      ``within the model's error``: over the capacity by at most ``MEMORY_ERROR``, so it may or may not fit;
       do not launch it unattended. With ``strict``: ``over the margin`` too
=====  =====================================================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from primus_ext.model.memory.estimate import DEFAULT_MARGIN, MEMORY_ERROR, margin_verdict

if TYPE_CHECKING:
    from primus_ext.model.memory.estimate import Memory

EXIT_FITS = 0
"""Projected to fit (or inside the margin, a warning, without ``strict``)."""
EXIT_ILLEGAL = 2
"""Same code as every ``PrimusExtError`` (the CLI's domain errors)."""
EXIT_OUT_OF_MEMORY = 3
"""Projected peak over the GPU's HBM by more than the memory model's demonstrated error."""
EXIT_WITHIN_ERROR = 4
"""Over capacity by at most ``MEMORY_ERROR`` (may or may not fit), or, with ``strict``, inside the margin."""

VERDICT_EXITS = {"fits": EXIT_FITS, "over the margin": EXIT_FITS, "within the model's error": EXIT_WITHIN_ERROR,
                 "out of memory": EXIT_OUT_OF_MEMORY}
"""``margin_verdict`` -> the gate's exit code (without ``strict``)."""

_GIB = 1024**3


def gate_verdict(memory: Memory | None) -> str:
    """The memory verdict of an estimate (``fits`` when there is none to give)."""
    return "fits" if memory is None else margin_verdict(memory.peak_bytes, memory.capacity_bytes)


def gate_exit(memory: Memory | None, *, strict: bool = False) -> int:
    """The exit code of the gate for ``memory`` (module table); ``strict``: ``over the margin`` exits 4."""
    verdict = gate_verdict(memory)
    if strict and verdict == "over the margin":
        return EXIT_WITHIN_ERROR
    return VERDICT_EXITS[verdict]


def gate_note(memory: Memory | None, *, strict: bool = False) -> str | None:
    """The line said on standard error with exit 4, or with the margin's warning; ``None`` for ``fits`` and for
    ``out of memory`` (its stages are said by the caller)."""
    verdict = gate_verdict(memory)
    if memory is None or verdict in ("fits", "out of memory"):
        return None
    peak, cap = memory.peak_bytes / _GIB, memory.capacity_bytes / _GIB
    if verdict == "within the model's error":
        over = memory.peak_bytes / memory.capacity_bytes - 1.0
        return (f"over capacity, within the model's error (exit {EXIT_WITHIN_ERROR}): projected peak {peak:.1f} of "
                f"{cap:.1f} GiB per GPU, {over:.1%} over, inside the {MEMORY_ERROR:.1%} the memory model has been "
                "off on runs that ran (benchmarks/memory_error.py: real runs' device peaks and published runs that "
                "ran, per component): it may or may not fit; do not launch it unattended: measure it (primus-ext "
                "calibrate) or lower the peak")
    code = gate_exit(memory, strict=strict)
    head = f"over the margin (exit {code}, --strict)" if strict else "warning: fits, but"
    return (f"{head} inside the {DEFAULT_MARGIN:.0%} memory margin: projected peak {peak:.1f} of {cap:.1f} GiB per "
            f"GPU ({cap - peak:.1f} GiB free); what the memory model cannot see may not fit there")
