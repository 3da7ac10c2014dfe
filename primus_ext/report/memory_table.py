"""A ``Memory`` result as a terminal table or a JSON-ready dict (printing only; the numbers come from
``primus_ext.model.memory``).

Usage::

    from primus_ext.report.memory_table import format_memory_table, memory_to_dict
    print(format_memory_table(memory))          # primus-ext project --memory-only RECIPE
    json.dumps(memory_to_dict(memory))          # primus-ext project --memory-only RECIPE --json

JSON keys: ``peak_gib``, ``capacity_gib``, ``headroom_gib``, ``fits``, ``margin``, ``source``,
``peak_rank`` and ``stages`` (per pipeline rank: ``rank``, ``params_gib``, ``grads_gib``,
``optimizer_gib``, ``activations_gib``, ``other_gib``, ``total_gib``, ``microbatches_in_flight``,
``detail`` with every named part in GiB, counts as numbers).
"""

from __future__ import annotations

from typing import Any

from primus_ext.model.memory import Memory, StageMemory

GIB = 1024**3
_COLUMNS = (("params", "params_bytes"), ("grads", "grads_bytes"), ("optimizer", "optimizer_bytes"),
            ("activations", "activations_bytes"), ("other", "other_bytes"), ("total", "total_bytes"))


def _gib(value: float) -> float:
    return round(value / GIB, 3)


def _stage_dict(stage: StageMemory) -> dict[str, Any]:
    out: dict[str, Any] = {"rank": stage.rank}
    for name, attr in _COLUMNS:
        out[f"{name}_gib"] = _gib(getattr(stage, attr))
    out["microbatches_in_flight"] = round(stage.microbatches_in_flight, 3)
    out["detail"] = {key: (value if key.endswith("count") else _gib(value)) for key, value in stage.detail.items()}
    return out


def memory_to_dict(memory: Memory) -> dict[str, Any]:
    """The same numbers as the table, in GiB (parameter counts as numbers)."""
    return {
        "peak_gib": _gib(memory.peak_bytes),
        "capacity_gib": _gib(memory.capacity_bytes),
        "headroom_gib": _gib(memory.headroom_bytes),
        "fits": memory.fits,
        "margin": memory.margin,
        "source": memory.source,
        "peak_rank": memory.peak_stage.rank,
        "stages": [_stage_dict(s) for s in memory.stages],
    }


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))
    body = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return [line, "-" * len(line), *body]


def _other_parts(stage: StageMemory) -> str:
    # a negative part is memory the sum of the others counts but no phase holds at once
    parts = {k.removeprefix("other."): v for k, v in stage.detail.items() if k.startswith("other.") and v}
    return ", ".join(f"{k} {v / GIB:.2f}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]))


def format_memory_table(memory: Memory) -> str:
    """Per-stage breakdown (GiB), the peak stage's "other" parts and the verdict."""
    headers = ["stage", *(name for name, _ in _COLUMNS), "in-flight"]
    rows = []
    peak_rank = memory.peak_stage.rank
    for stage in memory.stages:
        label = f"{stage.rank}{'*' if stage.rank == peak_rank else ''}"
        rows.append([label, *(f"{getattr(stage, attr) / GIB:.2f}" for _, attr in _COLUMNS),
                     f"{stage.microbatches_in_flight:.2f}"])
    verdict = "fits" if memory.fits else "DOES NOT FIT"
    margin = f" with {memory.margin:.0%} kept free" if memory.margin else ""
    lines = [f"per-GPU memory (GiB), activations: {memory.source}", *_table(headers, rows), "",
             f"peak {memory.peak_bytes / GIB:.2f} GiB on stage {peak_rank} of {memory.capacity_bytes / GIB:.2f} GiB"
             f"{margin}: {verdict} (headroom {memory.headroom_bytes / GIB:+.2f} GiB)",
             f"other on stage {peak_rank}: {_other_parts(memory.peak_stage)}"]
    return "\n".join(lines)
