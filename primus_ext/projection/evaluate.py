"""Step-time projection: per-rank layer costs re-inflated to the target cluster.

    >>> from primus_ext.projection import evaluate, project
    >>> p = evaluate(model, execution, system)              # fast path (tuner): no I/O, no timeline
    >>> p = project(model, execution, system, store)        # CLI: + timeline, memory, uncertainty band
    >>> p.tokens_per_s_per_gpu, p.breakdown.comm("ep").exposed_s, p.sources

docs/DESIGN.md "Downscale, measure, upscale": per layer and micro-batch, compute from the cost chain (the given
providers in order - the timing store first - then the analytic roofline) + exposed TP / CP / EP / FSDP comm
(``projection.comm``); per pipeline chunk the sum over its layers (+ embedding on the first chunk,
output + loss and MTP on the last); the step is the simulated schedule (``model.pipeline``) with
send/recv between stages, then the step tail: exposed DP gradient reduction (when ``overlap_grad_reduce``,
overlapped as megatron's aligned grad reduce allows: ``comm.aligned_dp_windows``), the optimizer step and
the exposed parameter all-gather (overlapped with the next forward when ``overlap_param_gather``).

``evaluate`` is pure arithmetic over memoised lookups (the cost table, ``projection.table``; the step tail,
``projection.tail``: both shared with the batch path ``evaluate_batch``): no torch, no I/O, no printing.
"""

from __future__ import annotations

from dataclasses import dataclass

from primus_ext.errors import InfeasibleConfig, Problem
from primus_ext.model.costs import CostProvider
from primus_ext.model.kinds.registry import pattern_kinds
from primus_ext.model.pipeline import ChunkTimes
from primus_ext.model.pipeline.registry import get_schedule, resolve_schedule
from primus_ext.model.pipeline.zbv import wgrad_share
from primus_ext.model.placement import group_placements, with_copies
from primus_ext.model.stages import virtual_stages
from primus_ext.projection.comm import aligned_dp_windows, describe, overlapped_exposed
from primus_ext.projection.result import Breakdown, CommTime, Projection, StageTime
from primus_ext.projection.stage_sums import _stage
from primus_ext.projection.table import (  # noqa: F401 (clear_cost_cache, forget_projections: re-exported)
    PROJECTIONS_LIMIT,
    STAGES_LIMIT,
    Costs,
    CostTable,
    LayerCosts,
    chunk_counts,
    clear_cost_cache,
    counts_entry,
    distinct_rows,
    forget_projections,
    layer_entry,
    layer_sources,
    providers_of,
    rank_layers,
    table_of,
)
from primus_ext.projection.tail import boundary_p2p, rank_tail, step_constants
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

LAYER_COMM_KINDS = ("tp", "cp", "ep", "fsdp")

@dataclass(frozen=True)
class _Stages:
    """What a projection takes from the per-rank shapes, the layer split and per-layer communication
    (``_stage_key`` of the execution): shared by every batch / DP-overlap / optimizer variant."""

    layers: dict[tuple[str, bool], LayerCosts]
    times: tuple[tuple[ChunkTimes, ...], ...]
    acc: tuple[dict, ...]
    """Per rank: per-micro-batch aggregates (``_stage``); ranks with the same counts share one dict."""
    p2p: tuple[float, ...]
    pp_total_s: float
    """Sum of the send/recv seconds over the stage boundaries (one micro-batch, one direction)."""
    static: tuple[dict, ...]
    """Per rank: the StageTime fields other than rank, busy and finish (shared by equal ranks)."""
    sources: dict[str, str]


def _stages(model: ModelSpec, ex: ExecutionSpec, system: SystemSpec, providers: tuple[CostProvider, ...],
            ctx: CostTable | None = None) -> _Stages:
    if ctx is None:
        layers, nbytes = rank_layers(model, ex, system, providers)
        layer_id = 0
        rows: dict = {}
        chunks: dict = {}
        distinct, rank_rows = distinct_rows(chunk_counts(model, ex), {})
    else:  # memoised on the fields each part reads (the tuner varies one or two fields at a time)
        layers, nbytes, layer_id = layer_entry(ctx, ex)
        rows, chunks = ctx.rows, ctx.chunks
        if len(rows) >= 4 * STAGES_LIMIT or len(chunks) >= 4 * STAGES_LIMIT:
            rows.clear()
            chunks.clear()
        distinct, rank_rows = counts_entry(ctx, ex)
    mtp_kind = "moe" if model.is_moe else "dense"
    hybrid = tuple(pattern_kinds(model.hybrid_layer_pattern).values())
    pp = ex.pp
    entries = []
    for row_id, row in distinct:
        entry = rows.get((row_id, layer_id))
        if entry is None:
            chunk_times, acc = _stage(row, layers, mtp_kind, chunks, layer_id, hybrid)
            entry = rows[(row_id, layer_id)] = (chunk_times, acc, dict(
                layers=int(acc["layers"]), fwd_s=tuple(c.fwd for c in chunk_times),
                bwd_s=tuple(c.bwd for c in chunk_times), embedding=any(c[5] for c in row),
                output=any(c[6] for c in row), dense_params=int(acc["dense"]), expert_params=int(acc["experts"])))
        entries.append(entry)
    times = tuple(entries[k][0] for k in rank_rows)
    stage_acc = tuple(entries[k][1] for k in rank_rows)
    static = tuple(entries[k][2] for k in rank_rows)
    p2p = boundary_p2p(nbytes, ex, system) if pp > 1 else ()
    return _Stages(layers=layers, times=times, acc=stage_acc, p2p=p2p, pp_total_s=sum(p2p), static=static,
                   sources=layer_sources(layers))


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
    return m, chosen.name


def _evaluate(model: ModelSpec, ex: ExecutionSpec, system: SystemSpec, providers: tuple[CostProvider, ...],
              timeline: bool, ctx: CostTable | None = None) -> Projection:
    m, schedule = schedule_of(ex)
    pp, vpp = ex.pp, virtual_stages(ex)
    mc = get_schedule(schedule).chunk_microbatches(m)  # per-rank sums are per micro-batch through every chunk
    st = _stages(model, ex, system, providers, ctx)
    # DualPipe: a stage's two copies (ranks s and PP-1-s) reduce their gradients and shard the optimizer together
    pl = with_copies(group_placements(ex, system), get_schedule(schedule).model_copies)
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
    memo = ctx.tails if ctx is not None else {}
    for r, acc in enumerate(stage_acc):
        grad_t, param_t, share, opt = rank_tail(memo, int(acc["dense"]), int(acc["experts"]), ex, system)
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
    flops, world, peak, tokens = step_constants(ctx.constants if ctx is not None else {}, model, system, ex)
    tflops = flops / step / world / 1e12
    notes: tuple[str, ...] = ()
    if world != system.world_size:
        notes = (f"execution world size {world} != cluster {system.world_size} GPUs; per-GPU figures use {world}",)
    if get_schedule(schedule).model_copies > 1:
        notes += (f"{get_schedule(schedule).label}: each stage's two copies (pipeline ranks s and PP-1-s) reduce "
                  f"their gradients over both copies' data-parallel ranks ({pl.dp_cp.size} dense, {pl.edp.size} "
                  "expert), which also shard one optimizer state per parameter (assumed: the report does not say)",)
    return Projection(
        step_time_s=step,
        tokens_per_s_per_gpu=tokens / (step * world),
        model_tflops_per_gpu=tflops,
        mfu=tflops / peak,
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


def evaluate(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec, costs: Costs = None) -> Projection:
    """The fast path: one configuration's projection, no timeline, no memory, no band.

    ``costs``: a ``CostProvider`` or a sequence tried in order (timing store first); the analytic
    roofline always closes the chain. Raises ``RecipeError`` / ``InfeasibleConfig`` on an illegal split.
    Memoised per (model, system, providers) objects: revisited configurations cost one dict lookup, and
    configurations that share per-rank shapes, layer split and layer communication share their stage
    times; the pipeline schedule's steady state is extrapolated (``model.pipeline.periodic``).
    """
    ctx = table_of(model, system, providers_of(costs))
    memo = ctx.projections
    if memo is None:
        return _evaluate(model, execution, system, ctx.providers, False, ctx)
    found = memo.get(execution)
    if found is None:
        if len(memo) >= PROJECTIONS_LIMIT:
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
    ctx = table_of(model, system, providers_of(costs))
    st = _stages(model, execution, system, ctx.providers, ctx)
    return get_schedule(schedule).chunk_microbatches(m) * max(acc["compute"] for acc in st.acc), dict(st.sources)


def step_floor(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec,
               costs: Costs = None) -> tuple[float, dict[str, str]]:
    """Seconds ``evaluate``'s step cannot go below, without simulating the schedule: the busiest rank's passes run
    one after another (every micro-batch through each of its chunks, at their paired times: the shortest a pass
    takes). The tuner's branch and bound uses it for schedules whose simulation is costly (op orders built in
    Python). Returns it with the layers' cost sources (``Projection.sources``); raises as ``evaluate``."""
    m, schedule = schedule_of(execution)
    ctx = table_of(model, system, providers_of(costs))
    st = _stages(model, execution, system, ctx.providers, ctx)
    busiest = max(sum(c.fwd + c.bwd for c in row) for row in st.times)
    return get_schedule(schedule).chunk_microbatches(m) * busiest, dict(st.sources)
