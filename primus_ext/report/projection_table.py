"""A ``Projection`` as terminal text (the CLI's printing lives here, not in the model; its JSON is the result
schema's ``projection`` document, ``primus_ext.results.projection``).

    from primus_ext.report.projection_table import format_projection
    print(format_projection(projection))
"""

from __future__ import annotations

import re
from typing import Any

from primus_ext.model.pipeline.registry import resolve_schedule
from primus_ext.projection.result import Projection, imbalance
from primus_ext.report.mfu import mfu_text
from primus_ext.report.timeline import idle_headline, stage_idle

GIB = 1024**3


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f}"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(headers, widths, strict=True)))
    out = [line, "-" * len(line)]
    for row in rows:
        out.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    return out


def _memory_stages(memory: Any) -> list[tuple[int, float]]:
    """(pipeline rank, peak GiB) per stage of a ``Memory`` result."""
    stages = getattr(memory, "stages", ()) or ()
    out = []
    for index, stage in enumerate(stages):
        peak = getattr(stage, "peak_bytes", None)
        if peak is None:
            peak = getattr(stage, "total_bytes", 0)
        out.append((int(getattr(stage, "rank", index)), float(peak) / GIB))
    return out


def memory_summary(memory: Any) -> dict[str, Any] | None:
    """The JSON ``memory`` block: per-stage peak, overall peak, capacity, fits."""
    if memory is None:
        return None
    capacity = getattr(memory, "capacity_bytes", None)
    return {
        "per_stage": [{"rank": rank, "peak_gib": round(gib, 3)} for rank, gib in _memory_stages(memory)],
        "peak_gib": round(float(memory.peak_bytes) / GIB, 3),
        "capacity_gib": round(float(capacity) / GIB, 3) if capacity is not None else None,
        "fits": bool(memory.fits),
    }


def calibration_label(calibration: str, inherits_from: str = "") -> str:
    """A short form of a profile's calibration string: whose rows its efficiencies come from (``inherits_from``: the
    profile a GPU without runs of its own takes them from, ``GPUSpec.inherits_efficiency_from``)."""
    if inherits_from:
        return f"inherited from {inherits_from} (no measured run of this GPU): {calibration_label(calibration)}"
    if calibration.startswith("pooled prior"):
        return "pooled prior: no measured run of this GPU family, fitted on other families' runs"
    rows = re.search(r"on (?:all )?(\d+ [\w/]+ rows)(?: \((\d+) configurations?)?", calibration)
    if calibration.startswith("fitted") and rows:
        few = rows.group(2)
        where = f" ({few} configuration{'s' if few != '1' else ''}, AMD runs only)" if few else ""
        return f"calibrated on {rows.group(1)}{where} of published runs"
    return calibration or "uncalibrated defaults"


def _band_text(p: Projection) -> str:
    if not p.band:
        return ""
    c = p.calibration
    if c is not None:
        return (f"   (band {p.band[0]:,.0f} .. {p.band[1]:,.0f}: +-{c.band:.0%}, the calibrating runs' spread"
                + (", widened for a nearby configuration)" if c.match == "nearby" else ")"))
    from primus_ext.projection.project import band_range, band_reason

    width, reason = band_range(p.system.gpu), band_reason(p.system.gpu)
    wide = f", widened: {reason}" if reason else ""
    sensitivity = f"every efficiency +-{width:.0%}{wide}, measurement spread"
    evidence = getattr(p, "band_evidence", None)
    if evidence is None:
        return f"   (sensitivity band {p.band[0]:,.0f} .. {p.band[1]:,.0f}: {sensitivity}; not a confidence interval)"
    if not evidence.known:
        return (f"   (band {p.band[0]:,.0f} .. {p.band[1]:,.0f}: {evidence.sentence()} ({sensitivity}); not a "
                "confidence interval)")
    return (f"   (band {p.band[0]:,.0f} .. {p.band[1]:,.0f}: {evidence.sentence()}; per side the wider of that and "
            f"the sensitivity band, {sensitivity})")


def _cluster_lines(p: Projection) -> list[str]:
    """The cluster record's environment the projection ran on (``primus-ext calibrate --scope cluster``)."""
    a = getattr(p, "cluster_calibration", None)
    if a is None:
        return []
    from primus_ext.calibration.environment import FACTORS, describe_value

    moved = ", ".join(describe_value(n, a.values[n], p.system.gpu) for n in FACTORS if n in a.values)
    return [f"  cluster          {a.record}" + (" (the model record's basis)" if a.origin != "cluster" else ""),
            f"                   {moved}"]


def _calibration_lines(p: Projection) -> list[str]:
    """What a calibration record from real runs changed (``primus-ext calibrate``)."""
    c = p.calibration
    if c is None:
        return _cluster_lines(p)
    what = f"kernels x{c.kernel_factor:.3f}" if c.scope == "kernels" else f"whole step x{c.kernel_factor:.3f}"
    if c.overhead_s:
        what += f" + {c.overhead_s * 1e3:.1f} ms/step"
    memory = (f"; memory x{c.memory_factor:.3f} (uncalibrated peak {c.uncalibrated_peak_bytes / 2**30:.1f} GiB)"
              if c.memory_factor and c.uncalibrated_peak_bytes else "; memory uncalibrated")
    return [*_cluster_lines(p), f"  calibrated       {c.match} match: {c.record}",
            f"                   {what} (uncalibrated step {c.uncalibrated_step_s * 1e3:,.1f} ms){memory}"]


def format_projection(p: Projection) -> str:
    """Summary, step breakdown, per-stage times (and memory), cost sources, notes."""
    ex, system = p.execution, p.system
    layout = (f"TP{ex.tp} PP{ex.pp}" + (f" VPP{ex.vpp}" if ex.vpp > 1 else "") + f" CP{ex.cp} EP{ex.ep} DP{ex.dp}"
              f" MBS{ex.micro_batch_size} GBS{ex.global_batch_size} seq{ex.seq_length} {ex.precision}")
    lines = [
        f"Projection: {p.model.name} on {ex.world_size} x {system.gpu.name} "
        f"({system.num_nodes} node{'' if system.num_nodes == 1 else 's'})",
        f"  {layout}, {p.num_microbatches} micro-batches, schedule {_schedule(p)}",
        *([f"  LoRA rank {ex.lora_rank} on {', '.join(ex.lora_targets)}: base weights frozen (no weight gradients, "
           "no optimizer state); trained parameters are the adapters'"] if ex.lora_rank else []),
        "",
        f"  tokens/s/GPU     {p.tokens_per_s_per_gpu:,.0f}" + _band_text(p),
        f"  step time        {p.step_time_ms:,.1f} ms",
        f"  model TFLOP/s    {p.model_tflops_per_gpu:,.1f} per GPU   "
        f"({mfu_text(p.mfu, p.system.gpu, p.execution.precision)})",
        *([f"  pipeline idle    {idle}"] if (idle := idle_headline(p)) else []),
        "  efficiencies     " + calibration_label(system.gpu.efficiency.calibration,
                                                  system.gpu.inherits_efficiency_from),
        *_calibration_lines(p),
    ]
    if p.memory is not None:
        mem = memory_summary(p.memory) or {}
        cap = mem.get("capacity_gib")
        from primus_ext.model.memory import margin_verdict

        within = not mem["fits"] and cap and margin_verdict(p.memory.peak_bytes, p.memory.capacity_bytes) != \
            "out of memory"
        lines.append(f"  memory peak      {mem['peak_gib']:.1f} GiB" + (f" of {cap:.1f} GiB" if cap else "")
                     + ("   fits" if mem["fits"] else "   over capacity, within the model's error" if within
                        else "   DOES NOT FIT"))
    b = p.breakdown
    step = p.step_time_s or 1.0
    rows = [["compute", _ms(b.compute_s), f"{b.compute_s / step:.1%}", "", "", ""]]
    if b.recompute_s:
        rows.append(["  of which recompute", _ms(b.recompute_s), f"{b.recompute_s / step:.1%}", "", "", ""])
    for c in b.comms:
        rows.append([f"{c.kind} comm", _ms(c.exposed_s), f"{c.exposed_s / step:.1%}", _ms(c.total_s),
                     f"{c.exposed_fraction:.0%}", c.group])
    rows.append(["pipeline bubble", _ms(b.bubble_s), f"{b.bubble_s / step:.1%}", "", "", ""])
    rows.append(["optimizer step", _ms(b.optimizer_s), f"{b.optimizer_s / step:.1%}", "", "", ""])
    lines += ["", "Step breakdown (busiest pipeline rank; ms per step)"]
    lines += _table(["part", "exposed", "share", "total", "exposed%", "group"], rows)
    mem_by_rank = dict(_memory_stages(p.memory)) if p.memory is not None else {}
    stage_rows = []
    idle = {i.rank: i for i in stage_idle(p)}
    for s in p.stages:
        flags = "".join(("E" if s.embedding else "", "L" if s.output else ""))
        stage_rows.append([
            str(s.rank), str(s.layers) + (f" {flags}" if flags else ""),
            " ".join(_ms(t) for t in s.fwd_s), " ".join(_ms(t) for t in s.bwd_s),
            _ms(s.busy_s), _ms(idle[s.rank].idle_s), f"{idle[s.rank].idle_fraction:.1%}", _ms(s.finish_s),
            f"{(s.dense_params + s.expert_params) / 1e6:,.0f}M",
            f"{mem_by_rank[s.rank]:.1f}" if s.rank in mem_by_rank else "-",
        ])
    scaled = (f"; calibrated: the simulated schedule x{p.calibration.timeline_scale:.3f}"
              if p.calibration is not None else "")
    lines += ["", "Pipeline stages (fwd / bwd per micro-batch and chunk, ms; idle: bubble and send/recv waits of the "
              f"stage, idle% of the step{scaled})"]
    trained = "trained params" if ex.lora_rank else "params"
    lines += _table(["rank", "layers", "fwd", "bwd", "busy", "idle", "idle%", "finish", trained, "mem GiB"],
                    stage_rows)
    spread = imbalance(p)
    if spread is not None and spread.flagged:
        lines.append(spread.message)
    lines += ["", "Cost sources"]
    lines += [f"  {kind:<10} {source}" for kind, source in p.sources.items()]
    if p.notes:
        lines += ["", "Notes"] + [f"  - {n}" for n in p.notes]
    return "\n".join(lines)


def _schedule(p: Projection) -> str:
    ex = p.execution
    return resolve_schedule(ex.pipeline_schedule, max(ex.pp, 2), ex.vpp).label
