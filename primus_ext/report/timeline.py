"""One projected step as Gantt segments per pipeline rank (shared by the HTML, PNG and trace reports).

    from primus_ext.report.timeline import step_segments, stage_idle, view_windows
    for seg in step_segments(projection):
        print(seg.rank, seg.kind, seg.start_s, seg.end_s, seg.label)

Kinds: ``forward``, ``backward`` (input-grad, plus weight-grad outside zero-bubble schedules),
``wgrad`` (zero-bubble W ops); exposed communication, one kind each: ``tp``, ``cp``, ``ep``, ``fsdp``
(inside the ops), ``pp`` (waiting for a send/recv), ``dp_grad``, ``dp_param`` (the step tail);
``bubble`` (the rank idles, waiting for another stage's compute), ``optimizer``.

Sources: the pipeline simulator's events (``Projection.timeline``) give F/B/W ops per rank. Exposed
TP/CP/EP/FSDP communication is inside the simulated op times: each kind's share of the busiest rank's
busy time (``exposed / (compute + exposed layer comm)``) is drawn as a slice at the tail of every op.
A gap before an op is split where the op's input was computed: before, ``bubble``; after, ``pp`` (the
activation or gradient in flight; the simulator starts an op at max(rank free, input done + p2p)).
After the makespan every rank shows the step tail of the breakdown: exposed DP gradient reduction, the
optimizer step, exposed parameter all-gather. Pure: no I/O.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

from primus_ext.model.pipeline import MAX_SIMULATED_OPS, simulated_directly
from primus_ext.model.pipeline.registry import resolve_schedule
from primus_ext.model.stages import virtual_stages
from primus_ext.projection.result import StageIdle, stage_idle  # noqa: F401  (re-exported: the reports import it here)

OP_KINDS = ("forward", "backward", "wgrad")
LAYER_COMMS = ("tp", "cp", "ep", "fsdp")
COMM_KINDS = (*LAYER_COMMS, "pp", "dp_grad", "dp_param")
KINDS = (*OP_KINDS, *COMM_KINDS, "bubble", "optimizer")
"""Drawing order of the legend."""
COLORS = {
    "forward": "#4e79a7", "backward": "#f28e2b", "wgrad": "#edc948",
    "tp": "#e15759", "cp": "#ff9da7", "ep": "#b07aa1", "fsdp": "#9c755f", "pp": "#17becf",
    "dp_grad": "#59a14f", "dp_param": "#8cd17d",
    "bubble": "#e8e8e8", "optimizer": "#76b7b2",
}
"""Tableau-10/20 colours (colour-blind safe pairs for F/B); every comm kind its own hue."""
LABELS = {"forward": "forward", "backward": "backward", "wgrad": "weight-grad (W)", "tp": "TP comm",
          "cp": "CP comm", "ep": "EP all-to-all", "fsdp": "FSDP gather/scatter", "pp": "PP send/recv wait",
          "dp_grad": "DP grad reduce", "dp_param": "DP param gather", "bubble": "idle (bubble)",
          "optimizer": "optimizer step"}
"""Legend text per kind (the exposed part of each communication)."""
OP_KIND_OF = {"F": "forward", "B": "backward", "W": "wgrad"}
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


def layer_comm_shares(breakdown: Any) -> list[tuple[str, float]]:
    """(kind, share of an op's time) of each exposed layer communication, in slice order (non-zero only)."""
    exposed = {k: breakdown.comm(k).exposed_s for k in LAYER_COMMS}
    busy = breakdown.compute_s + sum(exposed.values())
    return [(k, v / busy) for k, v in exposed.items() if v > 0 and busy > 0]


def _ranks(projection: Any) -> list[int]:
    ranks = {s.rank for s in projection.stages} | {e.rank for e in projection.timeline}
    return sorted(ranks) or [0]


def _single_rank_ops(projection: Any) -> list[Any]:
    """Without a simulated timeline (PP=1): one F and one B per micro-batch from the stage times."""
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


def _input_done(events: list[Any], projection: Any) -> dict[int, float]:
    """id(op) -> when its input was computed on another rank (the dependency the simulator waits on); model
    stages as the schedule places them (Megatron's loop, a V, DualPipe's two copies)."""
    ex = projection.execution
    pp, chunks = max(1, ex.pp), max(1, virtual_stages(ex))
    schedule = resolve_schedule(ex.pipeline_schedule, pp, ex.virtual_pipeline_model_parallel_size)
    stages = schedule.stage_count(pp, chunks)
    stage_of = {(r, c): schedule.stage_of(r, c, pp) for r in range(pp) for c in range(chunks)}
    ends = {(e.kind, stage_of[(e.rank, e.chunk)], e.microbatch): e.end for e in events}
    out: dict[int, float] = {}
    for e in events:
        stage = stage_of[(e.rank, e.chunk)]
        if e.kind == "F" and stage > 0:
            done = ends.get(("F", stage - 1, e.microbatch))
        elif e.kind == "B" and stage < stages - 1:
            done = ends.get(("B", stage + 1, e.microbatch))
        else:
            done = None
        if done is not None:
            out[id(e)] = done
    return out


def op_segments(rank: int, kind: str, start: float, end: float, label: str,
                shares: list[tuple[str, float]]) -> list[Segment]:
    """One op: its compute, then a slice per exposed layer communication kind."""
    out, t = [], end - (end - start) * sum(s for _, s in shares)
    out.append(Segment(rank=rank, kind=kind, start_s=start, end_s=t, label=label))
    for comm, share in shares:
        nxt = t + (end - start) * share
        out.append(Segment(rank=rank, kind=comm, start_s=t, end_s=nxt, label=f"{label}: exposed {comm} comm"))
        t = nxt
    return out


def drawn(projection: Any) -> bool:
    """Whether the step has a timeline to draw: not when its micro-batches were priced in closed form
    (more than ``pipeline.long.MAX_SIMULATED_OPS`` ops: no op was simulated one by one)."""
    ex = projection.execution
    pp, vpp = max(1, ex.pp), max(1, ex.vpp)
    return bool(projection.timeline) or (pp == 1 and simulated_directly(pp, vpp, projection.num_microbatches))


def not_drawn_note(projection: Any) -> str:
    return (f"timeline not drawn: {projection.num_microbatches:,} micro-batches per step are more than the "
            f"{MAX_SIMULATED_OPS:,} ops simulated one by one (the step is priced in closed form from the "
            "schedule's periodic steady state)")


def step_ops(projection: Any) -> list[Any]:
    """The F/B/W ops of one step (``pipeline.Event``-like: rank, chunk, microbatch, kind, start, end); none
    when the step is not ``drawn``."""
    if not drawn(projection):
        return []
    return list(projection.timeline) or _single_rank_ops(projection)


def step_segments(projection: Any) -> list[Segment]:
    """Every segment of one step, per rank, in time order (see the module docstring); none when the step is
    not ``drawn``."""
    if not drawn(projection):
        return []
    events = step_ops(projection)
    shares = layer_comm_shares(projection.breakdown)
    inputs = _input_done(events, projection) if projection.timeline else {}
    makespan = max((e.end for e in events), default=0.0)
    eps = _MIN_GAP_FRACTION * max(makespan, 1e-12)
    out: list[Segment] = []
    for rank in _ranks(projection):
        mine = _split_pairs(sorted((e for e in events if e.rank == rank), key=lambda e: e.start), projection, rank)
        t = 0.0
        for e, note in mine:
            if e.start - t > eps:
                arrived = min(max(inputs.get(id(e), e.start), t), e.start)
                if arrived - t > eps:
                    out.append(Segment(rank=rank, kind="bubble", start_s=t, end_s=arrived, label="idle"))
                if e.start - arrived > eps:
                    out.append(Segment(rank=rank, kind="pp", start_s=arrived, end_s=e.start,
                                       label=f"{e.kind} mb{e.microbatch} c{e.chunk}: input in flight (p2p)"))
            label = f"{e.kind} mb{e.microbatch} c{e.chunk}{note}"
            out += op_segments(rank, OP_KIND_OF.get(e.kind, "forward"), e.start, e.end, label, shares)
            t = max(t, e.end)
        if makespan - t > eps:
            out.append(Segment(rank=rank, kind="bubble", start_s=t, end_s=makespan, label="idle"))
        out += _tail(rank, makespan, projection.breakdown)
    return out


def _split_pairs(mine: list[Any], projection: Any, rank: int) -> list[tuple[Any, str]]:
    """(op, label suffix) in time order. An overlapped F&B pair (DualPipe) is two events sharing one interval:
    drawn as its F then its B, the interval split in proportion to the two passes' times on this rank
    (``StageTime.fwd_s`` / ``bwd_s``), each labelled with its partner, so no second of the step is drawn twice."""
    if not any(getattr(e, "overlapped", False) for e in mine):
        return [(e, "") for e in mine]
    stage = next((st for st in projection.stages if st.rank == rank), None)
    out: list[tuple[Any, str]] = []
    i = 0
    while i < len(mine):
        e = mine[i]
        pair = mine[i + 1] if i + 1 < len(mine) else None
        if (getattr(e, "overlapped", False) and pair is not None and getattr(pair, "overlapped", False)
                and pair.start == e.start and pair.end == e.end):
            f, b = (e, pair) if e.kind == "F" else (pair, e)
            fwd = stage.fwd_s[f.chunk] if stage is not None and f.chunk < len(stage.fwd_s) else 1.0
            bwd = stage.bwd_s[b.chunk] if stage is not None and b.chunk < len(stage.bwd_s) else 1.0
            cut = f.start + (f.end - f.start) * fwd / (fwd + bwd) if fwd + bwd > 0 else f.start
            out += [(replace(f, end=cut), f" (overlapped with {b.kind} mb{b.microbatch} c{b.chunk})"),
                    (replace(b, start=cut), f" (overlapped with {f.kind} mb{f.microbatch} c{f.chunk})")]
            i += 2
            continue
        out.append((e, ""))
        i += 1
    return out


def _tail(rank: int, start: float, breakdown: Any) -> list[Segment]:
    parts = [("dp_grad", breakdown.comm("dp_grad").exposed_s, "dp_grad exposed"),
             ("optimizer", breakdown.optimizer_s, "optimizer step"),
             ("dp_param", breakdown.comm("dp_param").exposed_s, "dp_param exposed")]
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


STEADY_CYCLES = 2
"""Fewest steady-state micro-batch cycles (one F + one B of every chunk on a rank) the overview shows."""
STEADY_TOLERANCE = 0.02
"""The steady-state window drawn is the fewest cycles (2, 4, 8, ...) around the middle of the steady state in which
every stage's busy share lies within this of its share over the whole steady state (warm-up end to cool-down start):
an interleaved schedule repeats every PP micro-batches, not every cycle, and a window of two cycles can catch a
stage waiting (29 % busy) where the step keeps it 82 % busy."""
BUSY_KINDS = frozenset((*OP_KINDS, *LAYER_COMMS))


def steady_cycle_s(projection: Any) -> float:
    """One steady-state cycle of the busiest rank: a forward and a backward of each of its chunks."""
    busiest = max(projection.stages, key=lambda s: s.busy_s, default=None)
    return sum(busiest.fwd_s) + sum(busiest.bwd_s) if busiest else 0.0


def busy_share(segments: list[Segment], rank: int, start: float, end: float) -> float:
    """The share of [start, end] that ``rank`` computes (ops and their exposed layer communication)."""
    if end <= start:
        return 0.0
    busy = sum(max(0.0, min(end, s.end_s) - max(start, s.start_s)) for s in segments
               if s.rank == rank and s.kind in BUSY_KINDS and s.end_s > start and s.start_s < end)
    return busy / (end - start)


def _phases(projection: Any, segments: list[Segment]) -> tuple[float, float, float]:
    """(warm-up end: every rank has started a backward; cool-down start: the first rank's last forward ended;
    the step's end)."""
    end = max((s.end_s for s in segments), default=0.0)
    events = list(projection.timeline)
    ranks = {e.rank for e in events}
    first_b = [min((e.start for e in events if e.rank == r and e.kind == "B"), default=0.0) for r in ranks]
    last_f = [max((e.end for e in events if e.rank == r and e.kind == "F"), default=end) for r in ranks]
    return max(first_b, default=0.0), min(last_f, default=end), end


def steady_window(projection: Any, segments: list[Segment]) -> tuple[float, float] | None:
    """The steady state drawn: ``STEADY_CYCLES`` cycles or more (doubling) around the middle of the steady state,
    until every stage's busy share in them is its share over the whole steady state (``STEADY_TOLERANCE``); the
    whole steady state when no shorter window is; None without a simulated timeline or a steady state of two
    cycles."""
    if not projection.timeline:
        return None
    warm, cool, _ = _phases(projection, segments)
    cycle = steady_cycle_s(projection)
    if cycle <= 0 or cool - warm < STEADY_CYCLES * cycle:
        return None
    ranks = sorted({s.rank for s in segments})
    mine = {r: [s for s in segments if s.rank == r] for r in ranks}
    whole = {r: busy_share(mine[r], r, warm, cool) for r in ranks}
    middle, cycles = (warm + cool) / 2, STEADY_CYCLES
    while middle - cycles * cycle / 2 > warm and middle + cycles * cycle / 2 < cool:
        a, b = middle - cycles * cycle / 2, middle + cycles * cycle / 2
        if all(abs(busy_share(mine[r], r, a, b) - whole[r]) <= STEADY_TOLERANCE for r in ranks):
            return a, b
        cycles *= 2
    return warm, cool


def view_windows(projection: Any, segments: list[Segment]) -> list[tuple[float, float]]:
    """Time intervals (s) of the default view, each to the same scale: warm-up, the steady state
    (``steady_window``), cool-down and the step tail; what lies between them (repeating the steady state) is
    elided. One interval when nothing is elided."""
    end = max((s.end_s for s in segments), default=0.0)
    steady = steady_window(projection, segments)
    if steady is None:
        return [(0.0, end)]
    warm, cool, _ = _phases(projection, segments)
    cycle = steady_cycle_s(projection)
    windows: list[tuple[float, float]] = []
    for a, b in ((0.0, warm), steady, (cool, end)):  # a gap of under a cycle is drawn, not elided
        if windows and a - windows[-1][1] < cycle:
            windows[-1] = (windows[-1][0], max(windows[-1][1], b))
        else:
            windows.append((a, b))
    return windows


def elided_s(windows: list[tuple[float, float]]) -> float:
    """Seconds of the step between the windows (not drawn)."""
    return sum(b[0] - a[1] for a, b in itertools.pairwise(windows))


def idle_headline(projection: Any) -> str | None:
    """Every stage's pipeline idle in one line (None with one stage): the breakdown's bubble is the busiest
    stage's, which can idle 1 % while the others idle 17 %."""
    idle = stage_idle(projection)
    if len(idle) < 2:
        return None
    shares = [s.idle_fraction for s in idle]
    lo, hi = min(shares), max(shares)
    busiest = max(projection.stages, key=lambda s: s.busy_s).rank
    mine = next(s.idle_fraction for s in idle if s.rank == busiest)
    spread = f"{lo:.1%}" if hi - lo < 0.0005 else f"{lo:.1%} .. {hi:.1%}"
    return (f"{spread} of the step per stage (mean {sum(shares) / len(shares):.1%} of {len(shares)} stages); "
            f"the step breakdown is the busiest stage's ({busiest}: {mine:.1%})")
