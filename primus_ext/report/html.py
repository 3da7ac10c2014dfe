"""The projection as ONE self-contained HTML file (inline SVG + JS, no network, no CDN).

    from primus_ext.report.html import render_html
    Path("projection.html").write_text(render_html(projection, inputs=ReportInputs(recipe="r.yaml")))

Sections: headline figures (and, given a ``baseline``, that projection beside this one: the recipe as
written after auto-tune); the timeline of one step per pipeline stage (``report.timeline``): an overview
with warm-up, the steady state (cycles from the middle of the step, as many as it takes for every stage to be
as busy as over its whole steady state) and cool-down to one scale, the elided stretches marked, and a zoomable
detail (one steady-state cycle by default), ops and every exposed communication kind
in their own colours; the step-time breakdown of the busiest rank with every stage's idle time; per-stage
memory bars against the allocatable HBM; the inputs (recipe, overrides, cluster, execution, cost sources,
notes); and, after a short real run (``--verify``), measured vs projected.

The charts are drawn by the inlined script from a JSON document embedded in the page, so the file
works offline and in any browser; ``tests/report/test_html.py`` renders it in headless Chromium.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from primus_ext.model.memory import capacity_bytes
from primus_ext.projection.result import imbalance
from primus_ext.report import timeline
from primus_ext.report.compare import compare_rows, compare_table_html, layout_label
from primus_ext.report.html_assets import CSS, JS
from primus_ext.report.mfu import mfu_text

GIB = 1024**3
MEMORY_PARTS = ("params", "grads", "optimizer", "activations", "other")
MEMORY_COLORS = {"params": "#4e79a7", "grads": "#76b7b2", "optimizer": "#59a14f", "activations": "#f28e2b",
                 "other": "#bab0ac"}


@dataclass(frozen=True, kw_only=True)
class ReportInputs:
    """What the projection was made from, shown verbatim in the report."""

    recipe: str = ""
    overrides: tuple[str, ...] = ()
    cluster: str = ""
    warnings: tuple[str, ...] = ()
    extra: Mapping[str, str] = field(default_factory=dict)
    """Anything else worth showing (store path, scale, command line)."""


def _us(seconds: float) -> int:
    return round(seconds * 1e6)


def _timeline_doc(projection: Any) -> dict[str, Any]:
    """Ops (rank, kind, start, duration, micro-batch, chunk; µs) and the other segments (rank, kind, start,
    duration): the script splits each op into its compute and layer-comm slices by ``shares``, as
    ``timeline.op_segments`` does."""
    segments = timeline.step_segments(projection)
    kind_index = {k: i for i, k in enumerate(timeline.KINDS)}
    ops = [x for e in timeline.step_ops(projection)
           for x in (e.rank, kind_index[timeline.OP_KIND_OF.get(e.kind, "forward")], _us(e.start), _us(e.end - e.start),
                     e.microbatch, e.chunk)]
    other = [x for s in segments if s.kind not in timeline.OP_KINDS and s.kind not in timeline.LAYER_COMMS
             for x in (s.rank, kind_index[s.kind], _us(s.start_s), _us(s.duration_s))]
    windows = timeline.view_windows(projection, segments)
    total = max((s.end_s for s in segments), default=0.0)
    detail = (0.0, total)
    steady = timeline.steady_window(projection, segments) if len(windows) > 1 else None
    if steady is not None:  # the first cycle of the steady state drawn
        detail = (steady[0], steady[0] + timeline.steady_cycle_s(projection))
    return {
        "kinds": list(timeline.KINDS), "colors": timeline.COLORS, "labels": timeline.LABELS,
        "ranks": sorted({s.rank for s in segments}) or [0],
        "chunks": max(1, projection.execution.vpp), "total_us": _us(total),
        "windows": [[_us(a), _us(b)] for a, b in windows],
        "detail": [_us(detail[0]), _us(detail[1])],
        "shares": [[kind_index[k], v] for k, v in timeline.layer_comm_shares(projection.breakdown)],
        "ops": ops, "other": other,
    }


def _memory_doc(memory: Any) -> dict[str, Any] | None:
    if memory is None:
        return None
    stages = []
    for index, stage in enumerate(memory.stages):
        parts = {p: float(getattr(stage, f"{p}_bytes", 0.0) or 0.0) / GIB for p in MEMORY_PARTS}
        total = float(getattr(stage, "total_bytes", sum(parts.values()) * GIB)) / GIB
        stages.append({"rank": int(getattr(stage, "rank", index)), "parts": parts, "total_gib": total})
    capacity = getattr(memory, "capacity_bytes", None)
    return {"stages": stages, "parts": list(MEMORY_PARTS), "colors": MEMORY_COLORS,
            "capacity_gib": float(capacity) / GIB if capacity else None, "fits": bool(memory.fits),
            "peak_gib": float(memory.peak_bytes) / GIB}


def breakdown_parts(breakdown: Any) -> list[dict[str, Any]]:
    """Named parts of the step (ms) in drawing order; they add up to the breakdown's total."""
    colors = timeline.COLORS
    parts = [{"name": "compute", "ms": (breakdown.compute_s - breakdown.recompute_s) * 1e3, "color": colors["forward"]}]
    if breakdown.recompute_s:
        parts.append({"name": "recompute", "ms": breakdown.recompute_s * 1e3, "color": "#a0cbe8"})
    parts += [{"name": f"{c.kind} comm (exposed)", "ms": c.exposed_s * 1e3, "color": colors.get(c.kind, colors["tp"])}
              for c in breakdown.comms]
    parts.append({"name": "pipeline bubble", "ms": breakdown.bubble_s * 1e3, "color": colors["bubble"]})
    parts.append({"name": "optimizer step", "ms": breakdown.optimizer_s * 1e3, "color": colors["optimizer"]})
    return parts


def report_data(projection: Any, *, verify: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document the page's script draws from."""
    return {"timeline": _timeline_doc(projection), "memory": _memory_doc(projection.memory),
            "breakdown": breakdown_parts(projection.breakdown), "verify": dict(verify) if verify else None}


def _rows(pairs: Sequence[tuple[str, Any]]) -> str:
    return "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in pairs)


def _inputs_html(p: Any, inputs: ReportInputs) -> str:
    m, ex, sy = p.model, p.execution, p.system
    recipe = [("recipe", inputs.recipe or "-"), ("overrides", " ".join(inputs.overrides) or "-")]
    recipe += list(inputs.extra.items())
    cluster = [("cluster", inputs.cluster or sy.name or sy.gpu.name), ("GPU", sy.gpu.name),
               ("nodes x GPUs/node", f"{sy.num_nodes} x {sy.gpu.gpus_per_node} = {sy.world_size}"),
               ("HBM per GPU", f"{capacity_bytes(sy) / GIB:.1f} GiB allocatable ({sy.gpu.hbm_bytes / 1e9:.0f} GB "
                               "datasheet)"),
               ("efficiency calibration", sy.gpu.efficiency.calibration)]
    if getattr(p, "calibration", None) is not None:
        c = p.calibration
        cluster.append(("calibrated from real runs", f"{c.match} match: {c.record}; "
                        + ("kernels" if c.scope == "kernels" else "step") + f" x{c.kernel_factor:.3f}"
                        + (f" + {c.overhead_s * 1e3:.1f} ms/step" if c.overhead_s else "")
                        + (f", memory x{c.memory_factor:.3f}" if c.memory_factor else "")
                        + f"; band +-{c.band:.0%}; uncalibrated step {c.uncalibrated_step_s * 1e3:,.1f} ms"))
    model = [("model", m.name), ("layers", m.num_layers), ("hidden / ffn", f"{m.hidden_size} / {m.ffn_hidden_size}"),
             ("heads / query groups", f"{m.num_attention_heads} / {m.num_query_groups}"),
             ("vocabulary", m.vocab_size)]
    if m.is_moe:
        model.append(("experts / top-k", f"{m.num_experts} / {m.moe_router_topk} ({m.num_moe_layers} MoE layers)"))
    execution = [("layout", layout_label(ex)), ("micro-batches per step", p.num_microbatches),
                 ("schedule", ex.pipeline_schedule), ("recompute", ex.recompute_granularity or "none"),
                 ("distributed optimizer", ex.use_distributed_optimizer), ("FSDP", ex.fsdp)]
    sources = [(kind, src) for kind, src in p.sources.items()]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in (*p.notes, *inputs.warnings))
    return (f"<h3>Recipe</h3><table>{_rows(recipe)}</table><h3>Cluster</h3><table>{_rows(cluster)}</table>"
            f"<h3>Model</h3><table>{_rows(model)}</table><h3>Execution</h3><table>{_rows(execution)}</table>"
            f"<h3>Cost sources</h3><table>{_rows(sources)}</table>"
            + (f"<h3>Notes</h3><ul>{notes}</ul>" if notes else ""))


def _verify_html(verify: Mapping[str, Any] | None) -> str:
    if not verify:
        return ""
    rows = _rows([(k, f"{v:.4g}" if isinstance(v, float) else v) for k, v in verify.items()])
    return f"<h2>Measured vs projected (short real run)</h2><table>{rows}</table>"


def _kpis(p: Any) -> str:
    mem = p.memory
    fits = ""
    if mem is not None:
        cls, word = ("ok", "fits") if mem.fits else ("bad", "DOES NOT FIT")
        fits = (f'<div class="kpi">memory peak<b>{mem.peak_bytes / GIB:.1f} GiB</b>'
                f'<span class="{cls}">{word}</span> of {mem.capacity_bytes / GIB:.1f} GiB HBM</div>')
    headline = timeline.idle_headline(p)
    idle = f'<div class="kpi">pipeline idle<b>{html.escape(headline)}</b></div>' if headline else ""
    from primus_ext.projection.project import band_range, band_reason

    reason = band_reason(p.system.gpu)
    wide = html.escape(f", widened: {reason}" if reason else "", quote=True)
    width = band_range(p.system.gpu)
    evidence = getattr(p, "band_evidence", None)
    measured = evidence is not None and evidence.known and getattr(p, "calibration", None) is None
    title = (html.escape(evidence.sentence(), quote=True) + "; per side the wider of that and " if measured else "")
    band = (f' ({"band" if measured else "sensitivity band"} <span title="{title}every efficiency +-{width:.0%}{wide}, '
            f'measurement spread{"" if measured else "; not a confidence interval"}">{p.band[0]:,.0f} .. '
            f'{p.band[1]:,.0f}</span>)') if p.band else ""
    return (f'<div class="kpi">tokens/s/GPU<b>{p.tokens_per_s_per_gpu:,.0f}</b>{band}</div>'
            f'<div class="kpi">step time<b>{p.step_time_s * 1e3:,.1f} ms</b></div>'
            f'<div class="kpi">model TFLOP/s/GPU<b>{p.model_tflops_per_gpu:,.1f}</b>'
            f'{html.escape(mfu_text(p.mfu, p.system.gpu, p.execution.precision))}</div>' + fits + idle)


def _timeline_note(p: Any) -> str:
    if not timeline.drawn(p):
        return timeline.not_drawn_note(p)
    return _calibrated_note(p) + _drawn_note(p)


def _calibrated_note(p: Any) -> str:
    """How a calibration record changed the times drawn (empty without one)."""
    c = getattr(p, "calibration", None)
    if c is None:
        return ""
    return (f"Calibrated from real runs: the simulated schedule x{c.timeline_scale:.3f} and the step tail of the "
            f"calibrated breakdown (uncalibrated step {c.uncalibrated_step_s * 1e3:,.1f} ms). ")


def _drawn_note(p: Any) -> str:
    segments = timeline.step_segments(p)
    windows = timeline.view_windows(p, segments)
    ops = f"{p.num_microbatches} micro-batches x {max(1, p.execution.vpp)} chunk(s) per stage"
    steady = timeline.steady_window(p, segments)
    if len(windows) == 1 or steady is None:
        return f"{ops}; the whole step to scale; below, the same step to zoom into."
    cycles = round((steady[1] - steady[0]) / (timeline.steady_cycle_s(p) or 1))
    return (f"{ops}. Above: warm-up, {cycles} steady-state cycles from the middle of the step (every stage as busy "
            f"in them as over its whole steady state) and cool-down with the step tail, to one scale; the hatched "
            f"bands stand for {timeline.elided_s(windows):,.2f} s that repeat the steady state shown. Below: one "
            "steady-state cycle, zoomable. Exposed communication is drawn in its own colour per kind.")


def _idle_html(p: Any) -> str:
    """Per-stage busy / idle (the breakdown above is the busiest rank's)."""
    rows = "".join(
        f'<tr><td>{s.rank}</td><td class="n">{s.busy_s * 1e3:,.1f}</td><td class="n">{s.idle_s * 1e3:,.1f}</td>'
        f'<td class="n">{s.idle_fraction:.1%}</td><td><span class="bar"><i style="width:{s.idle_fraction:.1%}">'
        "</i></span></td></tr>" for s in timeline.stage_idle(p))
    return ("<table><tr><th>stage</th><th>busy ms</th><th>idle ms</th><th>idle share of the step</th><th></th></tr>"
            f"{rows}</table><p class=\"note\">busy: compute and exposed layer communication; idle: the pipeline's "
            "bubble and send/recv waits of that stage (the step tail after the pipeline is the same on every stage)."
            "</p>" + _imbalance_html(p))


def _imbalance_html(p: Any) -> str:
    """One line when the stages' idle shares differ by more than the threshold, naming the fix."""
    spread = imbalance(p)
    if spread is None or not spread.flagged:
        return ""
    return f'<p class="warn"><b>{html.escape(spread.message)}</b></p>'


def _baseline_html(p: Any, baseline: tuple[str, Any] | None) -> str:
    if baseline is None:
        return ""
    label, base = baseline
    return (f"<h2>{html.escape(label)} beside this projection</h2>"
            + compare_table_html(compare_rows(base, p), (label, "this projection")))


def render_html(projection: Any, *, inputs: ReportInputs | None = None, verify: Mapping[str, Any] | None = None,
                baseline: tuple[str, Any] | None = None) -> str:
    """The whole page as one string (write it with ``Path.write_text``). ``baseline``: (label, projection) shown
    beside this one in a table, e.g. ``("the recipe as written", ...)`` in the auto-tune report."""
    p, inputs = projection, inputs or ReportInputs()
    title = f"primus-ext projection: {p.model.name} on {p.system.world_size} x {p.system.gpu.name}"
    data = json.dumps(report_data(p, verify=verify), separators=(",", ":")).replace("</", "<\\/")
    table = "".join(f'<tr><td>{html.escape(x["name"])}</td><td class="n">{x["ms"]:,.2f}</td>'
                    f'<td class="n">{x["ms"] / (p.step_time_s * 1e3 or 1):.1%}</td></tr>'
                    for x in breakdown_parts(p.breakdown))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{CSS}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p class="sub">{html.escape(layout_label(p.execution))}</p>
<section id="kpis">{_kpis(p)}</section>
{_baseline_html(p, baseline)}
<h2>One step, per pipeline stage</h2>
<div class="legend" id="timeline-legend"></div>
<p class="note">{html.escape(_timeline_note(p))}</p>
<div class="chart" id="overview"></div>
<div class="controls">zoom: <button data-act="zoom-in">+</button><button data-act="zoom-out">&minus;</button>
<button data-act="pan-left">&larr;</button><button data-act="pan-right">&rarr;</button>
<button data-act="steady">one steady-state cycle</button><button data-act="whole">whole step</button>
<span class="note">(wheel zooms, drag pans, a click on the chart above moves here; a pixel narrower than one op
shows the kind that fills most of it; here a communication slice narrower than a pixel is drawn 1 px wide;
<code>project --trace FILE</code> opens every op in Perfetto)</span></div>
<div class="chart" id="detail"></div>
<h2>Step-time breakdown (busiest pipeline rank)</h2>
<div class="legend" id="breakdown-legend"></div>
<div class="chart" id="breakdown"></div>
<table><tr><th>part</th><th>ms per step</th><th>share</th></tr>{table}</table>
<h3>Idle time per pipeline stage</h3>
{_idle_html(p)}
<h2>Memory per pipeline stage vs HBM capacity</h2>
<div class="legend" id="memory-legend"></div>
<div class="chart" id="memory"></div>
{_verify_html(verify)}
<h2>Inputs</h2>
{_inputs_html(p, inputs)}
<script id="report-data" type="application/json">{data}</script>
<script>{JS}</script>
</body></html>
"""


def write_html(projection: Any, path: str, *, recipe: Any = None, overrides: Sequence[str] = ()) -> None:
    """Write the report of ``projection`` to ``path`` (said on stderr); ``recipe``: the loaded recipe it came from."""
    import sys

    from primus_ext.files import write_output

    inputs = ReportInputs(recipe=str(getattr(recipe, "source", "") or ""), overrides=tuple(overrides),
                          cluster=projection.system.name, warnings=tuple(getattr(recipe, "warnings", ()) or ()))
    write_output(path, render_html(projection, inputs=inputs), label="--html")
    print(f"wrote {path} (open it in a browser; it needs no network)", file=sys.stderr)


def render_compare_html(a: Any, b: Any, *, labels: tuple[str, str], inputs: tuple[Any, Any] | None = None) -> str:
    """One self-contained page: the comparison table, then both reports side by side."""
    ia, ib = inputs or (ReportInputs(), ReportInputs())
    frames = "".join(f'<iframe title="{html.escape(label)}" srcdoc="{html.escape(render_html(p, inputs=i))}">'
                     "</iframe>" for p, i, label in ((a, ia, labels[0]), (b, ib, labels[1])))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>primus-ext: {html.escape(labels[0])} vs {html.escape(labels[1])}
</title><style>
body {{ font-family: system-ui, sans-serif; margin: 16px; color: #222; }}
table {{ border-collapse: collapse; font-size: 13px; }} td, th {{ border-bottom: 1px solid #e4e4e4; padding: 3px 10px;
text-align: left; }} td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
.pair {{ display: flex; gap: 8px; margin-top: 16px; }}
iframe {{ flex: 1 1 50%; height: 1800px; border: 1px solid #ddd; }}
</style></head><body>
<h1>Two projections side by side</h1>
{compare_table_html(compare_rows(a, b), labels)}
<div class="pair">{frames}</div>
</body></html>
"""
