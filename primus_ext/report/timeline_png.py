"""The step timeline as a PNG (for terminals, CI logs and issue comments).

    from primus_ext.report.timeline_png import timeline_png
    Path("timeline.png").write_bytes(timeline_png(projection))

With matplotlib installed (optional, not a requirement) the figure has axis labels and a legend;
otherwise the PNG is rasterised here and encoded with zlib (one row per pipeline stage, bars in the
colours of ``report.timeline.COLORS``, a legend strip of colour swatches on top, a tick every
10 % of the step at the bottom).
"""

from __future__ import annotations

import importlib.util
import io
import struct
import zlib
from typing import Any

from primus_ext.report.timeline import COLORS, KINDS, Segment, step_segments

WIDTH_PX = 1200
ROW_PX = 22
MARGIN_PX = 12
LEGEND_PX = 22
AXIS_PX = 12


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def encode_png(width: int, height: int, rows: list[bytearray]) -> bytes:
    """8-bit RGB PNG (PNG spec, ISO/IEC 15948: signature, IHDR, IDAT with filter byte 0, IEND)."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def _fill(rows: list[bytearray], x0: int, x1: int, y0: int, y1: int, colour: tuple[int, int, int]) -> None:
    width = len(rows[0]) // 3
    x0, x1 = max(0, x0), min(width, max(x1, x0 + 1))
    run = bytes(colour) * (x1 - x0)
    for y in range(max(0, y0), min(len(rows), y1)):
        rows[y][3 * x0:3 * x1] = run


def rasterise(segments: list[Segment], *, width: int = WIDTH_PX) -> bytes:
    """PNG bytes of the Gantt chart drawn from ``segments`` (no text)."""
    ranks = sorted({s.rank for s in segments}) or [0]
    total = max((s.end_s for s in segments), default=0.0) or 1.0
    height = LEGEND_PX + len(ranks) * ROW_PX + AXIS_PX + 2 * MARGIN_PX
    rows = [bytearray(b"\xff" * (3 * width)) for _ in range(height)]
    for i, kind in enumerate(KINDS):  # legend swatches
        x = MARGIN_PX + i * 40
        _fill(rows, x, x + 28, MARGIN_PX, MARGIN_PX + 12, _rgb(COLORS[kind]))
    top = MARGIN_PX + LEGEND_PX
    scale = (width - 2 * MARGIN_PX) / total
    row_of = {r: i for i, r in enumerate(ranks)}
    for s in segments:
        y = top + row_of[s.rank] * ROW_PX
        _fill(rows, MARGIN_PX + int(s.start_s * scale), MARGIN_PX + round(s.end_s * scale), y + 2,
              y + ROW_PX - 2, _rgb(COLORS[s.kind]))
    axis = top + len(ranks) * ROW_PX + 2
    _fill(rows, MARGIN_PX, width - MARGIN_PX, axis, axis + 1, (120, 120, 120))
    for tick in range(11):
        x = MARGIN_PX + int(tick * (width - 2 * MARGIN_PX - 1) / 10)
        _fill(rows, x, x + 1, axis, axis + 6, (120, 120, 120))
    return encode_png(width, height, rows)


def _matplotlib_png(segments: list[Segment], title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    ranks = sorted({s.rank for s in segments}) or [0]
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(ranks) + 2.2), dpi=100)
    for kind in KINDS:
        for rank in ranks:
            bars = [(s.start_s * 1e3, s.duration_s * 1e3) for s in segments if s.kind == kind and s.rank == rank]
            if bars:
                ax.broken_barh(bars, (rank - 0.4, 0.8), facecolors=COLORS[kind])
    ax.set_yticks(ranks, [f"stage {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(title)
    fig.legend(handles=[Patch(color=COLORS[k], label=k) for k in KINDS], ncol=len(KINDS), loc="lower center",
               frameon=False)
    fig.tight_layout(rect=(0, 0.55 / fig.get_figheight(), 1, 1))  # ~0.55 inch at the bottom for the legend
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def timeline_png(projection: Any, *, use_matplotlib: bool | None = None) -> bytes:
    """PNG bytes of one step's timeline; matplotlib when importable (or when asked), else rasterised here."""
    segments = step_segments(projection)
    if use_matplotlib is None:
        use_matplotlib = importlib.util.find_spec("matplotlib") is not None
    if use_matplotlib:
        title = f"{projection.model.name}: one step on {projection.system.world_size} x {projection.system.gpu.name}"
        return _matplotlib_png(segments, title)
    return rasterise(segments)
