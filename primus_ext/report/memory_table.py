"""A ``Memory`` result as a terminal table (printing only; the numbers come from ``primus_ext.model.memory``;
its JSON is the result schema's memory block, ``primus_ext.results.projection.memory_block``).

Usage::

    from primus_ext.report.memory_table import format_memory_table
    print(format_memory_table(memory))          # primus-ext project --memory-only RECIPE
"""

from __future__ import annotations

from primus_ext.model.memory import Memory, StageMemory

GIB = 1024**3
_COLUMNS = (("params", "params_bytes"), ("grads", "grads_bytes"), ("optimizer", "optimizer_bytes"),
            ("activations", "activations_bytes"), ("other", "other_bytes"), ("total", "total_bytes"))


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
    from primus_ext.model.memory import margin_verdict

    verdict = "fits" if memory.fits else ("DOES NOT FIT" if margin_verdict(memory.peak_bytes, memory.capacity_bytes)
                                          == "out of memory" else "over capacity, within the model's error")
    margin = f" with {memory.margin:.0%} kept free" if memory.margin else ""
    lines = [f"per-GPU memory (GiB), activations: {memory.source}", *_table(headers, rows), "",
             f"peak {memory.peak_bytes / GIB:.2f} GiB on stage {peak_rank} of {memory.capacity_bytes / GIB:.2f} GiB"
             f"{margin}: {verdict} (headroom {memory.headroom_bytes / GIB:+.2f} GiB)",
             f"other on stage {peak_rank}: {_other_parts(memory.peak_stage)}"]
    return "\n".join(lines)
