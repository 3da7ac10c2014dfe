"""The step timeline as a PNG, drawn with matplotlib (for terminals, CI logs and issue comments).

    from primus_ext.report.timeline_png import timeline_png
    Path("timeline.png").write_bytes(timeline_png(projection))

The view is the HTML report's overview (``report.timeline.view_windows``): warm-up, the steady state from
the middle of the step and cool-down with the step tail, to one scale, each elided stretch shown as a break
in the time axis. One row per pipeline stage, a colour per op and per exposed communication
kind (``report.timeline.COLORS``), a legend, the time in one unit (ms or s) on the axis.
"""

from __future__ import annotations

import io
from typing import Any

from primus_ext.report import timeline

WIDTH_IN = 13.0
DPI = 100
ROW_IN = 0.32
_BREAK_GAP = 0.03
"""Space between the panels of a broken axis, as a fraction of the panel width."""


def _unit(span_s: float) -> tuple[float, str]:
    return (1.0, "s") if span_s >= 2.0 else (1e3, "ms")


def timeline_figure(segments: list[timeline.Segment], windows: list[tuple[float, float]], title: str) -> Any:
    """A matplotlib ``Figure`` of ``segments`` over ``windows`` (one panel per window, shared stage axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    ranks = sorted({s.rank for s in segments}) or [0]
    span = sum(b - a for a, b in windows) or 1.0
    factor, unit = _unit(span)
    height = ROW_IN * len(ranks) + 1.9
    fig, axes = plt.subplots(1, len(windows), sharey=True, squeeze=False, figsize=(WIDTH_IN, height), dpi=DPI,
                             gridspec_kw={"width_ratios": [b - a for a, b in windows], "wspace": _BREAK_GAP})
    present = set()
    for ax, (lo, hi) in zip(axes[0], windows, strict=True):
        bars: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for s in segments:
            if s.end_s > lo and s.start_s < hi:
                start = max(s.start_s, lo)
                bars.setdefault((s.kind, s.rank), []).append((start * factor, (min(s.end_s, hi) - start) * factor))
        for (kind, rank), spans in sorted(bars.items(), key=lambda kv: timeline.KINDS.index(kv[0][0])):
            present.add(kind)
            ax.broken_barh(spans, (rank - 0.42, 0.84), facecolors=timeline.COLORS[kind], linewidth=0)
        ax.set_xlim(lo * factor, hi * factor)
        ax.set_xlabel(f"time in the step ({unit})")
    for left, right in zip(axes[0][:-1], axes[0][1:], strict=True):  # the break: // marks, no spine between
        left.spines["right"].set_visible(False)
        right.spines["left"].set_visible(False)
        right.tick_params(left=False)
        for ax, x in ((left, 1.0), (right, 0.0)):
            ax.plot([x - 0.01, x + 0.01], [-0.02, 0.02], transform=ax.transAxes, color="k", clip_on=False, lw=1)
    axes[0][0].set_yticks(ranks, [f"stage {r}" for r in ranks])
    axes[0][0].set_ylim(max(ranks) + 0.6, min(ranks) - 0.6)
    elided = f" (between the panels, {timeline.elided_s(windows):,.2f} s repeating the steady state elided)" \
        if len(windows) > 1 else ""
    fig.suptitle(title + elided, fontsize=11)
    kinds = [k for k in timeline.KINDS if k in present]
    fig.legend(handles=[Patch(color=timeline.COLORS[k], label=timeline.LABELS[k]) for k in kinds],
               ncol=min(len(kinds), 7), loc="lower center", frameon=False, fontsize=9)
    fig.subplots_adjust(left=0.07, right=0.99, top=1 - 0.45 / height, bottom=1.25 / height)
    return fig


def timeline_png(projection: Any) -> bytes:
    """PNG bytes of one step's timeline (see the module docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    segments = timeline.step_segments(projection)
    title = f"{projection.model.name}: one step on {projection.system.world_size} x {projection.system.gpu.name}"
    if timeline.drawn(projection):
        fig = timeline_figure(segments, timeline.view_windows(projection, segments), title)
    else:
        fig = plt.figure(figsize=(WIDTH_IN, 1.2), dpi=DPI)
        fig.text(0.01, 0.5, f"{title}\n{timeline.not_drawn_note(projection)}", va="center", fontsize=9, wrap=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
