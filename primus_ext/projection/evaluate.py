"""Step-time projection: per-rank layer costs re-inflated to the target cluster.

    >>> from primus_ext.projection import evaluate, project
    >>> p = evaluate(model, execution, system)              # fast path (tuner): no I/O, no timeline
    >>> p = project(model, execution, system, store)        # CLI: + timeline, memory, uncertainty band
    >>> p.tokens_per_s_per_gpu, p.breakdown.comm("ep").exposed_s, p.sources

DESIGN.md "Upscale": per layer and micro-batch, compute from the cost chain (the given providers in
order - the timing store first - then the analytic roofline) + exposed TP / CP / EP / FSDP comm
(``projection.comm``); per pipeline chunk the sum over its layers (+ embedding on the first chunk,
output + loss and MTP on the last); the step is the simulated schedule (``model.pipeline``) with
send/recv between stages, then the step tail: exposed DP gradient reduction (when ``overlap_grad_reduce``,
overlapped as megatron's aligned grad reduce allows: ``comm.aligned_dp_windows``), the optimizer step and
the exposed parameter all-gather (overlapped with the next forward when ``overlap_param_gather``).

``evaluate`` is pure arithmetic over memoised lookups: no torch, no I/O, no printing.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from operator import attrgetter

from primus_ext.errors import InfeasibleConfig, Problem
from primus_ext.model.carry import carry_cost
from primus_ext.model.collectives import p2p_time
from primus_ext.model.costs import CostProvider, LayerCost
from primus_ext.model.flops import model_flops_per_step
from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.lora import lora_cost, lora_params, trained_in_full
from primus_ext.model.params import expert_layer_params, layer_params
from primus_ext.model.pipeline import ChunkTimes, interleaving_problem
from primus_ext.model.pipeline.registry import get_schedule, resolve_schedule
from primus_ext.model.pipeline.zbv import wgrad_share
from primus_ext.model.placement import group_placements
from primus_ext.model.rank_shape import RankShape, rank_shapes
from primus_ext.model.roofline import analytic_cost, attention_seconds, launches
from primus_ext.model.stages import virtual_stages
from primus_ext.projection.comm import (
    aligned_dp_windows,
    bucket_fraction,
    describe,
    dp_times,
    layer_comm,
    optimizer_seconds,
    overlapped_exposed,
    pp_bytes,
)
from primus_ext.projection.result import Breakdown, CommTime, Projection, StageTime
from primus_ext.projection.stage_sums import _chunk_counts, _distinct_rows, _Layer, _split_key, _stage
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

LAYER_COMM_KINDS = ("tp", "cp", "ep", "fsdp")

Costs = CostProvider | Sequence[CostProvider] | None


_MEMO_LIMIT = 16
_memos: dict[int, tuple[CostProvider, dict[RankShape, LayerCost | None]]] = {}
"""Per provider (by identity, kept alive here): shape -> cost. A timing store answers from SQLite;
the tuner asks for the same few shapes thousands of times."""


def clear_cost_cache() -> None:
    """Forget memoised provider answers and projections (after recording new measurements in a store)."""
    _memos.clear()
    _contexts.clear()


def forget_projections() -> None:
    """Forget projections, per-rank stage aggregates and simulated schedules, keeping the per-layer costs
    and communication (the cost table): what the speed benchmark measures."""
    from primus_ext.model.pipeline import clear_schedule_cache

    for ctx in _contexts.values():
        ctx.rows.clear()
        ctx.chunks.clear()
        ctx.batch.pop("pass", None)
        if ctx.projections is not None:
            ctx.projections.clear()
    clear_schedule_cache()


def _providers(costs: Costs) -> tuple[CostProvider, ...]:
    if costs is None:
        return ()
    if hasattr(costs, "cost"):
        return (costs,)  # type: ignore[return-value]
    return tuple(costs)  # type: ignore[arg-type]


def _lookup(shape: RankShape, providers: tuple[CostProvider, ...], system: SystemSpec) -> LayerCost:
    if shape.lora_rank:  # the layer as trained in full, then frozen with its adapters (model.lora)
        return lora_cost(_lookup(trained_in_full(shape), providers, system), shape, system.gpu)
    for provider in providers:
        entry = _memos.get(id(provider))
        if entry is None or entry[0] is not provider:
            if len(_memos) >= _MEMO_LIMIT:
                _memos.clear()
            entry = _memos[id(provider)] = (provider, {})
        table = entry[1]
        if shape not in table:
            table[shape] = provider.cost(shape)
        found = table[shape]
        if found is not None:  # an entry that ran in another precision: carried by the roofline's ratio
            return carry_cost(found, shape, measured_on=system.gpu, target=system.gpu)
    return analytic_cost(shape, system.gpu)


_COMM_FIELDS = (
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "expert_model_parallel_size", "expert_tensor_parallel_size", "data_parallel_size", "sequence_parallel",
    "cp_comm_type", "tp_comm_overlap", "overlap_moe_expert_parallel_comm", "moe_token_dispatcher_type", "fsdp",
    "data_parallel_sharding_strategy", "grad_reduce_in_bf16", "fsdp_reduce_dtype", "precision",
)
"""What per-layer communication reads (``comm.layer_comm`` and the group placement)."""
_SHAPE_FIELDS = (
    "tensor_model_parallel_size", "context_parallel_size", "expert_model_parallel_size",
    "expert_tensor_parallel_size", "sequence_parallel", "micro_batch_size", "seq_length", "precision",
    "recompute_granularity", "recompute_modules", "fp8_recipe", "fp4_recipe", "attention_kernel",
    "cuda_graph", "lora_rank", "lora_targets",
)
"""What ``rank_shapes`` reads (tests/projection/test_evaluate_fast.py mutates every other field)."""
_comm_key = attrgetter(*_COMM_FIELDS)


def _comm_fields(ex: ExecutionSpec) -> ExecutionSpec:
    """``ex`` reduced to what per-layer communication reads: the memo key of a layer, so that batch /
    DP-overlap / optimizer variants share it."""
    return ExecutionSpec(**dict(zip(_COMM_FIELDS, _comm_key(ex), strict=True)))


def _layer(shape: RankShape, ex: ExecutionSpec, system: SystemSpec, providers: tuple[CostProvider, ...]) -> _Layer:
    return _layer_from_cost(shape, _comm_fields(ex), system, _lookup(shape, providers, system))


@lru_cache(maxsize=16384)
def _layer_from_cost(shape: RankShape, ex: ExecutionSpec, system: SystemSpec, cost: LayerCost) -> _Layer:
    fwd, recompute = cost.fwd_ms * 1e-3, cost.recompute_ms * 1e-3
    bwd = cost.bwd_ms * 1e-3 + recompute
    wgrad = (cost.wgrad_ms if cost.wgrad_ms is not None else cost.bwd_ms / 2) * 1e-3
    total = layer_params(shape)
    experts = expert_layer_params(shape)
    # what the gradient reduction, the optimizer and its parameter all-gather handle: the trainable weights
    trained = lora_params(shape) if shape.lora_rank else (total - experts, experts)
    comm = layer_comm(shape, ex, group_placements(ex, system), system, fwd_s=fwd, bwd_s=cost.bwd_ms * 1e-3,
                      recompute_s=recompute, attn=attention_seconds(shape, system.gpu),
                      params=(total - experts, experts), trained=trained)
    ep_f, ep_b = comm.fwd.get("ep", (0.0, 0.0)), comm.bwd.get("ep", (0.0, 0.0))
    overlap = ex.overlap_moe_expert_parallel_comm  # a pass without a partner leaves its hidden all-to-all exposed
    return _Layer(compute_fwd=fwd, compute_bwd=bwd, wgrad=wgrad, recompute=recompute, comm_fwd=comm.fwd,
                  comm_bwd=comm.bwd, dense_params=trained[0], expert_params=trained[1],
                  source=cost.source, launched=cost.source == "analytic" and launches(shape),
                  fwd=fwd + sum(v[1] for v in comm.fwd.values()), bwd=bwd + sum(v[1] for v in comm.bwd.values()),
                  comm_items=tuple((k, t, e) for part in (comm.fwd, comm.bwd) for k, (t, e) in part.items()),
                  fwd_unpaired=ep_f[0] - ep_f[1] if overlap else 0.0,
                  bwd_unpaired=ep_b[0] - ep_b[1] if overlap else 0.0)


@dataclass(frozen=True)
class _Stages:
    """What a projection takes from the per-rank shapes, the layer split and per-layer communication
    (``_stage_key`` of the execution): shared by every batch / DP-overlap / optimizer variant."""

    layers: dict[tuple[str, bool], _Layer]
    times: tuple[tuple[ChunkTimes, ...], ...]
    acc: tuple[dict, ...]
    """Per rank: per-micro-batch aggregates (``_stage``); ranks with the same counts share one dict."""
    p2p: tuple[float, ...]
    pp_total_s: float
    """Sum of the send/recv seconds over the stage boundaries (one micro-batch, one direction)."""
    static: tuple[dict, ...]
    """Per rank: the StageTime fields other than rank, busy and finish (shared by equal ranks)."""
    sources: dict[str, str]


_STAGES_LIMIT = 16384
"""Layer / row memo entries per context (each a few KB) before the memo starts over."""
_PROJECTIONS_LIMIT = 8192
"""Projections memoised per context (revisited configurations)."""
_CONTEXT_LIMIT = 16


@dataclass(frozen=True)
class _Context:
    """Memos of one (model, system, providers) triple, found by identity: hashing the specs on every call
    costs more than a projection's arithmetic."""

    model: ModelSpec
    system: SystemSpec
    providers: tuple[CostProvider, ...]
    layers: dict = field(default_factory=dict)
    """(shape fields, comm fields) -> (layers, p2p bytes)."""
    counts: dict = field(default_factory=dict)
    """Split fields -> ``_distinct_rows`` of ``_chunk_counts``."""
    row_ids: dict = field(default_factory=dict)
    """Chunk counts of a rank -> a small id (the row memo's key)."""
    chunks: dict = field(default_factory=dict)
    """(chunk counts, layer id) -> ``_chunk`` sums."""
    rows: dict = field(default_factory=dict)
    """(chunk counts of a rank, layer key) -> (chunk times, aggregates, StageTime fields)."""
    projections: dict | None = None
    batch: dict = field(default_factory=dict)
    """``evaluate_batch``'s arrays: per layer id its value matrix, per split its count matrix (kept, like
    ``layers`` and ``counts``), and its per-pass memos under the key ``"pass"`` (cleared with the rows)."""


_shape_key = attrgetter(*_SHAPE_FIELDS)


def _layers(model: ModelSpec, ex: ExecutionSpec, system: SystemSpec,
            providers: tuple[CostProvider, ...]) -> tuple[dict[tuple[str, bool], _Layer], float]:
    """Every layer kind (plain and recomputed variant) of one rank, and the p2p bytes per micro-batch."""
    shapes = rank_shapes(model, ex)
    layers: dict[tuple[str, bool], _Layer] = {}
    for kind, shape in shapes.items():
        plain = replace(shape, recompute="none", recompute_modules=()) if shape.recompute != "none" else shape
        layers[(kind, False)] = _layer(plain, ex, system, providers)
        if get_kind(kind).recomputable:
            layers[(kind, True)] = _layer(shape, ex, system, providers) if plain is not shape else layers[(kind, False)]
    return layers, pp_bytes(shapes["embedding"], ex)


def _layer_entry(ctx: _Context, ex: ExecutionSpec) -> tuple[dict[tuple[str, bool], _Layer], float, int]:
    """(layers, p2p bytes, layer id) of ``ex`` from the context's memo (keyed on the shape and comm fields)."""
    layer_key = (_shape_key(ex), _comm_key(ex))
    found = ctx.layers.get(layer_key)
    if found is None:
        if len(ctx.layers) >= _STAGES_LIMIT:
            ctx.layers.clear()  # layer ids restart: forget everything keyed by them
            ctx.rows.clear()
            ctx.chunks.clear()
            ctx.batch.clear()
        found = ctx.layers[layer_key] = (*_layers(ctx.model, ex, ctx.system, ctx.providers), len(ctx.layers))
    return found


def _counts_entry(ctx: _Context, ex: ExecutionSpec) -> tuple[tuple[tuple[int, tuple], ...], tuple[int, ...]]:
    """``_distinct_rows`` of ``ex``'s chunk counts from the context's memo (keyed on the split fields)."""
    split = _split_key(ex)
    counts = ctx.counts.get(split)
    if counts is None:
        counts = ctx.counts[split] = _distinct_rows(_chunk_counts(ctx.model, ex), ctx.row_ids)
    return counts


def _stages(model: ModelSpec, ex: ExecutionSpec, system: SystemSpec, providers: tuple[CostProvider, ...],
            ctx: _Context | None = None) -> _Stages:
    if ctx is None:
        layers, nbytes = _layers(model, ex, system, providers)
        layer_id = 0
        rows: dict = {}
        chunks: dict = {}
        distinct, rank_rows = _distinct_rows(_chunk_counts(model, ex), {})
    else:  # memoised on the fields each part reads (the tuner varies one or two fields at a time)
        layers, nbytes, layer_id = _layer_entry(ctx, ex)
        rows, chunks = ctx.rows, ctx.chunks
        if len(rows) >= 4 * _STAGES_LIMIT or len(chunks) >= 4 * _STAGES_LIMIT:
            rows.clear()
            chunks.clear()
        distinct, rank_rows = _counts_entry(ctx, ex)
    mtp_kind = "moe" if model.is_moe else "dense"
    pp, vpp = ex.pp, virtual_stages(ex)
    entries = []
    for row_id, row in distinct:
        entry = rows.get((row_id, layer_id))
        if entry is None:
            chunk_times, acc = _stage(row, layers, mtp_kind, chunks, layer_id)
            entry = rows[(row_id, layer_id)] = (chunk_times, acc, dict(
                layers=int(acc["layers"]), fwd_s=tuple(c.fwd for c in chunk_times),
                bwd_s=tuple(c.bwd for c in chunk_times), embedding=any(c[5] for c in row),
                output=any(c[6] for c in row), dense_params=int(acc["dense"]), expert_params=int(acc["experts"])))
        entries.append(entry)
    times = tuple(entries[k][0] for k in rank_rows)
    stage_acc = tuple(entries[k][1] for k in rank_rows)
    static = tuple(entries[k][2] for k in rank_rows)
    p2p: tuple[float, ...] = ()
    if pp > 1:
        pl = group_placements(ex, system)
        crosses = (*pl.pp_boundary_crosses, pl.pp.crosses)  # link r joins ranks r and r+1 (PP-1: back to 0)
        within = p2p_time(nbytes, False, system)  # across nodes only priced when a boundary crosses (a one-node
        across = p2p_time(nbytes, True, system) if any(crosses) else within  # profile may have no NIC: cpu)
        links = resolve_schedule(ex.pipeline_schedule, pp, ex.virtual_pipeline_model_parallel_size).p2p_links(pp, vpp)
        p2p = tuple(0.0 if a == b else across if crosses[a if b == a + 1 else b if a == b + 1 else pp - 1] else within
                    for a, b in links)  # the forward link a -> a+1, the wrap PP-1 -> 0, a V's way back b+1 -> b
    return _Stages(layers=layers, times=times, acc=stage_acc, p2p=p2p, pp_total_s=sum(p2p), static=static,
                   sources=layer_sources(layers))


def layer_sources(layers: dict[tuple[str, bool], _Layer]) -> dict[str, str]:
    """Layer kind -> where its cost came from (both variants' sources when they differ)."""
    sources: dict[str, str] = {}
    for (kind, _), layer in layers.items():
        known = sources.get(kind)
        sources[kind] = layer.source if known in (None, layer.source) else f"{known} + {layer.source}"
    return sources


def schedule_of(ex: ExecutionSpec) -> tuple[int, str]:
    """(micro-batches, simulated schedule) of ``ex``; ``InfeasibleConfig`` when the global batch does not
    split into them or megatron-core refuses the interleaved schedule."""
    m = ex.num_microbatches
    if m < 1 or ex.global_batch_size % (ex.micro_batch_size * ex.dp):
        raise InfeasibleConfig(problems=[Problem(
            path="global_batch_size", value=ex.global_batch_size,
            message=f"not a positive multiple of MBS*DP = {ex.micro_batch_size}*{ex.dp}",
            fix="choose GBS as a multiple of micro_batch_size * data_parallel_size")])
    pp, vpp = ex.pp, virtual_stages(ex)
    # without pipelining megatron-core runs forward_backward_no_pipelining (combined 1F1B under EP overlap)
    # whatever the zero-bubble setting: the 1F1B order, which is also the zero-bubble one on one rank
    schedule = resolve_schedule(ex.pipeline_schedule, pp, vpp).name
    if get_schedule(schedule).chunks_per_rank(vpp) > 1 and interleaving_problem(pp, m):
        raise InfeasibleConfig(problems=[Problem(path="global_batch_size", value=ex.global_batch_size,
                                                 message=interleaving_problem(pp, m),
                                                 fix=f"use a global batch giving a multiple of PP={pp} micro-batches")])
    return m, schedule


def _evaluate(model: ModelSpec, ex: ExecutionSpec, system: SystemSpec, providers: tuple[CostProvider, ...],
              timeline: bool, ctx: _Context | None = None) -> Projection:
    m, schedule = schedule_of(ex)
    pp, vpp = ex.pp, virtual_stages(ex)
    mc = get_schedule(schedule).chunk_microbatches(m)  # per-rank sums are per micro-batch through every chunk
    st = _stages(model, ex, system, providers, ctx)
    pl = group_placements(ex, system)
    times_t, stage_acc, p2p = st.times, st.acc, st.p2p
    sim = get_schedule(schedule).run(times_t, m, p2p, timeline=timeline,
                                     moe_a2a_overlap_warmup=ex.overlap_moe_expert_parallel_comm,
                                     wgrad_share=wgrad_share(model.hidden_size, model.num_attention_heads,
                                                             ex.seq_length))
    # the EP all-to-all the passes without a partner micro-batch leave exposed (in the simulated op times)
    alone = sim.unpaired or (0.0,) * pp
    # the send/recv seconds on the critical path (every schedule runs a fixed order: in [0, the pp total]),
    # at most the idle time of the busiest rank: bubble = makespan - this - busiest >= 0, the breakdown adds up
    pp_exposed = min(sim.critical_p2p, max(0.0, sim.makespan - max(sim.busy)))

    ovl = system.gpu.efficiency.overlap
    tails, opts, params_exp, grads, params = [], [], [], [], []
    tail_of: dict[int, tuple[float, float, float, float]] = {}
    for r, acc in enumerate(stage_acc):
        if id(acc) not in tail_of:  # ranks with identical layers share one computation
            dense, experts = int(acc["dense"]), int(acc["experts"])
            grad_t, param_t = dp_times(dense, experts, ex, pl, system)
            tail_of[id(acc)] = (grad_t, param_t, bucket_fraction(dense + experts, ex),
                                optimizer_seconds(dense, experts, ex, pl, system))
        grad_t, param_t, share, opt = tail_of[id(acc)]
        grad_w, grad_s, param_w, param_s = aligned_dp_windows(acc["bwd1"], acc["fwd1"], grad_t, param_t, share,
                                                              vpp, pp, r)
        grad_exp = overlapped_exposed(grad_t, grad_w, grad_s, ovl) if ex.overlap_grad_reduce else grad_t
        param_exp = overlapped_exposed(param_t, param_w, param_s, ovl) if ex.overlap_param_gather else param_t
        grads.append((grad_t, grad_exp))
        params.append((param_t, param_exp))
        tails.append(sim.finish[r] + grad_exp)
        params_exp.append(param_exp)
        opts.append(opt)
    tail = max(tails)
    step = tail + max(opts) + max(params_exp)

    busiest = max(range(pp), key=lambda r: sim.busy[r])
    acc_b = stage_acc[busiest]
    comms = [CommTime(kind=k, total_s=mc * v[0], exposed_s=mc * v[1] + (alone[busiest] if k == "ep" else 0.0),
                      group=describe(getattr(pl, k, pl.dp_cp)))
             for k, v in sorted(acc_b["comm"].items(), key=lambda kv: LAYER_COMM_KINDS.index(kv[0]))]
    if pp > 1:
        # total: every stage boundary's activation + gradient transfer over the step (the critical
        # path crosses each boundary at most once per direction and micro-batch, so exposed <= total)
        comms.append(CommTime(kind="pp", total_s=2 * m * st.pp_total_s, exposed_s=pp_exposed,
                              group=describe(pl.pp)))
    worst_grad = max(range(pp), key=lambda r: grads[r][0])
    if grads[worst_grad][0] > 0:
        comms.append(CommTime(kind="dp_grad", total_s=grads[worst_grad][0], exposed_s=tail - sim.makespan,
                              group=describe(pl.dp_cp)))
    worst_param = max(range(pp), key=lambda r: params[r][1])
    if params[worst_param][0] > 0:
        comms.append(CommTime(kind="dp_param", total_s=params[worst_param][0], exposed_s=params[worst_param][1],
                              group=describe(pl.dp_cp)))
    eff = system.gpu.efficiency
    breakdown = Breakdown(
        compute_s=mc * acc_b["compute"],
        comms=tuple(comms),
        bubble_s=max(0.0, sim.makespan - pp_exposed - sim.busy[busiest]),
        optimizer_s=max(opts),
        overhead_s=mc * acc_b["analytic_passes"] * eff.kernel_overhead_s,
        recompute_s=mc * acc_b["recompute"],
    )
    stages = tuple(StageTime(rank=r, busy_s=sim.busy[r], finish_s=sim.finish[r], **st.static[r]) for r in range(pp))
    flops = model_flops_per_step(model, ex.seq_length, ex.global_batch_size, frozen_weights=bool(ex.lora_rank))
    world = ex.world_size
    tflops = flops / step / world / 1e12
    notes: tuple[str, ...] = ()
    if world != system.world_size:
        notes = (f"execution world size {world} != cluster {system.world_size} GPUs; per-GPU figures use {world}",)
    if get_schedule(schedule).model_copies > 1:
        notes += (f"{get_schedule(schedule).label}: the gradient sync between the two copies of a stage (ranks s and "
                  "PP-1-s) is not priced",)
    return Projection(
        step_time_s=step,
        tokens_per_s_per_gpu=ex.global_batch_size * ex.seq_length / (step * world),
        model_tflops_per_gpu=tflops,
        mfu=tflops / system.gpu.peak_tflops(ex.precision),
        breakdown=breakdown,
        stages=stages,
        sources=dict(st.sources),
        model=model,
        execution=ex,
        system=system,
        num_microbatches=m,
        model_flops_per_step=flops,
        timeline=sim.events,
        notes=notes,
    )



_contexts: dict[tuple[int, ...], _Context] = {}


def _context(model: ModelSpec, system: SystemSpec, providers: tuple[CostProvider, ...]) -> _Context:
    key = (id(model), id(system), *map(id, providers))
    ctx = _contexts.get(key)
    if ctx is None or ctx.model is not model or ctx.system is not system or any(
            a is not b for a, b in zip(ctx.providers, providers, strict=True)):
        if len(_contexts) >= _CONTEXT_LIMIT:
            _contexts.clear()
        hashable = all(isinstance(p, Hashable) for p in providers)
        ctx = _contexts[key] = _Context(model=model, system=system, providers=providers,
                                        projections={} if hashable else None)
    return ctx


def evaluate(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec, costs: Costs = None) -> Projection:
    """The fast path: one configuration's projection, no timeline, no memory, no band.

    ``costs``: a ``CostProvider`` or a sequence tried in order (timing store first); the analytic
    roofline always closes the chain. Raises ``RecipeError`` / ``InfeasibleConfig`` on an illegal split.
    Memoised per (model, system, providers) objects: revisited configurations cost one dict lookup, and
    configurations that share per-rank shapes, layer split and layer communication share their stage
    times; the pipeline schedule's steady state is extrapolated (``model.pipeline.periodic``).
    """
    ctx = _context(model, system, _providers(costs))
    memo = ctx.projections
    if memo is None:
        return _evaluate(model, execution, system, ctx.providers, False, ctx)
    found = memo.get(execution)
    if found is None:
        if len(memo) >= _PROJECTIONS_LIMIT:
            memo.clear()
        found = memo[execution] = _evaluate(model, execution, system, ctx.providers, False, ctx)
    return found


def compute_floor(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec,
                  costs: Costs = None) -> tuple[float, dict[str, str]]:
    """Seconds of compute of the busiest rank, without simulating the schedule: no step of ``execution`` is shorter
    (a rank's busy time includes its compute), and sharding and the overlap flags do not change it (the tuner's
    branch and bound, ``tune.strategies.exhaustive``). ``Breakdown.compute_s`` is the compute of the rank the
    simulation finds busiest, so this is at least that. Returns it with the layers' cost sources; raises as
    ``evaluate``."""
    m, schedule = schedule_of(execution)
    ctx = _context(model, system, _providers(costs))
    st = _stages(model, execution, system, ctx.providers, ctx)
    return get_schedule(schedule).chunk_microbatches(m) * max(acc["compute"] for acc in st.acc), dict(st.sources)


def step_floor(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec,
               costs: Costs = None) -> tuple[float, dict[str, str]]:
    """Seconds ``evaluate``'s step cannot go below, without simulating the schedule: the busiest rank's passes run
    one after another (every micro-batch through each of its chunks, at their paired times: the shortest a pass
    takes). The tuner's branch and bound uses it for schedules whose simulation is costly (op orders built in
    Python). Returns it with the layers' cost sources (``Projection.sources``); raises as ``evaluate``."""
    m, schedule = schedule_of(execution)
    ctx = _context(model, system, _providers(costs))
    st = _stages(model, execution, system, ctx.providers, ctx)
    busiest = max(sum(c.fwd + c.bwd for c in row) for row in st.times)
    return get_schedule(schedule).chunk_microbatches(m) * busiest, dict(st.sources)
