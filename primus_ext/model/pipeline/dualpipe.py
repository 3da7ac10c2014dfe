"""DeepSeek's bidirectional pipeline schedules: DualPipe and its V-shaped half, DualPipeV.

    >>> from primus_ext.model.pipeline.dualpipe import simulate_dualpipe
    >>> from primus_ext.model.pipeline import uniform_times
    >>> r = simulate_dualpipe("dualpipe", uniform_times(4, 2, 1.0, 2.0, 1.0), 8)   # [rank][copy], seconds
    >>> r.makespan, r.bubble_time

Sources: DeepSeek-V3 technical report (arXiv:2412.19437) sec. 3.2.1, fig. 4-5, table 2; the DualPipe repository
(deepseek-ai/DualPipe, README) whose per-rank step order torch 2.13 re-implements for DualPipeV
(``torch.distributed.pipelining.schedules.ScheduleDualPipeV``; tests/model/pipeline/test_dualpipe.py compares
this module's order with it op by op).

* ``dualpipe``: PP ranks (PP even), two model copies per rank. Half the micro-batches enter at rank 0 and run
  ranks 0..PP-1 on copy 0 (rank r holds its stage r), the other half enter at rank PP-1 and run PP-1..0 on copy 1
  (rank r holds its stage PP-1-r). ``times[rank][copy]``; ``p2p[l]``: send/recv seconds between ranks l and l+1,
  crossed by both directions.
* ``dualpipev``: one model copy cut in 2*PP stages on PP ranks, V-shaped: chunk 0 is stage r, chunk 1 stage
  2*PP-1-r (Sea AI Lab's "cut-in-half" DualPipe). ``times[rank][chunk]``; ``p2p[s]``: send/recv seconds
  between virtual stages s and s+1 (``p2p[PP-1]`` is the turn on rank PP-1: pass 0).

Every rank runs the same eight steps (``phase`` 0 = the direction entering at the rank's own end, 1 = the other;
``h`` its distance to the nearer end, ``H`` the ranks per half: PP/2, or PP for DualPipeV; ``n`` micro-batches
per direction: M/2, or M): 1. 2(H-h-1) forwards of phase 0; 2. h+1 x (F0, F1); 3. H-h-1 x (input-grad B1, W,
F1); 4. n-2H+h+1 x (F0&B1, F1&B0): the steady state, overlapped pairs (the middle rank runs its first F0 and
B1 apart); 5. H-h-1 x (B1, F1&B0); 6. h+1 x (B1, B0), the second half of them input-grad only; 7. H-h-1 x
(W, input-grad B0); 8. h+1 x W. A W runs the weight-grad of the oldest input-grad-only B.

Op times (``ChunkTimes``; the EP all-to-all convention of ``pipeline.ops``): ``fwd`` / ``bwd`` are a chunk's
passes with their all-to-all hidden behind another micro-batch's compute, ``fwd_unpaired`` / ``bwd_unpaired``
what a pass adds when it runs alone. So an overlapped F&B pair takes ``fwd(F's chunk) + bwd(B's chunk)`` (both
all-to-alls hidden: when the communication exceeds the other pass's compute, the caller's paired ``fwd`` /
``bwd`` carry the excess); a pass alone takes ``fwd + fwd_unpaired`` (``bwd + bwd_unpaired``); an input-grad B
``bwd - wgrad + bwd_unpaired`` and its W ``wgrad``. Outputs leave at the end of their op (the repository
batches some sends with the next op's; not modelled). Pure and torch-free.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from typing import ClassVar

from primus_ext.errors import PrimusExtError
from primus_ext.model.pipeline.ops import BWD, FWD, NO_PAIR, WGRAD, ChunkTimes, ScheduleResult, Structure, replay
from primus_ext.model.pipeline.registry import Schedule, peak_count, register

NAMES = ("dualpipe", "dualpipev")
IGRAD = 3
"""Order kind: an input-grad-only backward (zero-bubble B; its weight-grad runs later as a W)."""
F_AND_B = 4
"""Order kind: an overlapped pair, ``(F_AND_B, F's micro-batch, F's chunk, B's micro-batch, B's chunk)``."""
MODEL_COPIES = {"dualpipe": 2, "dualpipev": 1}
"""Parameter copies per rank: DualPipe keeps one per direction (report table 2: "2x" parameters), DualPipeV one
model cut in 2*PP chunks (the DualPipe README's table: "1x")."""


# --------------------------------------------------------------------------- legality
def dualpipe_problems(schedule: str, pp: int, vpp: int | None, num_microbatches: int) -> list[str]:
    """What ``schedule`` requires of PP, VPP and the micro-batch count ([] when it runs).

    DualPipe (repository's ``DualPipe.step`` assertions): an even PP, an even micro-batch count of at least
    2*PP (half per direction, each at least PP). DualPipeV (``ScheduleDualPipeV``: at least as many micro-batches
    as its 2*PP stages). Neither takes another VPP: the two chunks per rank are the schedule's own (DualPipeV's V is
    two stages per rank, the VPP 2 a layout of 2*PP stages implies)."""
    if schedule not in NAMES:
        return [f"unknown DeepSeek schedule {schedule!r}; known: {', '.join(NAMES)}"]
    problems = []
    if pp < 1 or num_microbatches < 1:
        problems.append(f"{schedule} needs at least one pipeline rank and one micro-batch; got PP={pp}, "
                        f"micro-batches={num_microbatches}")
        return problems
    if schedule == "dualpipe" and (vpp or 1) > 1:
        problems.append(f"{schedule} places its own two chunks per rank; got VPP={vpp}: unset VPP")
    elif (vpp or 1) > 2:  # DualPipeV's V: two stages per rank, as a layout of 2*PP stages gives them (VPP 2)
        problems.append(f"{schedule} places exactly two chunks per rank (a V); got VPP={vpp}: unset VPP or use 2")
    if schedule == "dualpipe" and pp % 2:
        problems.append(f"dualpipe needs an even PP (half the ranks per direction); got PP={pp}")
    if num_microbatches < 2 * pp:
        problems.append(f"{schedule} needs at least 2*PP = {2 * pp} micro-batches; got {num_microbatches}")
    if schedule == "dualpipe" and num_microbatches % 2:
        problems.append(f"dualpipe splits the micro-batches over two directions: need an even count; got "
                        f"{num_microbatches}")
    return problems


def check(schedule: str, pp: int, vpp: int | None, num_microbatches: int) -> None:
    problems = dualpipe_problems(schedule, pp, vpp, num_microbatches)
    if problems:
        raise PrimusExtError("; ".join(problems))


# --------------------------------------------------------------------------- op order
def _halves(schedule: str, pp: int, m: int) -> tuple[int, int]:
    """(ranks per half H, micro-batches per direction n)."""
    return (pp // 2, m // 2) if schedule == "dualpipe" else (pp, m)


def _phase_steps(big_h: int, h: int, n: int) -> list[tuple]:
    """The eight steps (module docstring) in phases: ("F", p), ("B", p) full, ("I", p) input-grad, ("W",),
    ("FB", p_forward, p_backward)."""
    rest = big_h - h - 1
    ops: list[tuple] = [("F", 0)] * (2 * rest) + [("F", 0), ("F", 1)] * (h + 1)
    ops += [("I", 1), ("W",), ("F", 1)] * rest
    for i in range(n - 2 * big_h + h + 1):
        # the middle rank's first F0 and B1 run apart: "to further reduce bubble size" (repository, step 4)
        ops += [("F", 0), ("B", 1)] if i == 0 and h == big_h - 1 else [("FB", 0, 1)]
        ops.append(("FB", 1, 0))
    ops += [("B", 1), ("FB", 1, 0)] * rest
    zb = False
    for i in range(h + 1):  # step 6: input-grad only from the middle of the step on
        zb = zb or (i == (h + 1) // 2 and h % 2 == 1)
        ops.append(("I" if zb else "B", 1))
        zb = zb or (i == (h + 1) // 2 and h % 2 == 0)
        ops.append(("I" if zb else "B", 0))
    return ops + [("W",), ("I", 0)] * rest + [("W",)] * (h + 1)


@lru_cache(maxsize=256)
def op_order(schedule: str, rank: int, pp: int, m: int) -> tuple[tuple[int, ...], ...]:
    """Rank ``rank``'s ops: ``(kind, micro-batch, chunk)`` with kind FWD, BWD (full), IGRAD or WGRAD, and
    ``(F_AND_B, mb_f, chunk_f, mb_b, chunk_b)`` pairs. Micro-batches count per chunk from 0 (DualPipe: within
    the chunk's direction)."""
    check(schedule, pp, 1, m)
    big_h, n = _halves(schedule, pp, m)
    h = min(rank, pp - 1 - rank) if schedule == "dualpipe" else rank
    flip = 1 if schedule == "dualpipe" and rank >= pp // 2 else 0  # phase -> copy (the near direction's copy)
    fwd, bwd = [0, 0], [0, 0]
    pending: list[tuple[int, int]] = []  # input-grad-only B's (chunk, mb) awaiting their W, oldest first
    out: list[tuple[int, ...]] = []
    for op in _phase_steps(big_h, h, n):
        if op[0] == "W":
            c, mb = pending.pop(0)
            out.append((WGRAD, mb, c))
        elif op[0] == "FB":
            cf, cb = op[1] ^ flip, op[2] ^ flip
            out.append((F_AND_B, fwd[cf], cf, bwd[cb], cb))
            fwd[cf] += 1
            bwd[cb] += 1
        elif op[0] == "F":
            c = op[1] ^ flip
            out.append((FWD, fwd[c], c))
            fwd[c] += 1
        else:
            c = op[1] ^ flip
            out.append((BWD if op[0] == "B" else IGRAD, bwd[c], c))
            if op[0] == "I":
                pending.append((c, bwd[c]))
            bwd[c] += 1
    assert fwd == bwd == [n, n] and not pending, "DualPipe order is incomplete"
    return tuple(out)


# --------------------------------------------------------------------------- structure and run
def _chain(schedule: str, pp: int, rank: int, chunk: int) -> tuple[int, int, int]:
    """(chain, position along it, chain length): DualPipe's two directions are chains of PP stages,
    DualPipeV's V one chain of 2*PP."""
    if schedule == "dualpipe":
        return chunk, rank if chunk == 0 else pp - 1 - rank, pp
    return 0, rank if chunk == 0 else 2 * pp - 1 - rank, 2 * pp


def _p2p_slot(schedule: str, pp: int, chain: int, pos: int) -> int:
    """The ``p2p`` index of the boundary between positions ``pos`` and ``pos + 1`` of ``chain``."""
    return pp - 2 - pos if schedule == "dualpipe" and chain == 1 else pos


def _slot(pp: int, rank: int, kind: int, chunk: int, chunk_b: int = 0) -> int:
    """Duration slot: per rank 4 alone kinds (F, full B, input-grad B, W) x 2 chunks, then 4 pair slots."""
    if kind == F_AND_B:
        return 8 * pp + rank * 4 + chunk * 2 + chunk_b
    return (rank * 4 + (FWD, BWD, IGRAD, WGRAD).index(kind)) * 2 + chunk


def op_durations(times: tuple[tuple[ChunkTimes, ...], ...]) -> list[float]:
    """Seconds per duration slot (``_slot``): the module docstring's op times."""
    alone, pairs = [], []
    for row in times:
        for kind in (FWD, BWD, IGRAD, WGRAD):
            for c in row:
                alone.append({FWD: c.fwd + c.fwd_unpaired, BWD: c.bwd + c.bwd_unpaired,
                              IGRAD: c.bwd - min(c.wgrad, c.bwd) + c.bwd_unpaired, WGRAD: min(c.wgrad, c.bwd)}[kind])
        pairs += [row[cf].fwd + row[cb].bwd for cf in range(2) for cb in range(2)]
    return alone + pairs


@lru_cache(maxsize=256)
def dualpipe_structure(schedule: str, pp: int, m: int) -> Structure:
    """The per-rank orders placed topologically (each rank as far as its inputs are placed), with both inputs
    of every overlapped pair (``Structure.pairs``)."""
    orders = [op_order(schedule, r, pp, m) for r in range(pp)]
    half = m // 2 if schedule == "dualpipe" else 0  # DualPipe's direction-1 micro-batches are M/2..M-1
    placed: dict[tuple[str, int, int, int], int] = {}

    def source(kind: str, rank: int, chunk: int, mb: int) -> tuple[int, int] | None:
        """(input position, p2p slot) of a pass; None while its input is not placed; position -1 = none."""
        chain, pos, length = _chain(schedule, pp, rank, chunk)
        if kind == "F":
            return (-1, -1) if pos == 0 else _found(placed.get(("F", chain, pos - 1, mb)),
                                                    _p2p_slot(schedule, pp, chain, pos - 1))
        if pos == length - 1:  # the loss: this rank's own forward
            return _found(placed.get(("F", chain, pos, mb)), -1)
        return _found(placed.get(("B", chain, pos + 1, mb)), _p2p_slot(schedule, pp, chain, pos))

    ops, steps, pairs = [], [], []
    pointers, last = [0] * pp, [0] * pp
    remaining = sum(map(len, orders))
    while remaining:
        progressed = False
        for r in range(pp):
            while pointers[r] < len(orders[r]):
                op = orders[r][pointers[r]]
                if op[0] == WGRAD:
                    first, second = (-1, -1), None
                else:
                    first = source("F" if op[0] in (FWD, F_AND_B) else "B", r, op[2], op[1])
                    second = source("B", r, op[4], op[3]) if op[0] == F_AND_B else None
                if first is None or (op[0] == F_AND_B and second is None):
                    break
                kind = FWD if op[0] == F_AND_B else BWD if op[0] == IGRAD else op[0]
                ops.append((kind, r, op[2], op[1] + half * op[2]))
                pos = len(ops)
                steps.append((last[r], max(first[0], 0), _slot(pp, r, op[0], op[2], op[4] if second else 0), first[1]))
                pairs.append((second[0], second[1], BWD, op[4], op[3] + half * op[4]) if second else NO_PAIR)
                if op[0] != WGRAD:
                    placed[("F" if kind == FWD else "B", *_chain(schedule, pp, r, op[2])[:2], op[1])] = pos
                if second:
                    placed[("B", *_chain(schedule, pp, r, op[4])[:2], op[3])] = pos
                last[r] = pos
                pointers[r] += 1
                remaining -= 1
                progressed = True
        assert progressed, "DualPipe order deadlocks"
    return Structure(tuple(ops), tuple(steps), tuple(last), tuple(pairs))


def _found(position: int | None, slot: int) -> tuple[int, int] | None:
    return None if position is None else (position, slot)


def unpaired_extra(schedule: str, times: tuple[tuple[ChunkTimes, ...], ...], m: int) -> tuple[float, ...]:
    """Per rank: what its passes run alone add (their exposed EP all-to-all, ``fwd_unpaired`` / ``bwd_unpaired``)."""
    pp = len(times)
    return tuple(sum(times[r][op[2]].fwd_unpaired if op[0] == FWD else times[r][op[2]].bwd_unpaired
                     for op in op_order(schedule, r, pp, m) if op[0] in (FWD, BWD, IGRAD)) for r in range(pp))


def simulate_dualpipe(schedule: str, times: tuple[tuple[ChunkTimes, ...], ...], num_microbatches: int,
                      p2p: tuple[float, ...] = (), *, timeline: bool = False) -> ScheduleResult:
    """One step of ``schedule`` ("dualpipe" / "dualpipev"): ``times[rank][chunk]`` (two chunks per rank; see the
    module docstring for what chunk and ``p2p`` index). Illegal shapes raise ``PrimusExtError``."""
    pp = len(times)
    if pp == 0 or any(len(row) != 2 for row in times):
        raise PrimusExtError(f"{schedule} needs two chunk times per pipeline rank (times[rank][chunk])")
    check(schedule, pp, 1, num_microbatches)
    links = pp - 1 if schedule == "dualpipe" else 2 * pp - 1
    p2p = tuple(p2p) + (0.0,) * (links - len(p2p))
    st = dualpipe_structure(schedule, pp, num_microbatches)
    unpaired = unpaired_extra(schedule, times, num_microbatches)
    per_chunk = _halves(schedule, pp, num_microbatches)[1]  # micro-batches through each chunk of a rank
    result = replay(schedule, st, times, per_chunk, op_durations(times), p2p, timeline,
                    unpaired if any(unpaired) else ())
    return replace(result, num_microbatches=num_microbatches)


# --------------------------------------------------------------------------- memory
def in_flight_by_chunk(schedule: str, rank: int, pp: int, m: int) -> tuple[int, int]:
    """Chunk-micro-batches whose forward activations ``rank`` holds, per chunk, at its first peak: +1 at a
    forward, -1 at its (input-grad) backward; an overlapped pair's forward allocates before its backward frees."""
    held, peak = [0, 0], (0, 0)
    for op in op_order(schedule, rank, pp, m):
        if op[0] in (FWD, F_AND_B):
            held[op[2]] += 1
            if sum(held) > sum(peak):
                peak = (held[0], held[1])
        if op[0] in (BWD, IGRAD):
            held[op[2]] -= 1
        elif op[0] == F_AND_B:
            held[op[4]] -= 1
    return peak


def in_flight_chunks(schedule: str, rank: int, pp: int, m: int) -> int:
    """Peak chunk-micro-batches of activations ``rank`` holds (``in_flight_by_chunk`` summed). DeepSeek-V3 report
    table 2: PP+1 on every DualPipe rank (a chunk is a whole stage there), 2*PP+1 chunks of half a stage for
    DualPipeV (the DualPipe README's PP+1 with PP its 2*PP stages)."""
    return sum(in_flight_by_chunk(schedule, rank, pp, m))


def in_flight_stages(schedule: str, rank: int, pp: int, m: int) -> float:
    """``in_flight_chunks`` in whole-stage micro-batches (L/PP layers; ``Schedule.in_flight_microbatches``):
    DualPipe's chunks are whole stages, DualPipeV's halves."""
    return in_flight_chunks(schedule, rank, pp, m) / (1 if schedule == "dualpipe" else 2)


def wgrad_held_chunks(schedule: str, rank: int, pp: int, m: int) -> int:
    """Peak input-grad-only backwards whose weight-grad inputs ``rank`` holds until their W."""
    held = peak = 0
    for op in op_order(schedule, rank, pp, m):
        held += {IGRAD: 1, WGRAD: -1}.get(op[0], 0)
        peak = max(peak, held)
    return peak


@lru_cache(maxsize=1024)
def held_walk(schedule: str, rank: int, pp: int, m: int) -> tuple[tuple[tuple[float, float], float], ...]:
    """Every state ``rank`` passes through where its memory can peak: after each forward allocates, (chunk-micro-
    batches of activations held per chunk, input-grad-only backwards whose weight-grad inputs wait for their W, in
    units of the rank's two chunks: half a chunk each). Walked op by op (``op_order``), so the two kinds of held
    tensors are added at the same moment, never at their separate peaks; only the states no other state covers."""
    held, waiting = [0, 0], 0
    states: list[tuple[tuple[float, float], float]] = []
    for op in op_order(schedule, rank, pp, m):
        kind = op[0]
        if kind in (FWD, F_AND_B):
            held[op[2]] += 1  # an overlapped pair's forward allocates before its backward frees
            states.append(((float(held[0]), float(held[1])), waiting / 2))
            if kind == F_AND_B:
                held[op[4]] -= 1
        elif kind == BWD:
            held[op[2]] -= 1
        elif kind == IGRAD:
            held[op[2]] -= 1
            waiting += 1
        elif kind == WGRAD:
            waiting -= 1
    covered = [s for s in states if not any(o != s and o[0][0] >= s[0][0] and o[0][1] >= s[0][1] and o[1] >= s[1]
                                            for o in states)]
    return tuple(dict.fromkeys(covered))


def model_copies(schedule: str) -> int:
    """Parameter (and gradient, optimizer-state) copies per rank: DualPipe 2, DualPipeV 1 (``MODEL_COPIES``)."""
    return MODEL_COPIES[schedule]


# --------------------------------------------------------------------------- registry
class _DeepSeekSchedule(Schedule):
    """What DualPipe and DualPipeV share: two chunks per rank whatever VPP says, weight-grads split off in the
    ramp-up and cool-down, their own op order and run (this module)."""

    splits_wgrad = True
    fixed_chunks = 2
    pairs_passes = True  # the F&B pairs of steps 4-5 hide each other's all-to-all (report sec. 3.2.1, fig. 4)
    kept_over_vpp = True  # chosen by name; VPP > 1 is refused by ``legality``, not silently swapped
    batch_kernel = None  # one configuration at a time (``simulate_dualpipe``)
    model_copies: ClassVar[int] = 1

    def legality(self, pp: int, vpp: int | None, num_microbatches: int) -> list[str]:
        return dualpipe_problems(self.name, pp, vpp, num_microbatches)

    def recipe_keys(self, pp: int) -> dict[str, object] | None:
        return None  # Primus's Megatron backend and Megatron-LM have no DualPipe: projected as a what-if

    def rank_order(self, rank: int, pp: int, vpp: int, m: int, group: int | None = None,
                   extra_warmup: int = 0) -> list[tuple[int, int, int]]:
        """(kind, micro-batch, chunk) in run order: an overlapped pair as its F then its B, an input-grad-only B
        as BWD (``op_order`` keeps them apart)."""
        out: list[tuple[int, int, int]] = []
        for op in op_order(self.name, rank, pp, m):
            if op[0] == F_AND_B:
                out += [(FWD, op[1], op[2]), (BWD, op[3], op[4])]
            else:
                out.append((BWD if op[0] == IGRAD else op[0], op[1], op[2]))
        return out

    def simulate(self, times, num_microbatches: int, p2p=(), **kwargs):
        """``simulate_dualpipe``; of ``schedules.simulate``'s options only ``timeline`` applies (the pairing is the
        schedule's own: its passes alone always take their ``*_unpaired`` time)."""
        return simulate_dualpipe(self.name, times, num_microbatches, p2p, timeline=kwargs.get("timeline", False))

    def chunk_in_flight(self, rank: int, pp: int, vpp: int, m: int, extra: int = 0) -> tuple[float, ...]:
        """Per chunk, at the rank's peak (``in_flight_by_chunk``); an illegal shape has no order: table 2's PP+1
        (DualPipeV: 2*PP+1 chunks), split as evenly as the two chunks allow."""
        if dualpipe_problems(self.name, pp, 1, m):
            total = pp + 1 if self.name == "dualpipe" else 2 * pp + 1
            return (float(total - total // 2), float(total // 2))
        return tuple(float(n) for n in in_flight_by_chunk(self.name, rank, pp, peak_count(pp, m)))

    def in_flight_microbatches(self, rank: int, pp: int, vpp: int, m: int, extra: int = 0) -> float:
        """Whole-stage micro-batches: DualPipe's chunks are whole stages (sum), DualPipeV's halves (mean)."""
        counts = self.chunk_in_flight(rank, pp, vpp, m, extra)
        return sum(counts) / (1 if self.name == "dualpipe" else len(counts))

    def wgrad_held_microbatches(self, rank: int, pp: int, m: int) -> int:
        if dualpipe_problems(self.name, pp, 1, m):
            return 0
        # in units of the rank's two chunks (what the memory model multiplies): half a chunk each
        return math.ceil(wgrad_held_chunks(self.name, rank, pp, peak_count(pp, m)) / 2)

    def held_states(self, rank: int, pp: int, vpp: int, m: int, extra: int = 0,
                    wgrad_share: float = 0.0) -> tuple[tuple[tuple[float, ...], float], ...]:
        """The states of ``held_walk``: activations and waiting weight-grad inputs at the same moments."""
        if dualpipe_problems(self.name, pp, 1, m):
            return super().held_states(rank, pp, vpp, m, extra, wgrad_share)
        return held_walk(self.name, rank, pp, peak_count(pp, m))


@register
class DualPipe(_DeepSeekSchedule):
    """DeepSeek-V3's DualPipe (arXiv:2412.19437 sec. 3.2.1): bidirectional, two model copies per rank."""

    name = "dualpipe"
    label = "DualPipe"
    model_copies = MODEL_COPIES["dualpipe"]

    def stage_of(self, rank: int, chunk: int, pp: int) -> int:
        """Model stage (layers) that copy ``chunk`` of ``rank`` holds: r for copy 0, PP-1-r for copy 1."""
        return rank if chunk == 0 else pp - 1 - rank

    def stage_count(self, pp: int, chunks: int) -> int:
        return pp  # both copies are the model cut in PP stages

    def chunk_microbatches(self, m: int) -> int:
        return m // 2  # one direction per copy, M/2 micro-batches each

    def p2p_links(self, pp: int, chunks: int) -> tuple[tuple[int, int], ...]:
        # simulate_dualpipe's p2p[l]: ranks l and l+1, crossed by both directions
        return tuple((r, r + 1) for r in range(pp - 1))


@register
class DualPipeV(_DeepSeekSchedule):
    """DualPipeV (DualPipe "cut in half", Sea AI Lab; torch ``ScheduleDualPipeV``): one copy, V placement."""

    name = "dualpipev"
    label = "DualPipeV"
    chunk_placement = "v"
    model_copies = MODEL_COPIES["dualpipev"]


__all__ = ["F_AND_B", "IGRAD", "MODEL_COPIES", "NAMES", "DualPipe", "DualPipeV", "check", "dualpipe_problems",
           "dualpipe_structure", "in_flight_by_chunk", "in_flight_chunks", "in_flight_stages", "model_copies",
           "op_durations", "op_order", "simulate_dualpipe", "unpaired_extra", "wgrad_held_chunks"]
