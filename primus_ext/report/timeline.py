"""One projected step as Gantt segments per pipeline rank (shared by the HTML and PNG reports).

    from primus_ext.report.timeline import step_segments
    for seg in step_segments(projection):
        print(seg.rank, seg.kind, seg.start_s, seg.end_s)

Kinds: ``forward``, ``backward`` (input-grad, plus weight-grad outside zero-bubble schedules),
``wgrad`` (zero-bubble W ops), ``comm`` (exposed communication), ``bubble`` (the rank idles: the
schedule's bubble and waits on p2p), ``optimizer``.

Sources: the pipeline simulator's events (``Projection.timeline``) give F/B/W ops per rank; the
idle gaps between them up to the pipeline's makespan are the bubble. Exposed TP/CP/EP/FSDP
communication is inside the simulated op times: the share ``exposed layer comm / (compute + exposed
layer comm)`` of the breakdown is drawn as the tail of each op. After the makespan every rank shows
the step tail of the breakdown: exposed DP gradient reduction, the optimizer step, exposed
parameter all-gather. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = ("forward", "backward", "wgrad", "comm", "bubble", "optimizer")
"""Drawing order of the legend."""
COLORS = {
    "forward": "#4e79a7", "backward": "#f28e2b", "wgrad": "#edc948", "comm": "#e15759",
    "bubble": "#d9d9d9", "optimizer": "#59a14f",
}
"""Tableau-10 colours (colour-blind safe pairs for F/B)."""
_OP_KIND = {"F": "forward", "B": "backward", "W": "wgrad"}
_LAYER_COMMS = ("tp", "cp", "ep", "fsdp")
_MIN_GAP_FRACTION = 1e-9


@dataclass(frozen=True, kw_only=True)
class Segment:
    """One bar of the Gantt chart."""

    rank: int
    kind: str
    start_s: float
    end_s: float
    label: str = ""
    """Hover text: ``F mb3 c0``, ``dp_grad exposed``, ``idle``."""

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def _layer_comm_share(breakdown: Any) -> float:
    comm = sum(breakdown.comm(k).exposed_s for k in _LAYER_COMMS)
    busy = breakdown.compute_s + comm
    return comm / busy if busy > 0 else 0.0


def _ranks(projection: Any) -> list[int]:
    ranks = {s.rank for s in projection.stages} | {e.rank for e in projection.timeline}
    return sorted(ranks) or [0]


def _single_rank_ops(projection: Any) -> list[Any]:
    """Without a simulated timeline (PP=1): one F and one B per micro-batch from the stage times."""
    from types import SimpleNamespace

    ops, t = [], 0.0
    stage = projection.stages[0] if projection.stages else None
    fwd = sum(stage.fwd_s) if stage else 0.0
    bwd = sum(stage.bwd_s) if stage else 0.0
    m = projection.num_microbatches
    # what passes without a partner micro-batch add (EP overlap): the first forward's and the last backward's
    # exposed all-to-all, both drawn on the last backward (right in total; the simulated timeline places them)
    alone = max(0.0, stage.busy_s - m * (fwd + bwd)) if stage else 0.0
    for mb in range(m):
        ops.append(SimpleNamespace(rank=0, chunk=0, microbatch=mb, kind="F", start=t, end=t + fwd))
        t += fwd
        last = bwd + (alone if mb == m - 1 else 0.0)
        ops.append(SimpleNamespace(rank=0, chunk=0, microbatch=mb, kind="B", start=t, end=t + last))
        t += last
    return ops


def step_segments(projection: Any) -> list[Segment]:
    """Every segment of one step, per rank, in time order (see the module docstring)."""
    events = list(projection.timeline) or _single_rank_ops(projection)
    share = _layer_comm_share(projection.breakdown)
    makespan = max((e.end for e in events), default=0.0)
    out: list[Segment] = []
    for rank in _ranks(projection):
        mine = sorted((e for e in events if e.rank == rank), key=lambda e: e.start)
        t = 0.0
        for e in mine:
            if e.start - t > _MIN_GAP_FRACTION * max(makespan, 1e-12):
                out.append(Segment(rank=rank, kind="bubble", start_s=t, end_s=e.start, label="idle"))
            kind = _OP_KIND.get(e.kind, "forward")
            label = f"{e.kind} mb{e.microbatch} c{e.chunk}"
            split = e.end - (e.end - e.start) * share
            out.append(Segment(rank=rank, kind=kind, start_s=e.start, end_s=split, label=label))
            if share > 0:
                out.append(Segment(rank=rank, kind="comm", start_s=split, end_s=e.end,
                                   label=f"{label}: exposed TP/CP/EP comm"))
            t = max(t, e.end)
        if makespan - t > _MIN_GAP_FRACTION * max(makespan, 1e-12):
            out.append(Segment(rank=rank, kind="bubble", start_s=t, end_s=makespan, label="idle"))
        out += _tail(rank, makespan, projection.breakdown)
    return out


def _tail(rank: int, start: float, breakdown: Any) -> list[Segment]:
    parts = [("comm", breakdown.comm("dp_grad").exposed_s, "dp_grad exposed"),
             ("optimizer", breakdown.optimizer_s, "optimizer step"),
             ("comm", breakdown.comm("dp_param").exposed_s, "dp_param exposed")]
    out, t = [], start
    for kind, seconds, label in parts:
        if seconds > 0:
            out.append(Segment(rank=rank, kind=kind, start_s=t, end_s=t + seconds, label=label))
            t += seconds
    return out


def totals_by_kind(segments: list[Segment], rank: int) -> dict[str, float]:
    """Seconds per kind on one rank (the tests check them against the breakdown)."""
    out = dict.fromkeys(KINDS, 0.0)
    for s in segments:
        if s.rank == rank:
            out[s.kind] += s.duration_s
    return out
