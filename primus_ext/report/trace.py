"""The simulated step as a Chrome trace (JSON trace event format), for Perfetto or chrome://tracing.

    primus-ext project recipes/llama3.1_405B-pretrain.yaml --trace step.json   # then open it in ui.perfetto.dev

    from primus_ext.report.trace import chrome_trace
    json.dump(chrome_trace(projection), open("step.json", "w"))

One process per pipeline stage (``pid`` = stage + 1, named ``stage N``), three threads each: ``compute``
(F/B/W ops), ``comm (exposed)`` (the exposed TP/CP/EP/FSDP slices, send/recv waits, the DP reduction and
parameter gather) and ``idle`` (bubble) with the optimizer step on compute. Complete events (``ph: "X"``)
with ``ts`` / ``dur`` in microseconds, as the format specifies
(https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU). The segments are
``report.timeline.step_segments``: what the HTML report draws, to the microsecond. After calibration
(``primus-ext calibrate``) the durations are the calibrated ones, and ``otherData.calibration`` says so.
"""

from __future__ import annotations

from typing import Any

from primus_ext.report.timeline import COMM_KINDS, LABELS, OP_KINDS, drawn, not_drawn_note, step_segments

THREADS = {"compute": 1, "comm (exposed)": 2, "idle": 3}
"""Thread name -> ``tid`` within each stage's process."""


def _thread(kind: str) -> str:
    if kind in COMM_KINDS:
        return "comm (exposed)"
    return "idle" if kind == "bubble" else "compute"


def chrome_trace(projection: Any) -> dict[str, Any]:
    """The trace document (``traceEvents`` plus metadata); ``json.dump`` it to a file."""
    segments = step_segments(projection)
    events: list[dict[str, Any]] = []
    for rank in sorted({s.rank for s in segments}):
        pid = rank + 1
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"stage {rank}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": rank}})
        events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
                   for name, tid in THREADS.items()]
    for s in segments:
        name = s.label.split(":")[0] if s.kind in OP_KINDS else LABELS[s.kind]
        event = {"ph": "X", "name": name, "cat": s.kind, "pid": s.rank + 1, "tid": THREADS[_thread(s.kind)],
                 "ts": round(s.start_s * 1e6, 3), "dur": round(s.duration_s * 1e6, 3)}
        if s.label and s.label != name:
            event["args"] = {"detail": s.label}
        events.append(event)
    ex = projection.execution
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {**({} if drawn(projection) else {"note": not_drawn_note(projection)}),
                      "model": projection.model.name, "gpu": projection.system.gpu.name,
                      "world_size": projection.system.world_size, "step_time_s": projection.step_time_s,
                      "num_microbatches": projection.num_microbatches,
                      "layout": f"TP{ex.tp} PP{ex.pp} VPP{ex.vpp} CP{ex.cp} EP{ex.ep} DP{ex.dp}",
                      **_calibration(projection)},
    }


def _calibration(projection: Any) -> dict[str, Any]:
    """How a calibration record changed the durations (none without one): the simulated schedule x its scale, the
    step tail from the calibrated breakdown."""
    c = getattr(projection, "calibration", None)
    if c is None:
        return {}
    return {"calibration": {"note": f"durations calibrated ({c.match} match: {c.record}): the simulated schedule "
                                    f"x{c.timeline_scale:.3f}, the step tail from the calibrated breakdown",
                            "kernel_factor": c.kernel_factor, "overhead_s": c.overhead_s,
                            "timeline_scale": c.timeline_scale, "uncalibrated_step_time_s": c.uncalibrated_step_s}}


def write_trace(projection: Any, path: str) -> None:
    """Write ``chrome_trace(projection)`` to ``path`` (said on stderr)."""
    import json
    import sys

    from primus_ext.files import write_output

    write_output(path, json.dumps(chrome_trace(projection), separators=(",", ":")), label="--trace")
    print(f"wrote {path} (Chrome trace: open it in ui.perfetto.dev or chrome://tracing)", file=sys.stderr)
