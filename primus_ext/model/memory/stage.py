"""What each pipeline rank holds, whatever the sharding and schedule: the per-rank constants behind
``primus_ext.model.memory``, memoised.

Usage (through ``memory.estimate_memory`` / ``memory.fits``)::

    ctx = stage_context(model, execution, None)
    profile = rank_profile(ctx, 0)     # rank 0's parameter counts, saved bytes per chunk, transient buffers
    biggest_layer_params(ctx)          # what FSDP gathers at a time

``memory.rank.rank_memory`` turns the profiles into bytes under a configuration's sharding and schedule.

Pure and torch-free. Memoisation is keyed on the fields that change each term, so the tuner's many
configurations sharing a model and per-rank shapes reuse them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache

from primus_ext.model.identity_memo import IdentityMemo
from primus_ext.model.kinds.registry import get_kind, pattern_kinds
from primus_ext.model.layers import expert_layer_params, layer_params, rank_shapes
from primus_ext.model.lora import lora_params
from primus_ext.model.memory import activations
from primus_ext.model.memory.activations import TE
from primus_ext.model.memory.plan import ChunkComposition, offloaded_layers, recompute_plan
from primus_ext.model.memory.plan import plan as chunk_plan
from primus_ext.model.memory.saved import activation_bytes_per_layer, linear_input_fraction
from primus_ext.model.memory.schedule import prefix_sums
from primus_ext.model.params import position_embedding_params
from primus_ext.model.pipeline.registry import get_schedule
from primus_ext.model.rank_shape import RankShape
from primus_ext.model.stages import StagePlan
from primus_ext.specs import ExecutionSpec, ModelSpec

BACKWARD_WORKSPACE_LAYER_FRACTION = 0.5
"""Gradients of a layer's intermediates alive during its backward, as a fraction of that layer's
un-recomputed saved bytes (the fc1-output gradient dominates; estimate)."""
MOE_A2A_BUFFER_COPIES = 2
"""All-to-all send/receive buffers of the routed tokens (dispatch and combine) alive at once."""


@dataclass(frozen=True, kw_only=True)
class KindTerms:
    """Per-layer numbers of one layer kind at one per-rank shape."""

    params: int
    expert_params: int
    router_params: int
    act_none: float
    act_selected: float
    """Saved bytes under the configured granularity (selective or none)."""
    act_full: float
    """Saved bytes when the layer is fully recomputed (its checkpointed input)."""
    wgrad_fraction: float
    lora_dense: int = 0
    """LoRA adapter parameters of one layer of this kind (``model.lora.lora_params``), dense and expert."""
    lora_expert: int = 0


@dataclass(frozen=True, kw_only=True)
class StageContext:
    """What every rank of one (model, per-rank shapes, split, recompute) shares; memoised, so it is
    reused across configurations differing only in DP, sharding, batch count or schedule."""

    model: ModelSpec
    execution: ExecutionSpec
    """The configuration it was first built for: read only for fields in ``profile_key``."""
    plan: tuple[StagePlan, ...]
    compositions: tuple[tuple[ChunkComposition, ...], ...]
    terms: Mapping[str, KindTerms]
    embedding_params: int
    output_params: int
    """Final norm + output weight (0 weight when tied and on the embedding's stage)."""
    mtp_extra_params: int
    """Per MTP layer beyond its decoder layer: eh_proj + enorm + hnorm + final norm."""
    source: str
    representatives: tuple[int, ...] = ()
    """One rank per distinct chunk composition, the lowest (the one holding the most micro-batches); every rank
    under the schedules whose held counts need not fall with the rank (what the pre-filter evaluates)."""
    profile_key: tuple | None = None
    """Memo key of the per-rank profiles (``None`` with measured activations: not memoised)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankProfile:
    """What one pipeline rank holds, independent of sharding and schedule (``rank.rank_memory``'s input)."""

    total_params: float
    expert_params: float
    router_params: float
    edge_params: float
    """Embedding / output / MTP extras among ``total_params``."""
    output_params: float
    """Parameters of the output layer on this rank (an FSDP unit of its own)."""
    trainable: tuple[float, float] | None
    """(dense, expert) trainable parameters under LoRA (the adapters); ``None``: every parameter trains."""
    chunk_saved: tuple[float, ...]
    """Saved bytes of one micro-batch through each chunk."""
    prefix: tuple[float, ...]
    """``schedule.prefix_sums(chunk_saved)`` (``schedule.megatron_held``'s table)."""
    per_mb: float
    """Saved bytes of one micro-batch through the whole stage."""
    wgrad_fraction: float
    """Share of the saved bytes split-W schedules keep for the deferred weight-gradient pass."""
    working: float
    """Recompute working set (bytes re-materialised at once in backward)."""
    backward_ws: float
    """Gradients of the largest layer's intermediates alive during its backward."""
    logits: float
    """The bf16 gradient of the logits (native loss, on the output layer's or MTP layers' rank)."""
    a2a: float
    """MoE all-to-all send / receive buffers."""
    loss_saved: float
    """Saved bytes of the output layer + loss of one micro-batch, when they are freed before that micro-batch's
    layers run their backward (one chunk, no MTP: see ``rank.loss_overlap``); 0 otherwise."""


@lru_cache(maxsize=8192)
def _kind_terms(shape: RankShape, scale: float) -> KindTerms:
    act_none = activation_bytes_per_layer(shape, impl=TE, recompute="none") * scale
    if shape.recompute == "selective":
        act_sel = activation_bytes_per_layer(shape, impl=TE, recompute="selective") * scale
    else:
        act_sel = act_none
    kind = get_kind(shape.kind)
    act_full = activation_bytes_per_layer(shape, impl=TE, recompute="full") if kind.recomputable else 0
    lora_dense, lora_expert = lora_params(shape)
    return KindTerms(params=layer_params(shape), expert_params=expert_layer_params(shape),
                     router_params=kind.router_params(shape),
                     act_none=act_none, act_selected=act_sel, act_full=act_full,
                     wgrad_fraction=linear_input_fraction(shape), lora_dense=lora_dense, lora_expert=lora_expert)


@dataclass(frozen=True, kw_only=True)
class Measured:
    """Saved bytes measured per layer kind, and how: the implementation and the ``RankShape.scaled``
    factor of the measured module (a CPU measurement runs the local spec at a reduced scale)."""

    saved_bytes: Mapping[str, int]
    impl: str = "te"
    """``te`` (Transformer-Engine spec, GPU) or ``local`` (megatron-core local spec, CPU)."""
    scale: float = 1.0
    sequence_split: bool | None = None
    """The module ran sequence parallelism's split: see ``memory.activations.as_measured``."""


def _scale(shape: RankShape, measured: Measured | None) -> float:
    """Measured / formula at the shape as measured and its implementation: the correction carried over to
    the TE formula at the target shape (so a CPU local-spec measurement does not import the s x s scores)."""
    if measured is None or shape.kind not in measured.saved_bytes:
        return 1.0
    impl = activations.LOCAL if measured.impl == "local" else TE
    built = activations.as_measured(shape.scaled(measured.scale), impl, sequence_split=measured.sequence_split)
    formula = activation_bytes_per_layer(built, impl=impl)
    return measured.saved_bytes[shape.kind] / formula if formula else 1.0


_BY_MODEL = IdentityMemo(limit=65536)
"""Memo keyed on ``id(model)`` + the fields a term depends on (``model.identity_memo``: hashing a whole ModelSpec
per call would dominate ``fits``)."""
_memo = _BY_MODEL.get


def _terms(model: ModelSpec, e: ExecutionSpec, measured: Measured | None) -> dict[str, KindTerms]:
    shapes = rank_shapes(model, e)
    terms = {kind: _kind_terms(shape, _scale(shape, measured)) for kind, shape in shapes.items()}
    if e.recompute_granularity == "selective" and e.selective_ac_option == "op" and "dense" in terms:
        # torch op-level selective checkpointing (torchtitan) on the dense layers; MoE layers keep
        # Megatron's module semantics (torchtitan's MoE models are not modelled)
        terms["dense"] = replace(terms["dense"], act_selected=float(activations.op_sac_saved_bytes(shapes["dense"])))
    if e.cross_entropy_fusion_impl == "te" and "output" in terms:
        # TE's cross entropy keeps the bf16 logits (holding the gradient) instead of fp32 exp(logits)
        delta = (activations.loss_saved_bytes(shapes["output"], "te")
                 - activations.loss_saved_bytes(shapes["output"], "native"))
        out = terms["output"]
        terms["output"] = replace(out, act_none=out.act_none + delta, act_selected=out.act_selected + delta)
    return terms


def _keys(model: ModelSpec, e: ExecutionSpec) -> tuple[tuple, tuple]:
    recompute_layers = recompute_plan(e)
    plan_key = ("plan", id(model), e.pp, e.virtual_pipeline_model_parallel_size, e.pipeline_model_parallel_layout,
                e.decoder_first_pipeline_num_layers, e.decoder_last_pipeline_num_layers,
                e.account_for_embedding_in_pipeline_split, e.account_for_loss_in_pipeline_split, recompute_layers,
                offloaded_layers(e), e.pipeline_schedule)
    terms_key = ("terms", id(model), e.tp, e.cp, e.ep, e.etp, e.sequence_parallel, e.micro_batch_size,
                 e.seq_length, e.precision, e.recompute_granularity, e.recompute_modules, e.cross_entropy_fusion_impl,
                 e.selective_ac_option, e.lora_rank, e.lora_targets, e.activation_func_fp8_input_store)
    return plan_key, terms_key


def stage_context(model: ModelSpec, execution: ExecutionSpec, measured: Measured | None) -> StageContext:
    """The shared part of a configuration's memory (memoised unless activations are measured)."""
    if measured:
        return _build_context(model, execution, measured)
    plan_key, terms_key = _keys(model, execution)
    key = ("context", *terms_key[1:], *plan_key[2:], execution.recompute_method, execution.recompute_num_layers)
    return _memo(key, model, lambda: _build_context(model, execution, None))


def _build_context(model: ModelSpec, e: ExecutionSpec, measured: Measured | None) -> StageContext:
    plan_key, terms_key = _keys(model, e)
    plan, comps, reps = _memo(plan_key, model, lambda: _plan_with_reps(model, plan_key[2:]))
    terms = _terms(model, e, measured) if measured else _memo(terms_key, model, lambda: _terms(model, e, None))
    emb = terms["embedding"].params + position_embedding_params(
        model.max_position_embeddings, model.hidden_size, model.position_embedding_type)
    out = terms["output"].params
    if not model.untie_embeddings_and_output_weights and e.pp * e.vpp == 1:
        out -= terms["embedding"].params  # the output layer shares the embedding's weight
    mtp_extra = 2 * model.hidden_size * model.hidden_size // e.tp + 3 * norm_params_for(model)
    source = "measured saved-bytes" if measured and any(k in measured.saved_bytes for k in terms) else "analytic"
    profile_key = None if measured else ("profile", *terms_key[1:], *plan_key[2:], e.recompute_method,
                                         e.recompute_num_layers)
    return StageContext(model=model, execution=e, plan=plan, compositions=comps, terms=terms,
                        embedding_params=emb, output_params=out, mtp_extra_params=mtp_extra, source=source,
                        representatives=reps, profile_key=profile_key)


def _plan_with_reps(model: ModelSpec, key: tuple) -> tuple:
    plan, comps = chunk_plan(model, *key)
    if get_schedule(key[-1]).batch_kernel is None:  # split-W / V / DualPipe: held counts need not fall with rank
        return plan, comps, tuple(range(len(comps)))
    seen: dict[tuple[ChunkComposition, ...], int] = {}
    for rank, comp in enumerate(comps):
        seen.setdefault(comp, rank)  # the lowest rank of a composition holds the most micro-batches (1F1B's rule)
    return plan, comps, tuple(seen.values())


def _chunk_activations(ctx: StageContext, comp: ChunkComposition) -> tuple[float, float]:
    """(saved bytes of one micro-batch through this chunk, recompute working set)."""
    e = ctx.execution
    dense, moe = ctx.terms.get("dense"), ctx.terms.get("moe")
    layers = [(comp.dense, dense), (comp.moe, moe)]
    mtp_kind = moe if ctx.model.is_moe and moe else dense
    total, working = 0.0, 0.0
    if e.recompute_granularity == "full" and (e.recompute_method == "block" or e.recompute_layer_ids):
        for count, head, t in ((comp.dense, comp.block_dense, dense), (comp.moe, comp.block_moe, moe)):
            if count and t:
                total += head * t.act_full + (count - head) * t.act_none
                working = max(working, t.act_none) if head else working
    elif e.recompute_granularity == "full":
        group = e.recompute_num_layers or 1
        n = comp.dense + comp.moe
        if n:
            total += math.ceil(n / group) * max(t.act_full for c, t in layers if c and t)
            working = group * max(t.act_none for c, t in layers if c and t)
    else:
        for count, t in layers:
            if count and t:
                total += count * t.act_selected
                working = max(working, t.act_none - t.act_selected)
        offloaded = [(c, t) for c, t in ((comp.offload_dense, dense), (comp.offload_moe, moe)) if c and t]
        if offloaded:
            # Transformer Engine's cpu_offload (AsyncDoubleBufferGroupOffloadHandler, used by megatron-core
            # TransformerBlock): the first N layers' saved tensors (TE linear inputs / norm outputs,
            # attention q/k/v/out, the SwiGLU input: megatron-core mlp.py passes cpu_offloading to
            # bias_swiglu_impl) go to host memory, each layer's copy synchronised within a window of
            # L/N layers and reloaded one window ahead in backward. At the peak (end of forward / start
            # of backward) the GPU keeps the L - N other layers plus one offloaded layer in transit.
            total -= sum(c * t.act_selected for c, t in offloaded)
            total += max(t.act_selected for _, t in offloaded)
    for count, kind in zip(comp.hybrid, pattern_kinds(ctx.model.hybrid_layer_pattern).values(), strict=True):
        if count:  # no full recompute in a MambaStack; selective inside its attention / MLP / MoE layers
            total += count * ctx.terms[kind].act_selected
    if comp.output:
        total += ctx.terms["output"].act_none
    hybrid_mtp = bool(ctx.model.mtp_layer_pattern)  # its MTP layers are in comp.hybrid
    if comp.mtp and (mtp_kind or hybrid_mtp):
        # each MTP depth: a decoder layer, its eh_proj input (2h) and another loss over the vocab
        sp = e.tp if e.sequence_parallel and e.tp > 1 else 1
        eh_in = (activations.element_bytes(e.precision) * 2 * ctx.model.hidden_size * e.micro_batch_size * e.seq_length
                 / e.cp / sp)
        layer = 0.0 if hybrid_mtp or mtp_kind is None else mtp_kind.act_none
        total += comp.mtp * (layer + eh_in + ctx.terms["output"].act_none)
    return total, working


def biggest_layer_params(ctx: StageContext) -> int:
    """Parameters of the largest transformer layer on a rank (what FSDP gathers at a time)."""
    kinds = ("dense", "moe", *pattern_kinds(ctx.model.hybrid_layer_pattern).values())
    return max((t.params for t in map(ctx.terms.get, kinds) if t), default=0)


def _rank_profile(ctx: StageContext, rank: int) -> RankProfile:
    model = ctx.model
    comps = ctx.compositions[rank]
    dense, moe = ctx.terms.get("dense"), ctx.terms.get("moe")
    mtp_kind = moe if model.is_moe and moe else dense
    n_mtp = sum(c.mtp for c in comps)
    owned = min(n_mtp, model.mtp_weight_copies)  # MTP layers holding weights (one under mtp_use_repeated_layer)
    gpt_mtp = 0 if model.mtp_layer_pattern else owned
    n_dense = sum(c.dense for c in comps) + (gpt_mtp if mtp_kind is dense else 0)
    n_moe = sum(c.moe for c in comps) + (gpt_mtp if mtp_kind is moe else 0)
    total = n_dense * (dense.params if dense else 0) + n_moe * (moe.params if moe else 0)
    embedding = any(c.embedding for c in comps)
    output = any(c.output for c in comps)
    edge = (ctx.embedding_params if embedding else 0) + (ctx.output_params if output else 0)
    if n_mtp:  # MTP layers' extras, and the embedding Megatron builds on their stage
        edge += owned * ctx.mtp_extra_params + (0 if embedding else ctx.terms["embedding"].params)
    chunks = [_chunk_activations(ctx, comp) for comp in comps]
    present = [t for c, t in ((n_dense, dense), (n_moe, moe)) if c and t]
    # a hybrid model's MTP layers of repeated depths compute (comp.hybrid) but hold no weights of their own
    repeats = {symbol: (n_mtp - owned) * model.mtp_layer_pattern.count(symbol)
               for symbol in pattern_kinds(model.hybrid_layer_pattern)}
    hybrid = [(sum(c.hybrid[k] for c in comps) - repeats[symbol], ctx.terms[kind])
              for k, (symbol, kind) in enumerate(pattern_kinds(model.hybrid_layer_pattern).items())
              if any(c.hybrid[k] for c in comps)]
    present += [t for _, t in hybrid]
    total += sum(n * t.params for n, t in hybrid)
    expert = n_moe * (moe.expert_params if moe else 0) + sum(n * t.expert_params for n, t in hybrid)
    router = n_moe * (moe.router_params if moe else 0) + sum(n * t.router_params for n, t in hybrid)
    saved = tuple(saved for saved, _ in chunks)
    backward_ws, logits, a2a = _transients(model, ctx.execution, max((t.act_none for t in present), default=0.0),
                                           output or n_mtp > 0, n_moe + sum(n for n, t in hybrid if t.expert_params))
    return RankProfile(
        total_params=float(total + edge), expert_params=float(expert),
        router_params=float(router), edge_params=float(edge),
        output_params=float(ctx.output_params if output else 0),
        trainable=(float(n_dense * (dense.lora_dense if dense else 0) + n_moe * (moe.lora_dense if moe else 0)),
                   float(n_moe * (moe.lora_expert if moe else 0))) if ctx.execution.lora_rank else None,
        chunk_saved=saved, prefix=prefix_sums(saved), per_mb=sum(saved),
        wgrad_fraction=max((t.wgrad_fraction for t in present), default=0.0),
        working=max(work for _, work in chunks), backward_ws=backward_ws, logits=logits, a2a=a2a,
        loss_saved=ctx.terms["output"].act_none if output and not n_mtp and len(comps) == 1 else 0.0)


def _transients(model: ModelSpec, e: ExecutionSpec, biggest_layer: float, loss_side: bool,
                moe_layers: int) -> tuple[float, float, float]:
    """(backward workspace, bf16 logits of the loss, MoE all-to-all buffers) of a rank whose largest layer saves
    ``biggest_layer`` bytes, holding the output layer or MTP layers (``loss_side``) and ``moe_layers`` MoE layers:
    they depend only on the per-rank shapes (TP, CP, ETP, MBS, seq, precision)."""
    backward_ws = BACKWARD_WORKSPACE_LAYER_FRACTION * biggest_layer
    tokens = e.micro_batch_size * e.seq_length / e.cp
    elem = activations.element_bytes(e.precision)
    # the bf16 gradient of the logits in backward (native loss); TE's loss computes it in place in the
    # logits it saved (counted with the activations)
    native = e.cross_entropy_fusion_impl != "te"
    logits = elem * tokens * model.padded_vocab_size(e.tp) / e.tp if loss_side and native else 0.0
    a2a = 0.0
    if moe_layers:
        slots = tokens * model.moe_router_topk * e.etp / e.tp
        a2a = MOE_A2A_BUFFER_COPIES * slots * model.hidden_size * elem
    return backward_ws, logits, a2a


def rank_profile(ctx: StageContext, rank: int) -> RankProfile:
    """The rank's profile, memoised across configurations sharing shapes, split and recompute."""
    if ctx.profile_key is None:
        return _rank_profile(ctx, rank)
    return _memo((*ctx.profile_key, rank), ctx.model, lambda: _rank_profile(ctx, rank))


def norm_params_for(model: ModelSpec) -> int:
    return model.hidden_size * (2 if model.normalization == "LayerNorm" else 1)
