"""The step arithmetic, written once: every projection - one configuration (``evaluate``, ``project``) or
thousands (``evaluate_many``) - is assembled here, one configuration being a batch of one.

    >>> member = prepare(ctx, execution)                  # memoised lookups; raises on an illegal split / batch
    >>> steps = assemble(ctx, [member])                  # Steps: arrays over the members
    >>> steps.step[0], steps.parts["bubble_s"][0], steps.projection(0)

Per configuration Python only looks up what the cost table memoises (``projection.table``: the layer kinds' costs
and communication, the layer split's counts per chunk) and the send/recv seconds per stage boundary
(``tail.boundary_p2p``). Configurations sharing a schedule structure (schedule, PP, VPP, micro-batches, EP
overlap) then go through together:
  * chunk sums: counts per chunk (PP*VPP x layer rows, ``kind_rows``) times the rows' values (layer rows x
    ``FIELDS``), one batched matrix product;
  * the schedule: Megatron's fixed orders over a group of several configurations compiled in one call
    (``pipeline.simulate_many``, numba); one configuration, a requested timeline and the orders chosen on each
    configuration's op times (zero bubble, V, DualPipe) through ``Schedule.run`` (Python; the same recurrence and
    float operations for the fixed orders, tests/model/test_pipeline_batch.py: a single projection never imports
    numba); long runs extrapolate the periodic steady state either way;
  * the step tail: DP gradient reduction and parameter gather (``tail.rank_tail``, memoised per rank parameters and
    DP layout), their overlap with the pipeline's compute (``comm.aligned_dp_windows``), the optimizer;
  * the breakdown of the busiest rank, tok/s/GPU, TFLOP/s/GPU, MFU (``step_constants``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from primus_ext.errors import InfeasibleConfig, Problem
from primus_ext.model.kinds.registry import get_kind, pattern_kinds
from primus_ext.model.pipeline import ChunkTimes, unpaired_counts
from primus_ext.model.pipeline.registry import get_schedule, resolve_schedule
from primus_ext.model.pipeline.zbv import wgrad_share
from primus_ext.model.placement import group_placements, with_copies
from primus_ext.model.stages import virtual_stages
from primus_ext.projection.comm import aligned_dp_windows, describe, overlapped_exposed
from primus_ext.projection.result import Breakdown, CommTime, Projection, StageTime
from primus_ext.projection.table import CostTable, chunk_counts, layer_entry, layer_sources, split_key
from primus_ext.projection.tail import TAIL_LIMIT, boundary_p2p, rank_tail, step_constants
from primus_ext.specs import ExecutionSpec

LAYER_COMM_KINDS = ("tp", "cp", "ep", "fsdp")
COMM_KINDS = (*LAYER_COMM_KINDS, "pp", "dp_grad", "dp_param")
FIELDS = ("fwd", "bwd", "wgrad", "compute", "recompute", "dense", "experts", "passes", "layers", "embedding",
          "output", "fwd_unpaired", "bwd_unpaired",
          *(f"{part}_{kind}" for kind in LAYER_COMM_KINDS for part in ("total", "exposed", "has")))
"""Per-micro-batch values of a layer row, summed over a chunk's layers (``LayerCosts``' fields; ``layers``,
``embedding``, ``output``: counts of decoder layers, the embedding and the output layer; ``has_<kind>``: the layer
communicates over that group, listed in the breakdown even when it costs nothing)."""
F = MappingProxyType({name: k for k, name in enumerate(FIELDS)})
PARTS = ("compute_s", "bubble_s", "optimizer_s", "recompute_s", "overhead_s",
         *(f"{part}_{kind}_s" for kind in COMM_KINDS for part in ("exposed", "total")))
"""``Steps.parts``: the breakdown's seconds per step, named as ``tune.oracle.score_of`` names them."""


GPT_COLUMNS = (0, 1, 2, 3, 4, 4, 5, 6)
"""``chunk_counts``' column of each of a model's first eight layer rows (``kind_rows``; a hybrid model's kinds follow,
one column each): the MTP layer and its output head are counted by one column."""
EMBEDDING_ROW, OUTPUT_ROW = 6, 7
"""The embedding's and the output layer's rows (row 5, the MTP head, shares the output layer's parameters and is no
output layer of its stage)."""


@dataclass(frozen=True)
class KindRow:
    """One row of the layer-row matrix: a cost-table entry and the ``table.chunk_counts`` column that counts it."""

    layer: tuple[str, bool]
    """(layer kind, recomputed variant): ``table.rank_layers``' key."""
    column: int
    owns_params: bool
    """False for the MTP head, which shares the output layer's parameters."""
    decoder: bool
    """Counted as a decoder layer (``StageTime.layers``)."""


def kind_rows(ctx: CostTable, layers: Mapping) -> tuple[KindRow, ...]:
    """The layer rows of ``chunk_counts``' columns (dense kept / recomputed, MoE kept / recomputed, MTP, embedding,
    output, then a hybrid model's kinds in ``pattern_kinds`` order; a hybrid kind's recomputed variant is its
    selective-recompute one when the table has it)."""
    mtp = "moe" if ctx.model.is_moe else "dense"
    rows = [KindRow(("dense", False), 0, True, True), KindRow(("dense", True), 1, True, True),
            KindRow(("moe", False), 2, True, True), KindRow(("moe", True), 3, True, True),
            KindRow((mtp, False), 4, True, True), KindRow(("output", False), 4, False, False),  # MTP layer + head
            KindRow(("embedding", False), 5, True, False), KindRow(("output", False), 6, True, False)]
    kinds = tuple(pattern_kinds(ctx.model.hybrid_layer_pattern).values())
    for k, kind in enumerate(kinds):
        rows.append(KindRow((kind, (kind, True) in layers), 7 + k, True, get_kind(kind).decoder_layer))
    # MTP depths reusing the first depth's weights (mtp_use_repeated_layer): compute without parameters
    shared = 7 + len(kinds)
    rows += [KindRow((mtp, False), shared, False, True), KindRow(("output", False), shared, False, False)]
    rows += [KindRow((kind, False), shared + 1 + k, False, get_kind(kind).decoder_layer)
             for k, kind in enumerate(kinds)]
    return tuple(rows)


def row_columns(raw_columns: int) -> list[int]:
    """``chunk_counts``' column of each ``kind_rows`` row, for a table of ``raw_columns`` columns (a hybrid model
    of K kinds has 8 + 2K): the GPT rows', the hybrid kinds', the repeated-MTP layer and head (one column), the
    hybrid kinds' repeated-MTP layers."""
    kinds = (raw_columns - len(GPT_COLUMNS)) // 2
    shared = len(GPT_COLUMNS) - 1 + kinds
    return [*GPT_COLUMNS, *range(len(GPT_COLUMNS) - 1, shared), shared, shared, *range(shared + 1, raw_columns)]


class Member(NamedTuple):
    """One configuration as the engine reads it (``prepare``; a named tuple: built once per configuration)."""

    execution: ExecutionSpec
    schedule: str
    m: int
    values: np.ndarray
    """Layer rows x ``FIELDS`` (shared by configurations with one layer set)."""
    counts: np.ndarray
    """PP*VPP chunks (rank-major) x layer rows: how many layers of each row a chunk holds."""
    rank_rows: tuple[int, ...]
    """Per pipeline rank the index of its distinct layer counts (ranks with equal counts share a step tail)."""
    p2p: np.ndarray
    """Send/recv seconds per virtual-stage boundary, one micro-batch, one direction (empty without PP)."""
    sources: Mapping[str, str]
    key: tuple
    """(schedule, PP, VPP, micro-batches, EP overlap): the structure configurations share to be assembled
    together."""


def schedule_of(ex: ExecutionSpec) -> tuple[int, str]:
    """(micro-batches, simulated schedule) of ``ex``; ``InfeasibleConfig`` when the global batch does not
    split into them or the schedule refuses the micro-batch count."""
    return _structure(ex)[:2]


def _structure(ex: ExecutionSpec) -> tuple[int, str, int, int]:
    """(micro-batches, simulated schedule, PP, VPP) of ``ex``, raising as ``schedule_of``."""
    m = ex.num_microbatches
    if m < 1 or ex.global_batch_size % (ex.micro_batch_size * ex.dp):
        raise InfeasibleConfig(problems=[Problem(
            path="global_batch_size", value=ex.global_batch_size,
            message=f"not a positive multiple of MBS*DP = {ex.micro_batch_size}*{ex.dp}",
            fix="choose GBS as a multiple of micro_batch_size * data_parallel_size")])
    pp, vpp = ex.pp, virtual_stages(ex)
    # without pipelining megatron-core runs forward_backward_no_pipelining (combined 1F1B under EP overlap)
    # whatever the zero-bubble setting: the 1F1B order, which is also the zero-bubble one on one rank
    chosen = resolve_schedule(ex.pipeline_schedule, pp, vpp)
    # each schedule's own micro-batch rule: Megatron's interleaved group rule for VPP, DualPipe's 2*PP and even
    # count (``Schedule.legality``), never one schedule's rule for another
    problems = chosen.legality(pp, vpp if not chosen.fixed_chunks else ex.virtual_pipeline_model_parallel_size, m) \
        if pp > 1 else []
    if problems:
        raise InfeasibleConfig(problems=[Problem(path="global_batch_size", value=ex.global_batch_size,
                                                 message=f"{chosen.label}: {problem}",
                                                 fix=f"use a global batch whose micro-batch count {chosen.label} "
                                                     "accepts, or another schedule") for problem in problems])
    return m, chosen.name, pp, vpp


def prepare(ctx: CostTable, ex: ExecutionSpec) -> Member:
    """``ex`` as the engine reads it, from the cost table's memos; raises ``InfeasibleConfig`` / ``RecipeError``
    on a batch or layer split that does not run."""
    m, schedule, pp, vpp = _structure(ex)
    layers, nbytes, layer_id = layer_entry(ctx, ex)
    key = ("values", layer_id)
    values = ctx.batch.get(key)
    if values is None:
        values = ctx.batch[key] = _values(kind_rows(ctx, layers), layers)
    sources = ctx.batch.get(("sources", layer_id))
    if sources is None:
        sources = ctx.batch[("sources", layer_id)] = MappingProxyType(layer_sources(layers))
    counts, rank_rows = _counts(ctx, ex)
    return Member(execution=ex, schedule=schedule, m=m, values=values, counts=counts, rank_rows=rank_rows,
                  p2p=_p2p(ctx, nbytes, ex, vpp), sources=sources,
                  key=(schedule, pp, vpp, m, int(ex.overlap_moe_expert_parallel_comm)))


def _values(rows: tuple[KindRow, ...], layers: Mapping) -> np.ndarray:
    out = np.zeros((len(rows), len(FIELDS)))
    for row, values in zip(rows, out, strict=True):
        layer = layers.get(row.layer)
        if layer is None:
            continue
        values[F["fwd"]], values[F["bwd"]], values[F["wgrad"]] = layer.fwd, layer.bwd, layer.wgrad
        values[F["fwd_unpaired"]], values[F["bwd_unpaired"]] = layer.fwd_unpaired, layer.bwd_unpaired
        values[F["compute"]], values[F["recompute"]] = layer.compute_fwd + layer.compute_bwd, layer.recompute
        if row.owns_params:
            values[F["dense"]], values[F["experts"]] = layer.dense_params, layer.expert_params
        values[F["passes"]] = 2 * layer.launched
        values[F["layers"]] = row.decoder
        values[F["embedding"]], values[F["output"]] = row is rows[EMBEDDING_ROW], row is rows[OUTPUT_ROW]
        for kind, total, exposed in layer.comm_items:
            values[F[f"total_{kind}"]] += total
            values[F[f"exposed_{kind}"]] += exposed
            values[F[f"has_{kind}"]] = 1.0
    return out


def _counts(ctx: CostTable, ex: ExecutionSpec) -> tuple[np.ndarray, tuple[int, ...]]:
    key = ("counts", split_key(ex))  # what ``chunk_counts`` reads
    found = ctx.batch.get(key)
    if found is None:
        per_rank = chunk_counts(ctx.model, ex)
        distinct: dict[tuple, int] = {}
        rank_rows = tuple(distinct.setdefault(row, len(distinct)) for row in per_rank)
        raw = np.array([chunk for row in per_rank for chunk in row], dtype=np.float64)
        found = ctx.batch[key] = (raw[:, row_columns(raw.shape[1])], rank_rows)
    return found


def _p2p(ctx: CostTable, nbytes: float, ex: ExecutionSpec, vpp: int) -> np.ndarray:
    if ex.pp <= 1:
        return np.zeros(0)
    memo = ctx.batch.get("p2p")
    if memo is None or len(memo) > TAIL_LIMIT:
        memo = ctx.batch["p2p"] = {}
    pl = group_placements(ex, ctx.system)
    key = (nbytes, ex.pp, vpp, pl.pp_boundary_crosses, pl.pp.crosses, ex.pipeline_schedule,
           ex.virtual_pipeline_model_parallel_size)
    found = memo.get(key)
    if found is None:
        found = memo[key] = np.array(boundary_p2p(nbytes, ex, ctx.system))
    return found


def chunk_sums(member: Member) -> np.ndarray:
    """Per chunk (rank-major, PP*VPP) the per-micro-batch sums of ``FIELDS`` over its layers."""
    return member.counts @ member.values


def rank_sums(member: Member) -> np.ndarray:
    """Per pipeline rank (PP x ``FIELDS``) the per-micro-batch sums over its chunks."""
    chunks = chunk_sums(member)
    return chunks.reshape(member.execution.pp, -1, len(FIELDS)).sum(axis=1)


def chunk_microbatches(member: Member) -> int:
    """Micro-batches each chunk of a rank runs in a step (DualPipe: each copy half of them)."""
    return get_schedule(member.schedule).chunk_microbatches(member.m)


PART = MappingProxyType({name: k for k, name in enumerate(PARTS)})
_LAYER_TOTAL = [PART[f"total_{kind}_s"] for kind in LAYER_COMM_KINDS]
_LAYER_EXPOSED = [PART[f"exposed_{kind}_s"] for kind in LAYER_COMM_KINDS]
_F_TOTAL = [F[f"total_{kind}"] for kind in LAYER_COMM_KINDS]
_F_EXPOSED = [F[f"exposed_{kind}"] for kind in LAYER_COMM_KINDS]
_F_HAS = [F[f"has_{kind}"] for kind in LAYER_COMM_KINDS]


@dataclass(frozen=True, eq=False)
class Steps:
    """The step arithmetic of one schedule structure's members, as arrays over them (``assemble``)."""

    ctx: CostTable
    members: tuple[Member, ...]
    chunks: np.ndarray
    """(n, PP*VPP, ``FIELDS``): per chunk and micro-batch."""
    ranks: np.ndarray
    """(n, PP, ``FIELDS``): per rank and micro-batch (its chunks summed)."""
    finish: np.ndarray
    busy: np.ndarray
    """(n, PP): end of each rank's last op; its op time (incl. the passes without a partner)."""
    step: np.ndarray
    parts: np.ndarray
    """(n, ``PARTS``): the breakdown's seconds per step (0 for a kind the configuration does not have)."""
    present: np.ndarray
    """(n, ``COMM_KINDS``): whether the breakdown lists the kind (a layer kind on the busiest rank has it; pp with
    PP > 1; the DP kinds when they cost something)."""
    constants: np.ndarray
    """(n, 4): model FLOPs per step, world size, peak TFLOP/s, tokens per step (``tail.step_constants``)."""
    events: tuple
    """Per member: the simulated timeline (empty unless asked for)."""

    @property
    def tokens_per_s_per_gpu(self) -> np.ndarray:
        return self.constants[:, 3] / (self.step * self.constants[:, 1])

    @property
    def model_tflops_per_gpu(self) -> np.ndarray:
        return self.constants[:, 0] / self.step / self.constants[:, 1] / 1e12

    @property
    def mfu(self) -> np.ndarray:
        return self.model_tflops_per_gpu / self.constants[:, 2]

    def projection(self, j: int) -> Projection:
        """Member ``j``'s ``Projection``."""
        return _projection(self, j)


def _chunk_times(chunks: list, pp: int) -> tuple[tuple[ChunkTimes, ...], ...]:
    """Per rank, per chunk the schedule's op times (``chunks``: one member's chunk sums as nested lists)."""
    fwd, bwd, wgrad, fwd_u, bwd_u = F["fwd"], F["bwd"], F["wgrad"], F["fwd_unpaired"], F["bwd_unpaired"]
    per_rank = len(chunks) // pp
    return tuple(tuple(ChunkTimes(fwd=c[fwd], bwd=c[bwd], wgrad=min(c[wgrad], c[bwd]), fwd_unpaired=c[fwd_u],
                                  bwd_unpaired=c[bwd_u]) for c in chunks[r * per_rank:(r + 1) * per_rank])
                 for r in range(pp))


def _simulate(ctx: CostTable, key: tuple, members: Sequence[Member], chunks: np.ndarray,
              timeline: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple]:
    """(finish (n, PP), busy (n, PP), unpaired (n, PP), critical p2p (n,), timelines) of the members' schedule."""
    schedule, pp, vpp, m, extra = key
    n = len(members)
    chosen = get_schedule(schedule)
    events: tuple = ((),) * n
    if chosen.batch_kernel is not None and n > 1 and not timeline:
        from primus_ext.model.pipeline.batch import simulate_many  # numba: imported by batches only

        fwd, bwd = chunks[:, :, F["fwd"]], chunks[:, :, F["bwd"]]
        if extra:  # EP overlap: the passes without a partner in their own slots (``pipeline.ops.duration_slot``)
            durations = np.concatenate((fwd, bwd, np.zeros_like(fwd), fwd + chunks[:, :, F["fwd_unpaired"]],
                                        bwd + chunks[:, :, F["bwd_unpaired"]]), axis=1)
        else:
            durations = np.concatenate((fwd, bwd), axis=1)
        p2p = np.stack([member.p2p for member in members]) if pp > 1 else np.zeros((n, pp * vpp - 1))
        finish, critical = simulate_many(schedule, pp, vpp, m, durations, p2p, extra=extra)
        ranks = chunks.reshape(n, pp, vpp, len(FIELDS))
        alone = np.zeros((n, pp))
        if extra:
            counts = np.array(unpaired_counts(schedule, pp, vpp, m, pp, extra), dtype=np.float64)  # (PP, VPP, 2)
            alone = (ranks[:, :, :, F["fwd_unpaired"]] * counts[None, :, :, 0]
                     + ranks[:, :, :, F["bwd_unpaired"]] * counts[None, :, :, 1]).sum(axis=2)
        busy = m * (fwd + bwd).reshape(n, pp, vpp).sum(axis=2) + alone
        return finish, busy, alone, critical, events
    model = ctx.model
    runs = [chosen.run(_chunk_times(times, pp), m, tuple(member.p2p.tolist()), timeline=timeline,
                       moe_a2a_overlap_warmup=bool(extra),
                       wgrad_share=wgrad_share(model.hidden_size, model.num_attention_heads,
                                               member.execution.seq_length))
            for times, member in zip(chunks.tolist(), members, strict=True)]
    if timeline:
        events = tuple(run.events for run in runs)
    return (np.array([run.finish for run in runs]), np.array([run.busy for run in runs]),
            np.array([run.unpaired or (0.0,) * pp for run in runs]), np.array([run.critical_p2p for run in runs]),
            events)


def _tails(ctx: CostTable, members: Sequence[Member], ranks: np.ndarray) -> np.ndarray:
    """(n, PP, 4): per rank its gradient reduction, parameter gather, last-bucket share and optimizer seconds
    (``tail.rank_tail``, once per distinct rank of a member)."""
    params = ranks[:, :, [F["dense"], F["experts"]]].tolist()
    out = []
    for member, own in zip(members, params, strict=True):
        seen: dict = {}
        per_rank = []
        for row, (dense, experts) in zip(member.rank_rows, own, strict=True):
            found = seen.get(row)
            if found is None:
                found = seen[row] = rank_tail(ctx.tails, int(dense), int(experts), member.execution, ctx.system)
            per_rank.append(found)
        out.append(per_rank)
    return np.array(out)


def assemble(ctx: CostTable, members: Sequence[Member], *, timeline: bool = False) -> Steps:
    """The step of every member (all of one ``Member.key``): see the module docstring."""
    members = tuple(members)
    schedule, pp, vpp, m, _ = key = members[0].key
    system = ctx.system
    n = len(members)
    mc = get_schedule(schedule).chunk_microbatches(m)
    if n == 1:
        chunks = (members[0].counts @ members[0].values)[None]  # (n, PP*VPP, F)
    else:
        chunks = np.matmul(np.stack([member.counts for member in members]),
                           np.stack([member.values for member in members]))
    ranks = chunks.reshape(n, pp, vpp, len(FIELDS)).sum(axis=2)
    finish, busy, alone, critical, events = _simulate(ctx, key, members, chunks, timeline)
    makespan = finish.max(axis=1)
    # the send/recv seconds on the critical path, at most the idle time of the busiest rank: the breakdown adds up
    pp_exposed = np.minimum(critical, np.maximum(0.0, makespan - busy.max(axis=1)))

    tails = _tails(ctx, members, ranks)
    grad_t, param_t, share, opt = tails[:, :, 0], tails[:, :, 1], tails[:, :, 2], tails[:, :, 3]
    ovl = system.gpu.efficiency.overlap
    flags = np.array([(mb.execution.overlap_grad_reduce, mb.execution.overlap_param_gather) for mb in members],
                     dtype=bool).reshape(n, 2)
    grad_w, grad_s, param_w, param_s = aligned_dp_windows(ranks[:, :, F["bwd"]], ranks[:, :, F["fwd"]],
                                                          grad_t, param_t, share, vpp, pp)
    grad_exp = np.where(flags[:, :1], overlapped_exposed(grad_t, grad_w, grad_s, ovl), grad_t)
    param_exp = np.where(flags[:, 1:], overlapped_exposed(param_t, param_w, param_s, ovl), param_t)
    tail = (finish + grad_exp).max(axis=1)
    step = tail + opt.max(axis=1) + param_exp.max(axis=1)

    rows = np.arange(n)
    busiest_rank = busy.argmax(axis=1)
    busiest = ranks[rows, busiest_rank]  # (n, F): the rank that sets the steady state
    parts = np.zeros((n, len(PARTS)))
    present = np.zeros((n, len(COMM_KINDS)), dtype=bool)
    parts[:, PART["compute_s"]] = mc * busiest[:, F["compute"]]
    parts[:, PART["recompute_s"]] = mc * busiest[:, F["recompute"]]
    parts[:, PART["overhead_s"]] = mc * busiest[:, F["passes"]] * system.gpu.efficiency.kernel_overhead_s
    parts[:, _LAYER_TOTAL] = mc * busiest[:, _F_TOTAL]
    parts[:, _LAYER_EXPOSED] = mc * busiest[:, _F_EXPOSED]
    present[:, :len(LAYER_COMM_KINDS)] = busiest[:, _F_HAS] > 0
    parts[:, PART["exposed_ep_s"]] += alone[rows, busiest_rank]
    if pp > 1:
        # every stage boundary's activation + gradient transfer over the step (the critical path crosses each
        # boundary at most once per direction and micro-batch, so exposed <= total)
        parts[:, PART["total_pp_s"]] = [2 * m * member.p2p.sum() for member in members]
        parts[:, PART["exposed_pp_s"]] = pp_exposed
        present[:, COMM_KINDS.index("pp")] = True
    grad_worst = grad_t[rows, grad_t.argmax(axis=1)]
    param_worst = param_exp.argmax(axis=1)
    param_total = param_t[rows, param_worst]
    parts[:, PART["total_dp_grad_s"]] = grad_worst
    parts[:, PART["exposed_dp_grad_s"]] = np.where(grad_worst > 0, tail - makespan, 0.0)
    parts[:, PART["total_dp_param_s"]] = param_total
    parts[:, PART["exposed_dp_param_s"]] = np.where(param_total > 0, param_exp[rows, param_worst], 0.0)
    present[:, COMM_KINDS.index("dp_grad")] = grad_worst > 0
    present[:, COMM_KINDS.index("dp_param")] = param_total > 0
    parts[:, PART["bubble_s"]] = np.maximum(0.0, makespan - pp_exposed - busy.max(axis=1))
    parts[:, PART["optimizer_s"]] = opt.max(axis=1)
    constants = np.array([step_constants(ctx.constants, ctx.model, system, member.execution) for member in members],
                         dtype=np.float64).reshape(n, 4)
    return Steps(ctx=ctx, members=members, chunks=chunks, ranks=ranks, finish=finish, busy=busy, step=step,
                 parts=parts, present=present, constants=constants, events=events)


def _projection(steps: Steps, j: int) -> Projection:
    member, ctx = steps.members[j], steps.ctx
    ex, system, model = member.execution, ctx.system, ctx.model
    schedule = get_schedule(member.schedule)
    pp = ex.pp
    # DualPipe: a stage's two copies (ranks s and PP-1-s) reduce their gradients and shard the optimizer together
    pl = with_copies(group_placements(ex, system), schedule.model_copies)
    parts = dict(zip(PARTS, steps.parts[j].tolist(), strict=True))
    comms = tuple(CommTime(kind=kind, total_s=parts[f"total_{kind}_s"], exposed_s=parts[f"exposed_{kind}_s"],
                           group=describe(getattr(pl, kind, pl.dp_cp)))
                  for kind, listed in zip(COMM_KINDS, steps.present[j].tolist(), strict=True) if listed)
    breakdown = Breakdown(compute_s=parts["compute_s"], comms=comms, bubble_s=parts["bubble_s"],
                          optimizer_s=parts["optimizer_s"], overhead_s=parts["overhead_s"],
                          recompute_s=parts["recompute_s"])
    chunks = steps.chunks[j].tolist()
    per_rank = len(chunks) // pp
    ranks, busy, finish = steps.ranks[j].tolist(), steps.busy[j].tolist(), steps.finish[j].tolist()
    stages = []
    for r in range(pp):
        own = range(r * per_rank, (r + 1) * per_rank)
        stages.append(StageTime(rank=r, busy_s=busy[r], finish_s=finish[r], layers=int(ranks[r][F["layers"]]),
                                fwd_s=tuple(chunks[c][F["fwd"]] for c in own),
                                bwd_s=tuple(chunks[c][F["bwd"]] for c in own),
                                embedding=ranks[r][F["embedding"]] > 0, output=ranks[r][F["output"]] > 0,
                                dense_params=int(ranks[r][F["dense"]]), expert_params=int(ranks[r][F["experts"]])))
    flops, world, _, _ = step_constants(ctx.constants, model, system, ex)
    notes: tuple[str, ...] = ()
    if world != system.world_size:
        notes = (f"execution world size {world} != cluster {system.world_size} GPUs; per-GPU figures use {world}",)
    if schedule.model_copies > 1:
        notes += (f"{schedule.label}: each stage's two copies (pipeline ranks s and PP-1-s) reduce their gradients "
                  f"over both copies' data-parallel ranks ({pl.dp_cp.size} dense, {pl.edp.size} expert), which also "
                  "shard one optimizer state per parameter (assumed: the report does not say)",)
    step = float(steps.step[j])
    return Projection(step_time_s=step, tokens_per_s_per_gpu=float(steps.tokens_per_s_per_gpu[j]),
                      model_tflops_per_gpu=float(steps.model_tflops_per_gpu[j]), mfu=float(steps.mfu[j]),
                      breakdown=breakdown, stages=tuple(stages), sources=dict(member.sources), model=model,
                      execution=ex, system=system, num_microbatches=member.m, model_flops_per_step=flops,
                      timeline=steps.events[j], notes=notes)


__all__ = ["COMM_KINDS", "FIELDS", "LAYER_COMM_KINDS", "PART", "PARTS", "KindRow", "Member", "Steps", "assemble",
           "chunk_microbatches", "chunk_sums", "kind_rows", "prepare", "rank_sums", "row_columns",
           "schedule_of"]
