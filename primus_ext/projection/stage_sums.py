"""Per-rank stage sums for the projection: a rank's chunk times and per-micro-batch aggregates from its
layer counts and the per-layer costs (``evaluate`` memoises them; ``_chunk_counts`` reads the split).

    >>> times, acc = _stage(row, layers, "moe", chunks={}, layer_id=0)
    >>> acc["compute"], acc["comm"]["tp"]                 # seconds per micro-batch, [total, exposed]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter

from primus_ext.model.hybrid import HYBRID_KINDS
from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.pipeline import ChunkTimes
from primus_ext.model.stages import pipeline_plan
from primus_ext.specs import ExecutionSpec, ModelSpec


@dataclass(frozen=True)
class _Layer:
    """One layer of one kind/variant for one micro-batch, seconds."""

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
    """An analytic cost that includes ``Efficiency.kernel_overhead_s`` per pass (``roofline.launches``)."""
    fwd: float = 0.0
    """Forward incl. exposed comm."""
    bwd: float = 0.0
    """Backward incl. recompute and exposed comm."""
    comm_items: tuple[tuple[str, float, float], ...] = ()
    """(kind, total, exposed) of ``comm_fwd`` then ``comm_bwd``: what the stage sums iterate."""
    fwd_unpaired: float = 0.0
    """What a forward without a partner micro-batch adds under EP overlap: the EP all-to-all counted hidden."""
    bwd_unpaired: float = 0.0


_SPLIT_FIELDS = (
    "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size", "pipeline_model_parallel_layout",
    "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
    "recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_layer_ids", "pipeline_schedule",
)
"""What the layer split and the recompute mix per chunk read (``_chunk_counts``)."""
_split_key = attrgetter(*_SPLIT_FIELDS)


def _chunk_counts(model: ModelSpec, ex: ExecutionSpec) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Memoised on the split and recompute fields only (see ``_chunk_counts_memo``)."""
    return _chunk_counts_memo(model, ExecutionSpec(**dict(zip(_SPLIT_FIELDS, _split_key(ex), strict=True))))


@lru_cache(maxsize=4096)
def _chunk_counts_memo(model: ModelSpec, ex: ExecutionSpec) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Per rank, per chunk: (dense kept, dense recomputed, moe kept, moe recomputed, mtp, embedding, output,
    then the ``HYBRID_KINDS`` counts: a hybrid model's layers by symbol, none recomputed)."""
    pattern = model.moe_layer_pattern
    hybrid = model.hybrid_layer_pattern
    granularity = ex.recompute_granularity
    block = granularity == "full" and ex.recompute_method == "block"
    chosen = frozenset(ex.recompute_layer_ids) if granularity == "full" else frozenset()  # Primus's per-layer ids
    out = []
    for stage in pipeline_plan(model, ex):
        row = []
        for chunk in stage.chunks:
            counts = [0, 0, 0, 0]
            kinds = [0, 0, 0, 0]
            for position, layer in enumerate(chunk.layers):
                if hybrid:  # MambaStack: no recompute (recipe validation refuses it)
                    kinds["M*-E".index(hybrid[layer])] += 1
                    continue
                moe = layer < len(pattern) and pattern[layer]
                if granularity is None:
                    recomputed = False
                elif chosen:
                    recomputed = layer in chosen
                elif block:
                    recomputed = position < (ex.recompute_num_layers or len(chunk.layers))
                else:
                    recomputed = True
                counts[2 * moe + recomputed] += 1
            row.append((*counts, chunk.mtp_layers, chunk.embedding, chunk.output, *kinds))
        out.append(tuple(row))
    return tuple(out)


def _chunk(chunk: tuple, layers: dict[tuple[str, bool], _Layer], mtp_kind: str) -> tuple:
    """One model chunk's per-micro-batch sums: (fwd, bwd, compute, recompute, dense params, expert params,
    analytic passes, decoder layers, ((comm kind, total, exposed), ...), ChunkTimes)."""
    n_dk, n_dr, n_mk, n_mr, mtp, emb, out, *hybrid = chunk
    items = [(("dense", False), n_dk, True), (("dense", True), n_dr, True), (("moe", False), n_mk, True),
             (("moe", True), n_mr, True)]
    # a hybrid kind's recomputed variant is its selective-recompute one (or the plain one: ``evaluate._layers``)
    items += [((kind, (kind, True) in layers), n, True) for kind, n in zip(HYBRID_KINDS, hybrid, strict=True)]
    if mtp:  # an MTP layer: one more decoder layer + the shared output head's logits and loss
        items += [((mtp_kind, False), mtp, True), (("output", False), mtp, False)]
    if emb:
        items.append((("embedding", False), 1, True))
    if out:
        items.append((("output", False), 1, True))
    fwd = bwd = wgrad = compute = recompute = fwd_unpaired = bwd_unpaired = 0.0
    dense = experts = analytic_passes = decoder_layers = 0
    comm: dict[str, list[float]] = {}
    for key, n, owns_params in items:
        if not n:
            continue
        layer = layers[key]
        fwd += n * layer.fwd
        bwd += n * layer.bwd
        wgrad += n * layer.wgrad
        fwd_unpaired += n * layer.fwd_unpaired
        bwd_unpaired += n * layer.bwd_unpaired
        compute += n * (layer.compute_fwd + layer.compute_bwd)
        recompute += n * layer.recompute
        if owns_params:
            dense += n * layer.dense_params
            experts += n * layer.expert_params
        analytic_passes += 2 * n * layer.launched
        decoder_layers += n if get_kind(key[0]).decoder_layer else 0
        for kind, total, exposed in layer.comm_items:
            slot = comm.get(kind)
            if slot is None:
                slot = comm[kind] = [0.0, 0.0]
            slot[0] += n * total
            slot[1] += n * exposed
    return (fwd, bwd, compute, recompute, dense, experts, analytic_passes, decoder_layers,
            tuple((k, t, e) for k, (t, e) in comm.items()),
            ChunkTimes(fwd=fwd, bwd=bwd, wgrad=min(wgrad, bwd), fwd_unpaired=fwd_unpaired, bwd_unpaired=bwd_unpaired))


def _stage(row: tuple, layers: dict[tuple[str, bool], _Layer], mtp_kind: str, chunks: dict,
           layer_id: int) -> tuple[tuple[ChunkTimes, ...], dict]:
    """One pipeline rank's chunk times and its per-micro-batch aggregates (compute, comm, params); each
    distinct chunk is summed once per layer set (``chunks``: memo keyed by (chunk counts, layer id))."""
    chunk_times = []
    compute = recompute = fwd1 = bwd1 = 0.0
    dense = experts = analytic_passes = decoder_layers = 0
    comm_acc: dict[str, list[float]] = {}
    for chunk in row:
        part = chunks.get((chunk, layer_id))
        if part is None:
            part = chunks[(chunk, layer_id)] = _chunk(chunk, layers, mtp_kind)
        fwd, bwd, c_compute, c_recompute, c_dense, c_experts, c_passes, c_layers, comm, times = part
        compute += c_compute
        recompute += c_recompute
        dense += c_dense
        experts += c_experts
        analytic_passes += c_passes
        decoder_layers += c_layers
        for kind, total, exposed in comm:
            slot = comm_acc.get(kind)
            if slot is None:
                slot = comm_acc[kind] = [0.0, 0.0]
            slot[0] += total
            slot[1] += exposed
        fwd1 += fwd
        bwd1 += bwd
        chunk_times.append(times)
    acc = {"compute": compute, "recompute": recompute, "fwd1": fwd1, "bwd1": bwd1, "dense": dense,
           "experts": experts, "analytic_passes": analytic_passes, "layers": decoder_layers, "comm": comm_acc}
    return tuple(chunk_times), acc


def _distinct_rows(counts: tuple, ids: dict) -> tuple[tuple[tuple[int, tuple], ...], tuple[int, ...]]:
    """(the distinct ranks' chunk counts with their ids in ``ids``, per rank the index into them)."""
    distinct: dict[tuple, int] = {}
    rank_rows = tuple(distinct.setdefault(row, len(distinct)) for row in counts)
    return tuple((ids.setdefault(row, len(ids)), row) for row in distinct), rank_rows
