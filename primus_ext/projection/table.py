"""The cost table: per (model, system, cost providers), every layer's costs and each rank's layer counts, memoised.

    table = table_of(model, system, providers_of(costs))      # found by identity: one per tuner space
    layers, p2p_bytes, layer_id = layer_entry(table, execution)   # (kind, recomputed) -> LayerCosts
    counts = chunk_counts(model, execution)                       # per rank, per chunk: how many of each layer

The projection engine (``projection.engine``) reads it, for one configuration or thousands. A ``LayerCosts`` entry
is one layer kind's compute from the cost chain (the providers in order - a timing store first - then the analytic
roofline, ``lookup``) with its per-layer communication (``projection.comm.layer_comm``) and the parameters it trains;
``chunk_counts`` says how many layers of each kind a chunk of each pipeline rank holds (the split and the recompute
mix). Entries are memoised on the execution fields each part reads (``SHAPE_FIELDS`` + ``COMM_FIELDS``;
``SPLIT_FIELDS``), so configurations that differ elsewhere (batch, DP overlap, optimizer) share them. Pure
arithmetic over memoised lookups: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from operator import attrgetter

from primus_ext.model.analytic import analytic_cost, attention_seconds
from primus_ext.model.carry import carry_cost
from primus_ext.model.costs import CostProvider, LayerCost
from primus_ext.model.host_floor import launches
from primus_ext.model.kinds.registry import get_kind, pattern_kinds
from primus_ext.model.layers import expert_layer_params, layer_params, rank_shapes
from primus_ext.model.lora import lora_cost, lora_params, trained_in_full
from primus_ext.model.pipeline.registry import get_schedule
from primus_ext.model.placement import group_placements
from primus_ext.model.rank_shape import RankShape
from primus_ext.model.recompute import block_layers
from primus_ext.model.stages import pipeline_plan
from primus_ext.projection.comm import layer_comm, pp_bytes
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec


@dataclass(frozen=True)
class LayerCosts:
    """One layer of one kind/variant for one micro-batch, seconds: an entry of the cost table (its compute from the
    cost chain, its exposed communication, the parameters it trains)."""

    compute_fwd: float
    compute_bwd: float
    """Backward incl. recompute."""
    wgrad: float
    recompute: float
    comm_fwd: dict[str, tuple[float, float]]
    comm_bwd: dict[str, tuple[float, float]]
    dense_params: int
    expert_params: int
    source: str
    launched: bool
    """An analytic cost that includes ``Efficiency.kernel_overhead_s`` per pass (``host_floor.launches``)."""
    fwd: float = 0.0
    """Forward incl. exposed comm."""
    bwd: float = 0.0
    """Backward incl. recompute and exposed comm."""
    comm_items: tuple[tuple[str, float, float], ...] = ()
    """(kind, total, exposed) of ``comm_fwd`` then ``comm_bwd``: what the stage sums iterate."""
    fwd_unpaired: float = 0.0
    """What a forward without a partner micro-batch adds under EP overlap: the EP all-to-all counted hidden."""
    bwd_unpaired: float = 0.0

Costs = CostProvider | Sequence[CostProvider] | None


_MEMO_LIMIT = 16
_memos: dict[int, tuple[CostProvider, dict[RankShape, LayerCost | None]]] = {}
"""Per provider (by identity, kept alive here): shape -> cost. A timing store answers from SQLite;
the tuner asks for the same few shapes thousands of times."""


def clear_cost_cache() -> None:
    """Forget memoised provider answers and projections (after recording new measurements in a store)."""
    _memos.clear()
    _tables.clear()


def forget_projections() -> None:
    """Forget projections, per-rank stage aggregates and simulated schedules, keeping the per-layer costs
    and communication (the cost table): what the speed benchmark measures."""
    from primus_ext.model.pipeline import clear_schedule_cache

    for ctx in _tables.values():
        ctx.tails.clear()
        ctx.constants.clear()
        ctx.batch.pop("p2p", None)
        if ctx.projections is not None:
            ctx.projections.clear()
    clear_schedule_cache()


def providers_of(costs: Costs) -> tuple[CostProvider, ...]:
    if costs is None:
        return ()
    if hasattr(costs, "cost"):
        return (costs,)  # type: ignore[return-value]
    return tuple(costs)  # type: ignore[arg-type]


def lookup(shape: RankShape, providers: tuple[CostProvider, ...], system: SystemSpec) -> LayerCost:
    if shape.lora_rank:  # the layer as trained in full, then frozen with its adapters (model.lora)
        return lora_cost(lookup(trained_in_full(shape), providers, system), shape, system.gpu)
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


COMM_FIELDS = (
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "expert_model_parallel_size", "expert_tensor_parallel_size", "data_parallel_size", "sequence_parallel",
    "cp_comm_type", "tp_comm_overlap", "overlap_moe_expert_parallel_comm", "moe_token_dispatcher_type", "fsdp",
    "moe_dispatch_fwd_dtype", "moe_combine_bwd_dtype", "moe_shared_expert_overlap",
    "data_parallel_sharding_strategy", "grad_reduce_in_bf16", "fsdp_reduce_dtype", "precision",
)
"""What per-layer communication reads (``comm.layer_comm`` and the group placement)."""
SHAPE_FIELDS = (
    "tensor_model_parallel_size", "context_parallel_size", "expert_model_parallel_size",
    "expert_tensor_parallel_size", "sequence_parallel", "micro_batch_size", "seq_length", "precision",
    "recompute_granularity", "recompute_modules", "fp8_recipe", "fp4_recipe", "attention_kernel",
    "cuda_graph", "lora_rank", "lora_targets", "activation_func_fp8_input_store",
)
"""What ``rank_shapes`` reads (tests/projection/test_evaluate_fast.py mutates every other field)."""
comm_key = attrgetter(*COMM_FIELDS)


def pairs_passes(ex: ExecutionSpec) -> bool:
    """Whether ``ex``'s schedule runs a forward and another micro-batch's backward as one overlapped pair, hiding
    each one's EP all-to-all behind the other's compute whatever Megatron's ``overlap_moe_expert_parallel_comm``
    says (DualPipe / DualPipeV: DeepSeek-V3 report sec. 3.2.1, fig. 4; ``Schedule.pairs_passes``)."""
    return ex.pipeline_model_parallel_size > 1 and get_schedule(ex.pipeline_schedule).pairs_passes


def comm_fields(ex: ExecutionSpec) -> ExecutionSpec:
    """``ex`` reduced to what per-layer communication reads: the memo key of a layer, so that batch /
    DP-overlap / optimizer variants share it. A schedule that pairs passes itself overlaps the EP all-to-all
    (``pairs_passes``): its layers are priced as under Megatron's EP overlap, the passes it runs alone exposed."""
    fields = dict(zip(COMM_FIELDS, comm_key(ex), strict=True))
    if pairs_passes(ex):
        fields["overlap_moe_expert_parallel_comm"] = True
    return ExecutionSpec(**fields)


def layer_costs(shape: RankShape, ex: ExecutionSpec, system: SystemSpec,
                providers: tuple[CostProvider, ...]) -> LayerCosts:
    return _layer_from_cost(shape, comm_fields(ex), system, lookup(shape, providers, system))


@lru_cache(maxsize=16384)
def _layer_from_cost(shape: RankShape, ex: ExecutionSpec, system: SystemSpec, cost: LayerCost) -> LayerCosts:
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
    return LayerCosts(compute_fwd=fwd, compute_bwd=bwd, wgrad=wgrad, recompute=recompute, comm_fwd=comm.fwd,
                  comm_bwd=comm.bwd, dense_params=trained[0], expert_params=trained[1],
                  source=cost.source, launched=cost.source == "analytic" and launches(shape),
                  fwd=fwd + sum(v[1] for v in comm.fwd.values()), bwd=bwd + sum(v[1] for v in comm.bwd.values()),
                  comm_items=tuple((k, t, e) for part in (comm.fwd, comm.bwd) for k, (t, e) in part.items()),
                  fwd_unpaired=ep_f[0] - ep_f[1] if overlap else 0.0,
                  bwd_unpaired=ep_b[0] - ep_b[1] if overlap else 0.0)


STAGES_LIMIT = 16384
"""Layer / row memo entries per context (each a few KB) before the memo starts over."""
PROJECTIONS_LIMIT = 8192
"""Projections memoised per context (revisited configurations)."""
CONTEXT_LIMIT = 16


@dataclass(frozen=True)
class CostTable:
    """Memos of one (model, system, providers) triple, found by identity: hashing the specs on every call
    costs more than a projection's arithmetic."""

    model: ModelSpec
    system: SystemSpec
    providers: tuple[CostProvider, ...]
    layers: dict = field(default_factory=dict)
    """(shape fields, comm fields) -> (layers, p2p bytes)."""
    projections: dict | None = None
    tails: dict = field(default_factory=dict)
    """Per-rank step tails (``tail.rank_tail``)."""
    constants: dict = field(default_factory=dict)
    """Per-step constants (``tail.step_constants``): FLOPs, peak, tokens."""
    batch: dict = field(default_factory=dict)
    """``projection.engine``'s arrays: per layer id its layer-row values and cost sources, per split its count
    matrix (kept, like ``layers`` and ``counts``), and the send/recv seconds per boundary under ``"p2p"`` (cleared by
    ``forget_projections``)."""


shape_key = attrgetter(*SHAPE_FIELDS)


def rank_layers(model: ModelSpec, ex: ExecutionSpec, system: SystemSpec,
            providers: tuple[CostProvider, ...]) -> tuple[dict[tuple[str, bool], LayerCosts], float]:
    """Every layer kind (plain and recomputed variant) of one rank, and the p2p bytes per micro-batch."""
    shapes = rank_shapes(model, ex)
    layers: dict[tuple[str, bool], LayerCosts] = {}
    for kind, shape in shapes.items():
        plain = replace(shape, recompute="none", recompute_modules=()) if shape.recompute != "none" else shape
        layers[(kind, False)] = layer_costs(plain, ex, system, providers)
        if get_kind(kind).recomputable:
            layers[(kind, True)] = (layer_costs(shape, ex, system, providers) if plain is not shape
                                    else layers[(kind, False)])
    return layers, pp_bytes(shapes["embedding"], ex)


def layer_entry(ctx: CostTable, ex: ExecutionSpec) -> tuple[dict[tuple[str, bool], LayerCosts], float, int]:
    """(layers, p2p bytes, layer id) of ``ex`` from the context's memo (keyed on the shape and comm fields)."""
    layer_key = (shape_key(ex), comm_key(ex), pairs_passes(ex))
    found = ctx.layers.get(layer_key)
    if found is None:
        if len(ctx.layers) >= STAGES_LIMIT:
            ctx.layers.clear()  # layer ids restart: forget everything keyed by them
            ctx.batch.clear()
        found = ctx.layers[layer_key] = (*rank_layers(ctx.model, ex, ctx.system, ctx.providers), len(ctx.layers))
    return found


def layer_sources(layers: dict[tuple[str, bool], LayerCosts]) -> dict[str, str]:
    """Layer kind -> where its cost came from (both variants' sources when they differ)."""
    sources: dict[str, str] = {}
    for (kind, _), layer in layers.items():
        known = sources.get(kind)
        sources[kind] = layer.source if known in (None, layer.source) else f"{known} + {layer.source}"
    return sources

_tables: dict[tuple[int, ...], CostTable] = {}


def table_of(model: ModelSpec, system: SystemSpec, providers: tuple[CostProvider, ...]) -> CostTable:
    key = (id(model), id(system), *map(id, providers))
    ctx = _tables.get(key)
    if ctx is None or ctx.model is not model or ctx.system is not system or any(
            a is not b for a, b in zip(ctx.providers, providers, strict=True)):
        if len(_tables) >= CONTEXT_LIMIT:
            _tables.clear()
        hashable = all(isinstance(p, Hashable) for p in providers)
        ctx = _tables[key] = CostTable(model=model, system=system, providers=providers,
                                        projections={} if hashable else None)
    return ctx

SPLIT_FIELDS = (
    "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size", "pipeline_model_parallel_layout",
    "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
    "recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_layer_ids", "pipeline_schedule",
)
"""What the layer split and the recompute mix per chunk read (``chunk_counts``)."""
split_key = attrgetter(*SPLIT_FIELDS)


def chunk_counts(model: ModelSpec, ex: ExecutionSpec) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Memoised on the split and recompute fields only (see ``_chunk_counts_memo``)."""
    return _chunk_counts_memo(model, ExecutionSpec(**dict(zip(SPLIT_FIELDS, split_key(ex), strict=True))))


@lru_cache(maxsize=4096)
def _chunk_counts_memo(model: ModelSpec, ex: ExecutionSpec) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Per rank, per chunk: (dense kept, dense recomputed, moe kept, moe recomputed, mtp, embedding, output,
    then a hybrid model's layers by kind in ``kinds.registry.pattern_kinds`` order, none recomputed, then the MTP
    depths that reuse the first depth's weights (``ModelSpec.mtp_use_repeated_layer``): a GPT model's count, then a
    hybrid model's by kind). ``mtp`` counts every depth (its output head runs at each); a hybrid model's MTP layers
    (``mtp_layer_pattern``) add to its kinds' counts, those of repeated depths to the weight-sharing columns."""
    pattern = model.moe_layer_pattern
    hybrid = model.hybrid_layer_pattern
    granularity = ex.recompute_granularity
    block = block_layers(ex)  # model.recompute: the rule memory.plan reads too
    chosen = frozenset(ex.recompute_layer_ids) if granularity == "full" else frozenset()  # Primus's per-layer ids
    index = {symbol: k for k, symbol in enumerate(pattern_kinds(hybrid))}  # a GPT model: none
    out = []
    for stage in pipeline_plan(model, ex):
        row = []
        for chunk in stage.chunks:
            counts = [0, 0, 0, 0]
            kinds = [0] * len(index)
            for position, layer in enumerate(chunk.layers):
                if hybrid:  # MambaStack: no recompute (recipe validation refuses it)
                    kinds[index[hybrid[layer]]] += 1
                    continue
                moe = layer < len(pattern) and pattern[layer]
                if granularity is None:
                    recomputed = False
                elif chosen:
                    recomputed = layer in chosen
                elif block is not None:
                    recomputed = position < block
                else:
                    recomputed = True
                counts[2 * moe + recomputed] += 1
            mtp, owned = chunk.mtp_layers, min(chunk.mtp_layers, model.mtp_weight_copies)
            shared = [0] * len(index)
            for symbol in model.mtp_layer_pattern:  # a hybrid model's MTP layers
                kinds[index[symbol]] += owned
                shared[index[symbol]] += mtp - owned
            gpt_shared = 0 if hybrid else mtp - owned
            row.append((*counts, owned if not hybrid else mtp, chunk.embedding, chunk.output, *kinds, gpt_shared,
                        *shared))
        out.append(tuple(row))
    return tuple(out)


__all__ = ["COMM_FIELDS", "CONTEXT_LIMIT", "PROJECTIONS_LIMIT", "SHAPE_FIELDS", "SPLIT_FIELDS", "STAGES_LIMIT",
           "CostTable", "Costs", "LayerCosts", "chunk_counts", "clear_cost_cache", "comm_fields", "comm_key",
           "forget_projections", "layer_costs", "layer_entry", "layer_sources",
           "lookup", "providers_of", "rank_layers", "shape_key", "split_key", "table_of"]
