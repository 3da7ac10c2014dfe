"""The HTML report in a real headless Chromium, the timeline segments, and the PNG encoder.

Chromium: Debian's ``chromium`` package (``.ci/run`` installs it); skipped cleanly when absent.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from primus_ext.hardware import load_system
from primus_ext.projection import project
from primus_ext.report.html import ReportInputs, breakdown_parts, render_html, report_data
from primus_ext.report.timeline import COLORS, step_segments, totals_by_kind
from primus_ext.report.timeline_png import encode_png, rasterise
from primus_ext.specs import ExecutionSpec, ModelSpec

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def projection():
    model = ModelSpec(name="small", num_layers=8, hidden_size=2048, ffn_hidden_size=5504, num_attention_heads=16,
                      num_query_groups=4, kv_channels=128, vocab_size=32000)
    execution = ExecutionSpec(tensor_model_parallel_size=2, pipeline_model_parallel_size=4, data_parallel_size=1,
                              micro_batch_size=1, global_batch_size=8, seq_length=2048, precision="bf16")
    return project(model, execution, load_system("h100", 1), None)


def test_segments_cover_the_step_on_every_rank(projection):
    segments = step_segments(projection)
    ranks = sorted({s.rank for s in segments})
    assert ranks == [0, 1, 2, 3]
    tail = (projection.breakdown.comm("dp_grad").exposed_s + projection.breakdown.optimizer_s
            + projection.breakdown.comm("dp_param").exposed_s)
    makespan = max(e.end for e in projection.timeline)
    for rank in ranks:
        totals = totals_by_kind(segments, rank)
        # every rank's bars tile [0, makespan + tail] without overlap
        assert sum(totals.values()) == pytest.approx(makespan + tail, rel=1e-9)
        ops = [s for s in segments if s.rank == rank and s.kind == "forward"]
        assert len(ops) == projection.num_microbatches  # one F per micro-batch (no VPP)
    # 1F1B: the first stage idles (PP-1) forward slots more than the last before its first backward
    assert totals_by_kind(segments, 0)["bubble"] > totals_by_kind(segments, 3)["bubble"]


@pytest.mark.parametrize(("pp", "vpp"), [(4, 2), (1, None)])
def test_segments_span_the_step_under_ep_overlap(pp, vpp):
    """Passes without a partner micro-batch run longer (their EP all-to-all exposed): the Gantt still ends at the
    step time, from the simulated timeline and from the stage times alone (PP=1 without a timeline)."""
    from dataclasses import replace

    model = ModelSpec(name="moe", num_layers=8, hidden_size=2048, ffn_hidden_size=5504, num_attention_heads=16,
                      num_query_groups=4, kv_channels=128, vocab_size=32000, num_experts=16, moe_router_topk=2,
                      moe_ffn_hidden_size=1024, moe_layer_pattern=(True,) * 8)
    execution = ExecutionSpec(pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp,
                              data_parallel_size=16 // pp, expert_model_parallel_size=16 // pp, micro_batch_size=1,
                              global_batch_size=8 * 16 // pp, seq_length=2048, precision="bf16",
                              use_distributed_optimizer=True, overlap_moe_expert_parallel_comm=True)
    p = project(model, execution, load_system("h100", 2), None)
    assert p.breakdown.comm("ep").exposed_s > 0
    for q in (p, replace(p, timeline=())) if pp == 1 else (p,):
        segments = step_segments(q)
        end = max(s.end_s for s in segments)
        assert end == pytest.approx(q.step_time_s, rel=1e-9)


def test_breakdown_parts_add_up_to_the_step(projection):
    total_ms = sum(p["ms"] for p in breakdown_parts(projection.breakdown))
    assert total_ms == pytest.approx(projection.breakdown.total_s * 1e3, rel=1e-9)


def test_page_is_self_contained(projection):
    page = render_html(projection, inputs=ReportInputs(recipe="tiny.yaml", overrides=("a=1",)))
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # no network fetches
    data = json.loads(re.search(r'<script id="report-data" type="application/json">(.*?)</script>', page,
                                re.S).group(1))
    assert len(data["timeline"]["segments"]) == len(step_segments(projection))
    assert len(data["memory"]["stages"]) == 4
    assert "tiny.yaml" in page and "a=1" in page
    verified = render_html(projection, verify={"measured_step_s": 0.125, "projected_step_s": 0.1, "error_pct": -20.0})
    assert "Measured vs projected" in verified and "0.125" in verified and "-20" in verified


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def _nonwhite(png: bytes, colour: bytes | None = None) -> tuple[int, int, int]:
    """(width, height, pixel count) of an 8-bit RGB(A) non-interlaced PNG (PNG spec filters 0-4): pixels
    that are not white, or exactly ``colour`` (RGB bytes) when given."""
    pos, idat, width, height, ctype = 8, b"", 0, 0, 2
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        tag, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        if tag == b"IHDR":
            width, height, _, ctype = struct.unpack(">IIBB", data[:10])
        elif tag == b"IDAT":
            idat += data
        pos += 12 + length
    bpp = 4 if ctype == 6 else 3
    raw, stride, prev, count = zlib.decompress(idat), width * bpp, bytearray(width * bpp), 0
    for y in range(height):
        filt, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = row[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            row[i] = (row[i] + (0, a, b, (a + b) // 2, _paeth(a, b, c))[filt]) & 0xFF
        pixels = (row[x * bpp:x * bpp + 3] for x in range(width))
        count += sum(1 for px in pixels if (px == colour if colour else px != b"\xff\xff\xff"))
        prev = row
    return width, height, count


def test_png_rasteriser_draws_every_stage(projection):
    png = rasterise(step_segments(projection), width=400)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height, painted = _nonwhite(png)
    assert width == 400 and height > 4 * 22
    assert painted > 0.5 * 4 * 18 * (400 - 24)  # most of the 4 rows' bar area is coloured


def test_matplotlib_png_when_installed(projection):
    pytest.importorskip("matplotlib")
    from primus_ext.report.timeline_png import timeline_png

    png = timeline_png(projection, use_matplotlib=True)
    _, _, backward = _nonwhite(png, bytes.fromhex(COLORS["backward"][1:]))
    assert png.startswith(b"\x89PNG") and backward > 100


def test_encode_png_roundtrip():
    rows = [bytearray(b"\xff\xff\xff\x00\x00\x00"), bytearray(b"\x00\x00\x00\xff\xff\xff")]
    assert _nonwhite(encode_png(2, 2, rows)) == (2, 2, 2)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_charts_are_drawn_in_headless_chromium(projection, tmp_path: Path):
    page = tmp_path / "projection.html"
    page.write_text(render_html(projection), encoding="utf-8")
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=True).stdout
    assert 'data-rendered="yes"' in dom  # the inline script ran to the end
    data = report_data(projection)
    svgs = re.findall(r"<svg[^>]*data-drawn=\"(\d+)\"[^>]*>(.*?)</svg>", dom, re.S)
    assert len(svgs) == 3
    (n_timeline, timeline), (n_memory, memory), (n_parts, _) = svgs
    assert int(n_timeline) == len(data["timeline"]["segments"])
    assert timeline.count("<rect") == int(n_timeline)
    expected_mem = sum(1 for s in data["memory"]["stages"] for v in s["parts"].values() if v > 0)
    assert int(n_memory) == expected_mem == memory.count("<rect") and expected_mem >= 4 * 3
    assert 'class="capacity"' in memory
    assert int(n_parts) == sum(1 for p in data["breakdown"] if p["ms"] > 0)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_screenshot_has_the_gantt_colours(projection, tmp_path: Path):
    page = tmp_path / "projection.html"
    page.write_text(render_html(projection), encoding="utf-8")
    shot = tmp_path / "shot.png"
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
           "--window-size=1200,900", f"--screenshot={shot}", page.as_uri()]
    subprocess.run(cmd, capture_output=True, timeout=90, check=True)
    width, height, backward = _nonwhite(shot.read_bytes(), bytes.fromhex(COLORS["backward"][1:]))
    assert (width, height) == (1200, 900)
    # only the script draws in the backward colour: the Gantt bars (4 rows x 18 px) and the memory
    # bars' activations share it; without the script the count is 0 (21k when drawn at this size)
    assert backward > 4 * 18 * 100
