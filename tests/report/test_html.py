"""The HTML report: self-contained, and legible in a real headless Chromium at production scale.

Chromium: Debian's ``chromium`` package (``.ci/run`` installs it); the browser tests skip cleanly when absent.
The page's script records on each chart's SVG what it drew (``data-ops``: op rectangles at least 1 px wide,
``data-ops-min`` the fewest on one stage, ``data-op-px`` their median width, ``data-comm`` the communication
kinds drawn, ``data-overflow`` text boxes leaving the SVG); the tests read them from the rendered DOM and
check the screenshot's pixels. ``docs/report_screenshot.py`` makes the README's picture the same way.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from primus_ext.report.html import ReportInputs, breakdown_parts, render_html, report_data
from primus_ext.report.timeline import COLORS, step_ops

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
WINDOW = (1200, 900)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")


def test_breakdown_parts_add_up_to_the_step(projection):
    total_ms = sum(p["ms"] for p in breakdown_parts(projection.breakdown))
    assert total_ms == pytest.approx(projection.breakdown.total_s * 1e3, rel=1e-9)


def test_page_is_self_contained(projection):
    page = render_html(projection, inputs=ReportInputs(recipe="tiny.yaml", overrides=("a=1",)))
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # no network fetches
    data = json.loads(re.search(r'<script id="report-data" type="application/json">(.*?)</script>', page,
                                re.S).group(1))
    assert len(data["timeline"]["ops"]) == 6 * len(step_ops(projection))
    assert len(data["memory"]["stages"]) == 4
    assert "tiny.yaml" in page and "a=1" in page and "Idle time per pipeline stage" in page
    verified = render_html(projection, verify={"measured_step_s": 0.125, "projected_step_s": 0.1, "error_pct": -20.0})
    assert "Measured vs projected" in verified and "0.125" in verified and "-20" in verified


def _browse(page: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
           *extra, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=True)


def _svgs(dom: str) -> list[dict[str, str]]:
    """The attributes of every chart SVG, in page order: overview, detail, breakdown, memory."""
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', tag)) for tag in re.findall(r"<svg[^>]*>", dom)]


def _count(png: Path, colour: str) -> tuple[int, int, int]:
    import matplotlib.image
    import numpy as np

    image = matplotlib.image.imread(png)[..., :3]
    rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    return image.shape[1], image.shape[0], int((np.abs(image - rgb).max(axis=-1) < 1.5 / 255).sum())


@needs_chromium
def test_charts_are_drawn_in_headless_chromium(projection, tmp_path: Path):
    page = tmp_path / "projection.html"
    page.write_text(render_html(projection), encoding="utf-8")
    dom = _browse(page, tmp_path, "--dump-dom").stdout
    assert 'data-rendered="yes"' in dom  # the inline script ran to the end
    overview, detail, breakdown, memory = _svgs(dom)
    assert int(overview["data-ops"]) == len(step_ops(projection))  # 4 stages x 8 ops, each wide enough
    assert int(overview["width"]) > 1100  # the chart follows the window's width
    data = report_data(projection)
    assert int(breakdown["data-drawn"]) == sum(1 for p in data["breakdown"] if p["ms"] > 0)
    expected_mem = sum(1 for s in data["memory"]["stages"] for v in s["parts"].values() if v > 0)
    assert int(memory["data-drawn"]) == expected_mem >= 4 * 3
    assert all(svg["data-overflow"] == "0" for svg in (overview, detail, breakdown, memory))
    assert 'class="capacity"' in dom and dom.count('id="timeline-legend"') == 1
    for legend in ("timeline-legend", "breakdown-legend", "memory-legend"):
        assert re.search(rf'id="{legend}"><span>', dom), legend  # every chart has its legend


@needs_chromium
@pytest.mark.parametrize(("name", "comm"), [("llama405b", {"tp", "cp", "pp"}), ("deepseek_v3", {"ep", "pp"})])
def test_production_recipe_is_legible(name, comm, request, tmp_path: Path):
    """192 x 8 (405B) and 64 x 4 (DeepSeek-V3) micro-batches x chunks: the overview keeps ops apart, the zoomed
    cycle shows a dozen ops per stage with their labels, every exposed comm kind of the recipe is drawn."""
    p = request.getfixturevalue(name)
    page = tmp_path / f"{name}.html"
    page.write_text(render_html(p), encoding="utf-8")
    dom = _browse(page, tmp_path, "--dump-dom").stdout
    overview, detail, *others = _svgs(dom)
    stages = p.execution.pp
    # overview: warm-up, the steady state (PP = 8 cycles: the period of interleaved 1F1B), cool-down: at least 90
    # distinct ops per stage, >= 2 px median
    assert int(overview["data-ops-min"]) >= 90 and float(overview["data-op-px"]) >= 2.0
    assert int(overview["data-ops"]) / int(overview["width"]) > 0.5  # distinct ops per pixel of width
    # the zoomed steady-state cycle: >= 6 ops on every stage, tens of pixels each, labelled
    assert int(detail["data-ops-min"]) >= 6 and float(detail["data-op-px"]) >= 30
    assert comm <= set(detail["data-comm"].split())
    assert len(re.findall(r'<text[^>]*class="in"', dom)) >= 6 * stages
    assert all(svg["data-overflow"] == "0" for svg in (overview, detail, *others))
    shot = tmp_path / f"{name}.png"
    _browse(page, tmp_path, f"--screenshot={shot}")
    width, height, backward = _count(shot, COLORS["backward"])
    assert (width, height) == WINDOW
    _, _, forward = _count(shot, COLORS["forward"])
    kind = "ep" if "ep" in comm else "tp"
    _, _, comm_px = _count(shot, COLORS[kind])
    # both charts' rows are mostly ops: F and B cover thousands of pixels, the comm colour hundreds
    assert backward > 20_000 and forward > 10_000 and comm_px > (5_000 if kind == "ep" else 300)


CLICKS = """<script>
(function () {
  const out = [], detail = () => document.querySelector('#detail svg');
  const state = () => out.push(['data-ops', 'data-op-px', 'data-drawn'].map(a => detail().getAttribute(a)));
  state();
  for (const act of ['zoom-in', 'zoom-out', 'zoom-out', 'pan-right', 'whole', 'steady']) {
    document.querySelector('button[data-act="' + act + '"]').click(); state();
  }
  detail().dispatchEvent(new WheelEvent('wheel', {deltaY: -100, clientX: 600, bubbles: true, cancelable: true}));
  state();
  document.body.setAttribute('data-clicks', JSON.stringify(out));
})();
</script></body>"""


@needs_chromium
def test_zoom_controls_redraw_the_detail(llama405b, tmp_path: Path):
    page = tmp_path / "zoom.html"
    page.write_text(render_html(llama405b).replace("</body>", CLICKS), encoding="utf-8")
    dom = _browse(page, tmp_path, "--dump-dom").stdout
    clicks = json.loads(re.search(r"data-clicks=\"([^\"]*)\"", dom).group(1).replace("&quot;", '"'))
    ops = [int(n) for n, _, _ in clicks]
    px = [float(w) for _, w, _ in clicks]
    steady, zoom_in, _, zoom_out2, panned, whole, back, wheel = ops
    assert zoom_in < steady < zoom_out2 and panned > 0  # + halves the window, - doubles it
    assert px[1] > px[0] > px[3]  # ops get wider zooming in, narrower zooming out
    # the whole step: 3 072 ops per stage, all below a pixel, drawn as one bar per pixel and stage
    assert whole == 0 and int(clicks[5][2]) > 8 * 1000
    assert back == steady and wheel < back  # back to the steady-state cycle; the wheel zooms in


def test_project_writes_the_html(tmp_path: Path):
    from primus_ext.cli import main

    out = tmp_path / "report.html"
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "deepseek_v3-pretrain.yaml"
    assert main(["project", str(recipe), "--compute", "analytic", "--html", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "deepseek_v3-pretrain.yaml" in page and "EP all-to-all" in page
