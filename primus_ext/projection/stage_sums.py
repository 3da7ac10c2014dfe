"""Per-rank stage sums of the one-configuration projection (``evaluate``): a rank's chunk times and per-micro-batch
aggregates from its layer counts and the cost table's entries (``projection.table``: ``chunk_counts`` reads the
split, ``LayerCosts`` are the per-layer costs). The batch path sums the same entries as arrays.

    >>> times, acc = _stage(row, layers, "moe", chunks={}, layer_id=0)
    >>> acc["compute"], acc["comm"]["tp"]                 # seconds per micro-batch, [total, exposed]
"""

from __future__ import annotations

from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.pipeline import ChunkTimes
from primus_ext.projection.table import LayerCosts


def _chunk(chunk: tuple, layers: dict[tuple[str, bool], LayerCosts], mtp_kind: str, hybrid_kinds: tuple) -> tuple:
    """One model chunk's per-micro-batch sums: (fwd, bwd, compute, recompute, dense params, expert params,
    analytic passes, decoder layers, ((comm kind, total, exposed), ...), ChunkTimes)."""
    n_dk, n_dr, n_mk, n_mr, mtp, emb, out, *hybrid = chunk
    items = [(("dense", False), n_dk, True), (("dense", True), n_dr, True), (("moe", False), n_mk, True),
             (("moe", True), n_mr, True)]
    # a hybrid kind's recomputed variant is its selective-recompute one (or the plain one: ``table.rank_layers``)
    items += [((kind, (kind, True) in layers), n, True) for kind, n in zip(hybrid_kinds, hybrid, strict=True)]
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


def _stage(row: tuple, layers: dict[tuple[str, bool], LayerCosts], mtp_kind: str, chunks: dict,
           layer_id: int, hybrid_kinds: tuple = ()) -> tuple[tuple[ChunkTimes, ...], dict]:
    """One pipeline rank's chunk times and its per-micro-batch aggregates (compute, comm, params); each
    distinct chunk is summed once per layer set (``chunks``: memo keyed by (chunk counts, layer id)).
    ``hybrid_kinds``: the kinds of a hybrid model's counts (``kinds.registry.pattern_kinds``)."""
    chunk_times = []
    compute = recompute = fwd1 = bwd1 = 0.0
    dense = experts = analytic_passes = decoder_layers = 0
    comm_acc: dict[str, list[float]] = {}
    for chunk in row:
        part = chunks.get((chunk, layer_id))
        if part is None:
            part = chunks[(chunk, layer_id)] = _chunk(chunk, layers, mtp_kind, hybrid_kinds)
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


