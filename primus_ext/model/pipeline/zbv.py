"""V-shaped zero-bubble schedules: ZB-V, V-half, V-min (Qi et al. 2024, "Pipeline Parallelism with Controllable
Memory", arXiv:2405.15362): their op orders, runs and activation memory.

    >>> from primus_ext.model.pipeline import uniform_times
    >>> from primus_ext.model.pipeline.zbv import simulate_v
    >>> simulate_v("zb-v", uniform_times(4, 2, 1.0, 2.0, 1.0), 16).bubble_time   # (P-1) chunk forwards: the fill

Every rank holds two model chunks in a V: chunk 0 on ranks 0..P-1, chunk 1 back on P-1..0 (``zb2.v_stage``), so
rank 0 holds the first and the last layers; the chunk 0 -> chunk 1 hand-over on rank P-1 is local (no p2p).
Backward is split into input-grad B and weight-grad W, as in ``pipeline.zb2``.

* ``zb-v``: 1F1B's activation memory (2P chunk-micro-batches in flight on every rank, Primus zbv.py's default
  ``max_mem = 2 * n_stage * f_mem``), ops chosen greedily in time order on the op times (``zb2.greedy_orders``:
  Primus zbv.py is a greedy under that memory limit too); at most 2P W deferred per rank (Primus counts their
  inputs in the same limit). On uniform stages the only idle time is the fill, (P-1) chunk forwards.
* ``v-half`` / ``v-min``: Primus zbv_greedy.py's building blocks (the paper's sec. 3 "V-Half" and "V-Min"):
  per rank fixed offsets of F(chunk 0), F(chunk 1), B(chunk 1), B(chunk 0) in unit slots, repeated every 6
  slots (one micro-batch = F, B, W of two chunks); each W goes in the rank's next free slot, W of chunk 1
  first (zbv_greedy.put_w with split W); the rank runs its ops in slot order. Primus then moves warm-up and
  cool-down ops to earlier free slots that do not raise memory (zbv_greedy.reorder); that pass is left out,
  so these orders are Primus's before it (their ramp bubbles an upper bound of Primus's; the steady state,
  and so the memory, is the same).

Activation memory is counted in chunk-micro-batches (one chunk's saved activations of one micro-batch): +1 at F,
-1 at its input-grad B; the weight-grad inputs a deferred W still holds are counted apart (``wgrad_held``).
Pure and torch-free.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import ClassVar

from primus_ext.model.pipeline.ops import BWD, FWD, WGRAD, ChunkTimes, ScheduleResult, replay
from primus_ext.model.pipeline.registry import Schedule, register
from primus_ext.model.pipeline.zb2 import greedy_orders, place_mapped, split_times, v_stage

V_SCHEDULES = ("zb-v", "v-half", "v-min")

SLOTS_PER_MICROBATCH = 6
"""A building block's period: F, B and W of two chunks, one unit slot each (arXiv:2405.15362 sec. 3.1)."""


def v_problems(schedule: str, pp: int, vpp: int | None, m: int) -> list[str]:
    """Why a V schedule cannot run here ([] when it can). Primus zbpp_utils.py (validate for
    zero_bubble_v_schedule): pipeline parallelism (PP >= 2), two chunks per rank (it sets VPP = 2 itself and
    refuses num_layers_per_virtual_pipeline_stage), an even layer count per stage (the caller's: no layer count
    here). Primus's V schedulers take any micro-batch count >= 1; below 2P the warm-up never fills (a bubble,
    not an error)."""
    problems = []
    if schedule not in V_SCHEDULES:
        problems.append(f"unknown V schedule {schedule!r}; known: {', '.join(V_SCHEDULES)}")
    if pp < 2:
        problems.append(f"{schedule} needs pipeline parallelism (PP >= 2); got PP={pp}")
    if vpp not in (None, 1, 2):
        problems.append(f"{schedule} places exactly 2 chunks per rank (a V); got VPP={vpp}: leave VPP unset or 2")
    if m < 1:
        problems.append(f"{schedule} needs at least one micro-batch; got {m}")
    return problems


# --------------------------------------------------------------------------- building blocks
def v_min_block(pp: int) -> tuple[tuple[int, int, int, int], ...]:
    """Per rank i: slots of F(chunk 0), F(chunk 1), B(chunk 1), B(chunk 0) in V-Min's building block (Primus
    zbv_greedy.py stable_pattern_v_min; 2 idle slots between the V's arms when 3 | P keep the offsets distinct
    mod 6). Lifespans F->B sum to 4P (+2) slots: about 2P/3 chunk-micro-batches, 1/3 of 1F1B's 2P."""
    gap = 2 if pp % 3 == 0 else 0
    return tuple((i, 2 * pp - 1 - i, 2 * pp + gap + i, 4 * pp + gap - 1 - i) for i in range(pp))


def v_half_block(pp: int) -> tuple[tuple[int, int, int, int], ...]:
    """V-Half's building block (Primus zbv_greedy.py stable_pattern_v_half; a gap of 3 when P is even):
    lifespans sum to 6P - 1 (+3) slots, about P chunk-micro-batches, 1/2 of 1F1B's."""
    gap = 3 if pp % 2 == 0 else 0
    return tuple((2 * i, 3 * pp - 2 - i, 3 * pp + gap + 2 * i - 1, 6 * pp + gap - 2 - i) for i in range(pp))


def block_order(block: tuple[int, int, int, int], m: int) -> list[tuple[int, int, int]]:
    """One rank's (kind, micro-batch, chunk) order from its block: micro-batch k's ops at the block's slots
    + 6k; a free slot runs the oldest waiting W (chunk 1's before chunk 0's, zbv_greedy.put_w with split W);
    the Ws left at the end follow in that order."""
    f0, f1, b1, b0 = block
    at: dict[int, tuple[int, int, int]] = {}
    for k in range(m):
        base = SLOTS_PER_MICROBATCH * k
        at.update({f0 + base: (FWD, k, 0), f1 + base: (FWD, k, 1), b1 + base: (BWD, k, 1), b0 + base: (BWD, k, 0)})
    assert len(at) == 4 * m, "building block offsets collide mod 6"
    waiting: tuple[list[int], list[int]] = ([], [])  # per chunk: micro-batches whose W waits
    order: list[tuple[int, int, int]] = []
    for slot in range(max(at) + 1):
        op = at.get(slot)
        if op is not None:
            order.append(op)
            if op[0] == BWD:
                waiting[op[2]].append(op[1])
        elif waiting[1] or waiting[0]:
            chunk = 1 if waiting[1] else 0
            order.append((WGRAD, waiting[chunk].pop(0), chunk))
    return order + [(WGRAD, k, c) for c in (1, 0) for k in waiting[c]]


# --------------------------------------------------------------------------- orders and runs
def zb_v_caps(pp: int) -> tuple[int, ...]:
    """ZB-V's activation limit per rank, chunk-micro-batches: 1F1B's P whole-stage micro-batches = 2P chunks
    (Primus zbv.py ``max_mem = f_mem * n_stage * 2``; arXiv:2405.15362 table 1: ZB-V memory = 1F1B's)."""
    return (2 * pp,) * pp


@lru_cache(maxsize=256)
def v_orders(schedule: str, times: tuple[tuple[ChunkTimes, ...], ...],
             m: int) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """Per-rank (kind, micro-batch, chunk) orders of a V schedule; ``times`` matter for ``zb-v`` only."""
    pp = len(times)
    if schedule == "zb-v":
        orders = greedy_orders(times, m, zb_v_caps(pp), v_stage, zb_v_caps(pp))
    else:
        block = v_half_block(pp) if schedule == "v-half" else v_min_block(pp)
        orders = [block_order(block[r], m) for r in range(pp)]
    return tuple(tuple(o) for o in orders)


def unit_times(pp: int) -> tuple[tuple[ChunkTimes, ...], ...]:
    """T_F = T_B = T_W = 1 on every chunk: the papers' setting, and the order ``rank_order`` / the memory use."""
    return ((ChunkTimes(fwd=1.0, bwd=2.0, wgrad=1.0),) * 2,) * pp


def simulate_v(schedule: str, times: tuple[tuple[ChunkTimes, ...], ...], m: int, p2p: tuple[float, ...] = (),
               timeline: bool = False) -> ScheduleResult:
    """Simulate a V schedule. ``times[rank][chunk]``: chunk 0 the rank's first-arm stage, chunk 1 its return-arm
    stage; ``p2p[s]``: send/recv seconds between virtual stages s and s+1 (s = P-1, the turn on rank P-1, is
    local and costs nothing whatever it says)."""
    pp = len(times)
    problems = v_problems(schedule, pp, 2, m)
    if problems:
        raise ValueError("; ".join(problems))
    if any(len(row) != 2 for row in times):
        raise ValueError(f"{schedule} needs times for exactly 2 chunks per rank")
    p2p = list(tuple(p2p) + (0.0,) * (2 * pp - 1 - len(p2p)))
    p2p[pp - 1] = 0.0  # the V's turn: chunk 0 -> chunk 1 on rank P-1, same device
    st = place_mapped([list(o) for o in v_orders(schedule, times, m)], pp, 2, m, v_stage)
    return replay(schedule, st, times, m, split_times(times), tuple(p2p), timeline)


# --------------------------------------------------------------------------- memory
@lru_cache(maxsize=1024)
def held_at_peak(schedule: str, rank: int, pp: int, m: int) -> tuple[int, int]:
    """Per chunk: micro-batches whose forward activations ``rank`` holds when its total (F done, B not yet) first
    peaks, on the uniform-time order. Their sum is the peak in chunk-micro-batches."""
    held, best, peak = [0, 0], [0, 0], 0
    for kind, _, chunk in v_orders(schedule, unit_times(pp), m)[rank]:
        held[chunk] += 1 if kind == FWD else -1 if kind == BWD else 0
        if sum(held) > peak:
            peak, best = sum(held), list(held)
    return best[0], best[1]


def in_flight_chunks(schedule: str, rank: int, pp: int, m: int) -> int:
    """Peak forward activations ``rank`` holds, in chunk-micro-batches (1F1B on rank 0: 2P)."""
    return sum(held_at_peak(schedule, rank, pp, m))


@lru_cache(maxsize=1024)
def wgrad_held_chunks(schedule: str, rank: int, pp: int, m: int) -> int:
    """Peak input-grad Bs whose W has not run yet on ``rank`` (their weight-grad inputs stay), uniform times."""
    held = peak = 0
    for kind, _, _ in v_orders(schedule, unit_times(pp), m)[rank]:
        held += 1 if kind == BWD else -1 if kind == WGRAD else 0
        peak = max(peak, held)
    return peak


# --------------------------------------------------------------------------- registry
class _VSchedule(Schedule):
    """What ZB-V, V-half and V-min share: two V-placed chunks per rank whatever VPP says, split backward."""

    splits_wgrad = True
    chunk_placement = "v"
    fixed_chunks: ClassVar[int | None] = 2
    kept_over_vpp = True  # Primus's flag sets VPP = 2 itself (zbpp_utils.py); another VPP is refused by legality
    batch_kernel = None  # one configuration at a time (``simulate_v``)

    def legality(self, pp: int, vpp: int | None, num_microbatches: int) -> list[str]:
        return v_problems(self.name, pp, vpp, num_microbatches)

    def rank_order(self, rank: int, pp: int, vpp: int, m: int, group: int | None = None,
                   extra_warmup: int = 0) -> list[tuple[int, int, int]]:
        """The uniform-time order (ZB-V's ``simulate`` re-chooses it on the actual op times)."""
        return list(v_orders(self.name, unit_times(pp), m)[rank])

    def simulate(self, times, num_microbatches: int, p2p=(), **kwargs):
        return simulate_v(self.name, times, num_microbatches, tuple(p2p), kwargs.get("timeline", False))

    def chunk_in_flight(self, rank: int, pp: int, vpp: int, m: int, extra: int = 0) -> tuple[float, ...]:
        """Per chunk: micro-batches held at the rank's peak (their sum / 2 = whole-stage micro-batches)."""
        if v_problems(self.name, pp, 2, m):
            return (0.0, 0.0)
        return tuple(float(n) for n in held_at_peak(self.name, rank, pp, m))

    def wgrad_held_microbatches(self, rank: int, pp: int, m: int) -> int:
        if v_problems(self.name, pp, 2, m):
            return 0
        return math.ceil(wgrad_held_chunks(self.name, rank, pp, m) / 2)  # half-stage chunks


@register
class ZBV(_VSchedule):
    """ZB-V (arXiv:2405.15362 table 1; Primus zbv.py): 1F1B's memory, bubble ~ the fill alone."""

    name = "zb-v"
    label = "ZB-V"
    primus_names = ("zbv-formatted",)  # primus_pipeline.yaml pp_algorithm


@register
class VHalf(_VSchedule):
    """V-Half (arXiv:2405.15362 sec. 3; Primus zbv_greedy.py "half"): about half of 1F1B's activations."""

    name = "v-half"
    label = "V-Half"
    primus_names = ("v-half",)  # primus_pipeline.yaml pp_algorithm


@register
class VMin(_VSchedule):
    """V-Min (arXiv:2405.15362 sec. 3; Primus zbv_greedy.py "min"): about a third of 1F1B's activations."""

    name = "v-min"
    label = "V-Min"
    primus_names = ("v-min",)  # primus_pipeline.yaml pp_algorithm


__all__ = [
    "SLOTS_PER_MICROBATCH",
    "V_SCHEDULES",
    "ZBV",
    "VHalf",
    "VMin",
    "block_order",
    "held_at_peak",
    "in_flight_chunks",
    "simulate_v",
    "unit_times",
    "v_half_block",
    "v_min_block",
    "v_orders",
    "v_problems",
    "wgrad_held_chunks",
    "zb_v_caps",
]
