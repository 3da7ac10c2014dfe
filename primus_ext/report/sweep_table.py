"""Terminal table of a scaling sweep (``primus_ext.sweep``): one row per node count.

    print(format_sweep(result))          # result: primus_ext.sweep.Sweep

Columns: nodes, GPUs, tok/s/GPU, step (s), MFU, the memory peak (GiB) and its verdict, the GPU-hours and the wall
hours to train the sweep's tokens. A node count that does not project shows dashes; its reason follows the table.
"""

from __future__ import annotations

from primus_ext.sweep import Sweep, SweepRow

GIB = 2**30
HEADERS = ["nodes", "GPUs", "tok/s/GPU", "step (s)", "MFU", "peak GiB", "memory"]


def tokens_label(tokens: float) -> str:
    """``1B``, ``250B``, ``1T``, ``15T``; else the number in three significant digits."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if tokens >= scale and float(tokens / scale).is_integer():
            return f"{tokens / scale:.0f}{suffix}"
    return f"{tokens:.3g}"


def _hours(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _cells(row: SweepRow) -> list[str]:
    p = row.projection
    if p is None:
        return [str(row.nodes), "-", "-", "-", "-", "-", "not projected", "-", "-"]
    from primus_ext.model.memory import margin_verdict

    memory = p.memory
    peak = "-" if memory is None else f"{memory.peak_bytes / GIB:.1f}"
    verdict = "-" if memory is None else margin_verdict(memory.peak_bytes, memory.capacity_bytes)
    return [str(row.nodes), str(row.gpus), f"{p.tokens_per_s_per_gpu:,.0f}", f"{p.step_time_s:.3f}", f"{p.mfu:.1%}",
            peak, verdict, _hours(row.gpu_hours), _hours(row.wall_hours)]


def format_sweep(result: Sweep) -> str:
    """The header (model, GPU, tokens), the table, then each refused node count with its reason."""
    label = tokens_label(result.tokens)
    headers = [*HEADERS, f"GPU-hours/{label} tok", f"hours/{label} tok"]
    table = [headers, *(_cells(r) for r in result.rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(headers))]
    first = result.first
    lines = []
    if first is not None:
        p, gpu = first.projection, first.projection.system.gpu
        lines += [f"Scaling sweep: {p.model.name} on {p.system.name} ({gpu.gpus_per_node} x {gpu.name} per node), "
                  f"{label} tokens", ""]
    for n, cells in enumerate(table):
        lines.append("  ".join(c.ljust(w) if i == 6 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    refused = [r for r in result.rows if not r.projected]
    if refused:
        lines += ["", "not projected:"] + [f"  {r.nodes} node(s): {r.reason}" for r in refused]
    return "\n".join(lines)
