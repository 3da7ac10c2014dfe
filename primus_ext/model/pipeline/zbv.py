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
  slots (one micro-batch = F, B, W of two chunks); warm-up and cool-down ops then move to earlier free slots
  that raise no rank's memory (``squeeze``, after zbv_greedy.reorder); each W goes in the rank's next free
  slot, W of chunk 1 first (zbv_greedy.put_w with split W); the rank runs its ops in slot order. The steady
  state, and so the memory, is the block's; the ramps may differ from Primus's (its reorder also moves Ws).

Activation memory is counted in chunk-micro-batches (one chunk's saved activations of one micro-batch): +1 at F,
-1 at its input-grad B; the weight-grad inputs a deferred W still holds are counted apart (``wgrad_held_chunks``).
Pure and torch-free.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import ClassVar

from primus_ext.model.pipeline.ops import BWD, FWD, WGRAD, ChunkTimes, ScheduleResult, Structure, replay
from primus_ext.model.pipeline.registry import Schedule, peak_count, register
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


Slots = dict[tuple[int, int], list[int]]
"""One rank's slot times: (kind, chunk) -> slot of micro-batch 0, 1, ..."""


def block_slots(block: tuple[int, int, int, int], m: int) -> Slots:
    """One rank's F / B slots from its block: micro-batch k's at the block's offsets + 6k."""
    f0, f1, b1, b0 = block
    per = SLOTS_PER_MICROBATCH
    return {(FWD, 0): [f0 + per * k for k in range(m)], (FWD, 1): [f1 + per * k for k in range(m)],
            (BWD, 1): [b1 + per * k for k in range(m)], (BWD, 0): [b0 + per * k for k in range(m)]}


def slots_peak(slots: Slots) -> tuple[int, int]:
    """Most micro-batch chunks a rank holds over its slots: (from F to its B, as ``in_flight_chunks`` counts;
    from F to its W, Primus's way, zbv_greedy.mem_of_stage), each W in the rank's next free slot after its B."""
    kinds = {t: kind for (kind, _), ts in slots.items() for t in ts}
    to_b = to_w = peak_b = peak_w = waiting = 0
    for slot in range(max(kinds) + 1):
        kind = kinds.get(slot)
        if kind == FWD:
            to_b, to_w = to_b + 1, to_w + 1
            peak_b, peak_w = max(peak_b, to_b), max(peak_w, to_w)
        elif kind == BWD:
            to_b, waiting = to_b - 1, waiting + 1
        elif waiting:
            to_w, waiting = to_w - 1, waiting - 1
    return peak_b, peak_w


def _input_slot(ranks: list[Slots], rank: int, kind: int, chunk: int, mb: int) -> int:
    """Latest slot an op must follow: its input along the V (the turn on rank P-1 and rank 0's last stage are
    local) and the same op of the previous micro-batch; -1 for none."""
    pp, dep = len(ranks), -1
    if kind == FWD and chunk == 0 and rank > 0:
        dep = ranks[rank - 1][(FWD, 0)][mb]
    elif kind == FWD and chunk == 1:
        dep = ranks[rank + 1][(FWD, 1)][mb] if rank < pp - 1 else ranks[rank][(FWD, 0)][mb]
    elif kind == BWD and chunk == 1:
        dep = ranks[rank - 1][(BWD, 1)][mb] if rank > 0 else ranks[rank][(FWD, 1)][mb]
    elif kind == BWD:
        dep = ranks[rank + 1][(BWD, 0)][mb] if rank < pp - 1 else ranks[rank][(BWD, 1)][mb]
    return max(dep, ranks[rank][(kind, chunk)][mb - 1]) if mb else dep


def squeeze(ranks: list[Slots], m: int) -> list[Slots]:
    """Move warm-up and cool-down ops to earlier free slots (Primus zbv_greedy.py's reorder, arXiv:2405.15362
    sec. 3.2 "squeeze"): in slot order, an op before rank 0's first chunk-0 B or after rank 0's last chunk-0 F
    takes the earliest free slot of its rank after its input's, if that raises no rank's peak above the
    block's (``slots_peak``: held from F to B and from F to W); the steady state between keeps the block's slots.
    Primus's version also moves Ws in a first pass; this one moves F and B (the Ws follow into free slots)."""
    ranks = [{key: list(ts) for key, ts in slots.items()} for slots in ranks]
    peaks = [slots_peak(slots) for slots in ranks]
    limit = (max(p[0] for p in peaks), max(p[1] for p in peaks))
    ops = sorted((t, r, kind, chunk, mb) for r, slots in enumerate(ranks) for (kind, chunk), ts in slots.items()
                 for mb, t in enumerate(ts))
    phase = 0  # 0 warm-up, 1 steady state (kept), 2 cool-down
    for _, r, kind, chunk, mb in ops:
        if phase == 0 and (kind, chunk, r) == (BWD, 0, 0):
            phase = 1
        if phase == 1:
            phase = 2 if (kind, chunk, mb, r) == (FWD, 0, m - 1, 0) else 1
            continue
        own = ranks[r][(kind, chunk)]
        was = own[mb]
        taken = {t for ts in ranks[r].values() for t in ts}
        for slot in range(_input_slot(ranks, r, kind, chunk, mb) + 1, was):
            if slot not in taken:
                own[mb] = slot
                peak_b, peak_w = slots_peak(ranks[r])
                if peak_b <= limit[0] and peak_w <= limit[1]:
                    break
                own[mb] = was
    return ranks


def slot_order(slots: Slots) -> list[tuple[int, int, int]]:
    """One rank's (kind, micro-batch, chunk) order: its F / B in slot order; a free slot runs the oldest waiting
    W (chunk 1's before chunk 0's, zbv_greedy.put_w with split W); the Ws left at the end follow in that order."""
    at = {t: (kind, mb, chunk) for (kind, chunk), ts in slots.items() for mb, t in enumerate(ts)}
    assert len(at) == sum(map(len, slots.values())), "two ops in one slot"
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


def block_order(block: tuple[int, int, int, int], m: int) -> list[tuple[int, int, int]]:
    """One rank's order from its block alone (no squeeze)."""
    return slot_order(block_slots(block, m))


# --------------------------------------------------------------------------- orders and runs
def zb_v_caps(pp: int) -> tuple[int, ...]:
    """ZB-V's activation limit per rank, chunk-micro-batches: 1F1B's P whole-stage micro-batches = 2P chunks
    (Primus zbv.py ``max_mem = f_mem * n_stage * 2``; arXiv:2405.15362 table 1: ZB-V memory = 1F1B's)."""
    return (2 * pp,) * pp


@lru_cache(maxsize=256)
def v_orders(schedule: str, times: tuple[tuple[ChunkTimes, ...], ...], m: int,
             w_share: float = 0.0) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """Per-rank (kind, micro-batch, chunk) orders of a V schedule; ``times`` and ``w_share`` (a deferred W's inputs
    as a share of a chunk's forward activations: ``wgrad_share``) matter for ``zb-v`` only."""
    pp = len(times)
    if schedule != "zb-v":
        return block_orders(schedule, pp, m)
    return tuple(tuple(o) for o in greedy_orders(times, m, zb_v_caps(pp), v_stage, zb_v_caps(pp), w_share))


def wgrad_share(hidden_size: int, num_attention_heads: int, seq_length: int) -> float:
    """A deferred W's held inputs over a layer's forward activations, as Primus's zero-bubble runtime estimates
    them to build its ZB-V order (zerobubble/runtime.py: f_mem = 34h + 5as, w_mem = -32h; Korthikanti et al.
    2022 per-token activation bytes)."""
    f_mem = 34 * hidden_size + 5 * num_attention_heads * seq_length
    return 32 * hidden_size / f_mem if f_mem > 0 else 0.0


@lru_cache(maxsize=256)
def _block_structure(schedule: str, pp: int, m: int) -> Structure:
    """V-half's / V-min's placed structure: their orders ignore the op times, so it is built once per (PP, M)."""
    return place_mapped([list(o) for o in block_orders(schedule, pp, m)], pp, 2, m, v_stage)


@lru_cache(maxsize=256)
def block_orders(schedule: str, pp: int, m: int) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """V-half's / V-min's per-rank orders: the block, squeezed, Ws in free slots (they ignore the op times)."""
    block = v_half_block(pp) if schedule == "v-half" else v_min_block(pp)
    return tuple(tuple(slot_order(slots)) for slots in squeeze([block_slots(b, m) for b in block], m))


def unit_times(pp: int) -> tuple[tuple[ChunkTimes, ...], ...]:
    """T_F = T_B = T_W = 1 on every chunk: the papers' setting, and the order ``rank_order`` / the memory use."""
    return ((ChunkTimes(fwd=1.0, bwd=2.0, wgrad=1.0),) * 2,) * pp


def simulate_v(schedule: str, times: tuple[tuple[ChunkTimes, ...], ...], m: int, p2p: tuple[float, ...] = (),
               timeline: bool = False, w_share: float = 0.0) -> ScheduleResult:
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
    st = (_block_structure(schedule, pp, m) if schedule != "zb-v"
          else place_mapped([list(o) for o in v_orders(schedule, times, m, w_share)], pp, 2, m, v_stage))
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


@lru_cache(maxsize=1024)
def held_states(schedule: str, rank: int, pp: int, m: int,
                w_share: float = 0.0) -> tuple[tuple[tuple[float, float], float], ...]:
    """The states along ``rank``'s uniform-time order that no other state holds less than in every part: (forward
    activations per chunk, deferred weight-gradient inputs in whole-stage units: two half-stage chunks each), so
    the memory model can take the joint peak rather than the sum of the two parts' separate peaks."""
    held, w, states = [0, 0], 0, set()
    for kind, _, chunk in v_orders(schedule, unit_times(pp), m, w_share)[rank]:
        held[chunk] += 1 if kind == FWD else -1 if kind == BWD else 0
        w += 1 if kind == BWD else -1 if kind == WGRAD else 0
        states.add((held[0], held[1], w))
    top = [x for x in states if not any(y != x and all(b >= a for a, b in zip(x, y, strict=True)) for y in states)]
    return tuple(((float(a), float(b)), c / 2) for a, b, c in sorted(top))


# --------------------------------------------------------------------------- registry
class _VSchedule(Schedule):
    """What ZB-V, V-half and V-min share: two V-placed chunks per rank whatever VPP says, split backward."""

    splits_wgrad = True
    chunk_placement = "v"
    fixed_chunks: ClassVar[int | None] = 2
    kept_over_vpp = True  # Primus's flag sets VPP = 2 itself (zbpp_utils.py); another VPP is refused by legality
    batch_kernel = None  # one configuration at a time (``simulate_v``)

    mem_setup: ClassVar[str] = ""
    """Primus ``zero_bubble_v_schedule_mem_setup`` value (zerobubble/README.md's flag table)."""

    def recipe_keys(self, pp: int) -> dict[str, object] | None:
        return {**super().recipe_keys(pp), "patch_zero_bubble": True, "zero_bubble_v_schedule": True,
                "zero_bubble_v_schedule_mem_setup": self.mem_setup}

    def legality(self, pp: int, vpp: int | None, num_microbatches: int) -> list[str]:
        return v_problems(self.name, pp, vpp, num_microbatches)

    def rank_order(self, rank: int, pp: int, vpp: int, m: int, group: int | None = None,
                   extra_warmup: int = 0) -> list[tuple[int, int, int]]:
        """The uniform-time order (ZB-V's ``simulate`` re-chooses it on the actual op times)."""
        return list(v_orders(self.name, unit_times(pp), m)[rank])

    def simulate(self, times, num_microbatches: int, p2p=(), **kwargs):
        return simulate_v(self.name, times, num_microbatches, tuple(p2p), kwargs.get("timeline", False),
                          kwargs.get("wgrad_share", 0.0))

    def chunk_in_flight(self, rank: int, pp: int, vpp: int, m: int, extra: int = 0) -> tuple[float, ...]:
        """Per chunk: micro-batches held at the rank's peak (their sum / 2 = whole-stage micro-batches)."""
        if v_problems(self.name, pp, 2, m):
            return (0.0, 0.0)
        return tuple(float(n) for n in held_at_peak(self.name, rank, pp, peak_count(pp, m)))

    def held_states(self, rank: int, pp: int, vpp: int, m: int, extra: int = 0,
                    wgrad_share: float = 0.0) -> tuple[tuple[tuple[float, ...], float], ...]:
        if v_problems(self.name, pp, 2, m):
            return super().held_states(rank, pp, vpp, m, extra, wgrad_share)
        return held_states(self.name, rank, pp, peak_count(pp, m), wgrad_share)

    def wgrad_held_microbatches(self, rank: int, pp: int, m: int) -> int:
        if v_problems(self.name, pp, 2, m):
            return 0
        return math.ceil(wgrad_held_chunks(self.name, rank, pp, peak_count(pp, m)) / 2)  # half-stage chunks


@register
class ZBV(_VSchedule):
    """ZB-V (arXiv:2405.15362 table 1; Primus zbv.py): 1F1B's memory, bubble ~ the fill alone."""

    name = "zb-v"
    mem_setup = "zb"
    label = "ZB-V"
    primus_names = ("zbv-formatted",)  # primus_pipeline.yaml pp_algorithm


@register
class VHalf(_VSchedule):
    """V-Half (arXiv:2405.15362 sec. 3; Primus zbv_greedy.py "half"): about half of 1F1B's activations."""

    name = "v-half"
    mem_setup = "half"
    label = "V-Half"
    primus_names = ("v-half",)  # primus_pipeline.yaml pp_algorithm


@register
class VMin(_VSchedule):
    """V-Min (arXiv:2405.15362 sec. 3; Primus zbv_greedy.py "min"): about a third of 1F1B's activations."""

    name = "v-min"
    mem_setup = "min"
    label = "V-Min"
    primus_names = ("v-min",)  # primus_pipeline.yaml pp_algorithm


__all__ = ["SLOTS_PER_MICROBATCH", "V_SCHEDULES", "ZBV", "VHalf", "VMin", "block_order", "block_slots", "held_at_peak",
           "in_flight_chunks", "simulate_v", "slot_order", "slots_peak", "squeeze", "unit_times", "v_half_block",
           "v_min_block", "v_orders", "v_problems", "wgrad_held_chunks", "zb_v_caps"]
