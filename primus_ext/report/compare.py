"""Two projections side by side: rows of figures with the change from A to B, as text or one HTML page.

    from primus_ext.report.compare import compare_rows, format_compare
    from primus_ext.report.html import render_compare_html
    print(format_compare(compare_rows(a, b), ("A: 70B", "B: 70B PP4")))
    Path("compare.html").write_text(render_compare_html(a, b, labels=("A", "B")))

Rows: the layout, the pipeline schedule, tokens/s/GPU, step time (not judged between two GPU counts: compare per
GPU), TFLOP/s, MFU, the memory peak and verdict, the step breakdown (compute, each exposed communication kind,
bubble, optimizer; busiest rank) and the most idle stage. The HTML page holds both full reports (``report.html``)
in two frames of their own (``srcdoc``), so each keeps its charts and zoom; nothing is fetched.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from primus_ext.report.mfu import bf16_mfu, mfu_basis
from primus_ext.report.timeline import COMM_KINDS, stage_idle

GIB = 1024**3


@dataclass(frozen=True, kw_only=True)
class Row:
    """One figure of both projections; ``a`` / ``b`` are ``None`` where a side has no such part."""

    name: str
    a: float | int | str | None
    b: float | int | str | None
    unit: str = ""
    better: str = ""
    """``higher`` or ``lower`` when one direction is an improvement (the change is then judged)."""
    unjudged: str = ""
    """Why the change is not compared (a step time between two GPU counts: ``not comparable: 8 vs 32 GPUs``)."""


def _parts(p: Any) -> dict[str, float]:
    b = p.breakdown
    out = {"compute": b.compute_s * 1e3}
    out |= {f"{c.kind} comm (exposed)": c.exposed_s * 1e3 for c in b.comms}
    out |= {"pipeline bubble": b.bubble_s * 1e3, "optimizer step": b.optimizer_s * 1e3}
    return out


def _most_idle(p: Any) -> str:
    idle = stage_idle(p)
    if not idle:
        return "-"
    worst = max(idle, key=lambda s: s.idle_fraction)
    return f"stage {worst.rank}: {worst.idle_fraction:.1%}"


def layout_label(ex: Any) -> str:
    """``TP8 PP8 VPP8 CP2 EP1 DP8, MBS 1, GBS 1536, seq 8192, fp8``."""
    return (f"TP{ex.tp} PP{ex.pp}" + (f" VPP{ex.vpp}" if ex.vpp > 1 else "")
            + f" CP{ex.cp} EP{ex.ep} DP{ex.dp}, MBS {ex.micro_batch_size}, GBS {ex.global_batch_size}, "
            f"seq {ex.seq_length}, {ex.precision}")


def _mfu_rows(a: Any, b: Any) -> list[Row]:
    """MFU against each side's precision peak, named; beside it, against the BF16 peak when a side runs below
    BF16 (the figure two precisions compare on)."""
    basis = [mfu_basis(p.system.gpu, p.execution.precision) for p in (a, b)]
    name = f"MFU (of the {basis[0]} dense peak)" if basis[0] == basis[1] else "MFU (of each side's precision peak)"
    rows = [Row(name=name, a=a.mfu * 100, b=b.mfu * 100, unit="%", better="higher" if basis[0] == basis[1] else "")]
    if set(basis) - {"BF16", "FP32"}:
        rows.append(Row(name="MFU (of the BF16 dense peak)", unit="%", better="higher",
                        a=bf16_mfu(a.mfu, a.system.gpu, a.execution.precision) * 100,
                        b=bf16_mfu(b.mfu, b.system.gpu, b.execution.precision) * 100))
    return rows


def schedule_label(p: Any) -> str:
    """The pipeline schedule a projection simulated (``1F1B``, ``interleaved 1F1B``, ``DualPipeV``, ...)."""
    from primus_ext.model.pipeline.registry import resolve_schedule

    ex = p.execution
    return resolve_schedule(ex.pipeline_schedule, max(ex.pp, 2), ex.vpp).label


def compare_rows(a: Any, b: Any) -> list[Row]:
    """The figures of projections ``a`` and ``b``, in display order. Between two GPU counts the per-step times
    (step time, its breakdown) are not judged: a step of 32 GPUs does another amount of work per GPU than one of 8;
    the per-GPU figures (tokens/s/GPU, TFLOP/s/GPU, MFU, memory) compare."""
    wa, wb = a.system.world_size, b.system.world_size
    per_step = "lower" if wa == wb else ""
    scales = "" if wa == wb else f"not comparable: {wa:,} vs {wb:,} GPUs (compare per GPU)"
    rows = [
        Row(name="model", a=a.model.name, b=b.model.name),
        Row(name="cluster", a=f"{a.system.world_size} x {a.system.gpu.name}", b=f"{b.system.world_size} x "
            f"{b.system.gpu.name}"),
        Row(name="layout", a=layout_label(a.execution), b=layout_label(b.execution)),
        Row(name="pipeline schedule", a=schedule_label(a), b=schedule_label(b)),
        Row(name="micro-batches", a=a.num_microbatches, b=b.num_microbatches),
        Row(name="tokens/s/GPU", a=a.tokens_per_s_per_gpu, b=b.tokens_per_s_per_gpu, better="higher"),
        Row(name="step time", a=a.step_time_s * 1e3, b=b.step_time_s * 1e3, unit="ms", better=per_step,
            unjudged=scales),
        Row(name="model TFLOP/s/GPU", a=a.model_tflops_per_gpu, b=b.model_tflops_per_gpu, better="higher"),
        *_mfu_rows(a, b),
    ]
    if a.memory is not None or b.memory is not None:
        def peak(p: Any) -> float | None:
            return p.memory.peak_bytes / GIB if p.memory is not None else None

        def verdict(p: Any) -> str | None:
            if p.memory is None:
                return None
            return f"{'fits' if p.memory.fits else 'DOES NOT FIT'} ({p.memory.capacity_bytes / GIB:.1f} GiB HBM)"

        rows += [Row(name="memory peak", a=peak(a), b=peak(b), unit="GiB", better="lower"),
                 Row(name="memory", a=verdict(a), b=verdict(b))]
    pa, pb = _parts(a), _parts(b)
    order = ["compute", *(f"{k} comm (exposed)" for k in COMM_KINDS), "pipeline bubble", "optimizer step"]
    rows += [Row(name=k, a=pa.get(k), b=pb.get(k), unit="ms", better=per_step) for k in order if k in pa or k in pb]
    rows.append(Row(name="most idle stage", a=_most_idle(a), b=_most_idle(b)))
    return rows


def _cell(value: float | int | str | None, unit: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return f"{value:,} {unit}".rstrip()
    text = f"{value:,.1f}" if abs(value) < 1e5 else f"{value:,.0f}"
    return f"{text} {unit}".rstrip()


def change(row: Row) -> str:
    """B against A: ``+12.3 %`` (with ``better`` / ``worse`` where the row has a direction), or blank; the row's
    ``unjudged`` reason instead where it has one."""
    if row.unjudged:
        return row.unjudged
    if not isinstance(row.a, float | int) or not isinstance(row.b, float | int) or isinstance(row.a, bool):
        return "" if row.a == row.b or row.a is None or row.b is None else "differs"
    if row.a == row.b:
        return "="
    if row.a == 0:
        return "new"
    pct = (row.b - row.a) / abs(row.a) * 100
    judged = ""
    if row.better and abs(pct) >= 0.05:
        judged = " better" if (pct > 0) == (row.better == "higher") else " worse"
    return f"{pct:+.1f} %{judged}"


def format_compare(rows: list[Row], labels: tuple[str, str]) -> str:
    """The two sides' names, then a text table: figure, A, B, change."""
    table = [["", "A", "B", "B vs A"]] + [[r.name, _cell(r.a, r.unit), _cell(r.b, r.unit), change(r)]
                                                      for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    lines = [f"A: {labels[0]}", f"B: {labels[1]}", ""]
    for n, row in enumerate(table):
        lines.append("  ".join(c.ljust(w) if i in (0, 3) else c.rjust(w) for i, (c, w) in
                               enumerate(zip(row, widths, strict=True))).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def compare_table_html(rows: list[Row], labels: tuple[str, str]) -> str:
    """The comparison as an HTML table (figure, A, B, change)."""
    head = "".join(f"<th>{html.escape(x)}</th>" for x in ("", *labels, "B vs A"))
    body = "".join(f"<tr><th>{html.escape(r.name)}</th><td class=\"n\">{html.escape(_cell(r.a, r.unit))}</td>"
                   f"<td class=\"n\">{html.escape(_cell(r.b, r.unit))}</td><td>{html.escape(change(r))}</td></tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"
