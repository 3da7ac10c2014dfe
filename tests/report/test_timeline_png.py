"""The timeline PNG: matplotlib, the broken axis of the HTML overview, a legend, every comm kind in its colour."""

from __future__ import annotations

import io

import numpy as np

from primus_ext.report.timeline import COLORS, step_segments, view_windows
from primus_ext.report.timeline_png import timeline_figure, timeline_png


def _pixels(png: bytes, colour: str) -> int:
    import matplotlib.image

    image = matplotlib.image.imread(io.BytesIO(png), format="png")[..., :3]
    rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    return int((np.abs(image - rgb).max(axis=-1) < 1.5 / 255).sum())


def test_png_of_a_small_step(projection):
    png = timeline_png(projection)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert _pixels(png, COLORS["backward"]) > 1000 and _pixels(png, COLORS["forward"]) > 500


def test_png_of_deepseek_v3_has_axes_legend_and_ep(deepseek_v3):
    segments = step_segments(deepseek_v3)
    windows = view_windows(deepseek_v3, segments)
    fig = timeline_figure(segments, windows, "DeepSeek-V3")
    try:
        axes = fig.axes
        assert len(axes) == 3  # warm-up | the steady state from the middle | cool-down (the rest elided)
        unit = "s" if sum(b - a for a, b in windows) >= 2.0 else "ms"  # DeepSeek-V3 here: ~2.4 s drawn
        assert axes[0].get_xlabel() == f"time in the step ({unit})"
        assert [t.get_text() for t in axes[0].get_yticklabels()] == [f"stage {r}" for r in range(8)]
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert "EP all-to-all" in legend and "PP send/recv wait" in legend and "idle (bubble)" in legend
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    assert _pixels(timeline_png(deepseek_v3), COLORS["ep"]) > 2000

