"""Bytes one layer saves for backward, asked of its kind: ``Kind.saved`` (``Kind.saved_selective`` under selective
recompute; a recomputable kind under full recompute keeps its checkpointed input only).

    >>> activation_bytes_per_layer(shape)                  # Transformer-Engine spec (production GPU runs)
    >>> activation_parts(shape, impl=LOCAL)                # named parts, megatron-core local spec on CPU

The formulas and the two implementations (``TE``, ``LOCAL``) are ``memory.activations``'; this is the dispatcher above
the kind registry (docs/DESIGN.md "Layers"). Pure and torch-free.
"""

from __future__ import annotations

from functools import lru_cache

from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.memory.activations import TE, ActivationImpl, element_bytes
from primus_ext.model.rank_shape import RankShape


@lru_cache(maxsize=4096)
def _parts_none(shape: RankShape, impl: ActivationImpl) -> tuple[tuple[str, float], ...]:
    return tuple(get_kind(shape.kind).saved(shape, impl).items())


def activation_parts(shape: RankShape, *, impl: ActivationImpl = TE, recompute: str | None = None) -> dict[str, float]:
    """Named bytes one layer of ``shape.kind`` saves for one micro-batch on one rank.

    ``recompute`` overrides ``shape.recompute`` (the memory model mixes recomputed and plain layers
    under ``recompute_num_layers``).
    """
    mode = recompute or shape.recompute
    kind = get_kind(shape.kind)
    if mode == "full" and kind.recomputable:
        sp = shape.tp if shape.sequence_parallel and shape.tp > 1 else 1
        e = element_bytes(shape.precision)
        return {"checkpoint_input": e * shape.tokens / sp * shape.arch.hidden_size}
    parts = dict(_parts_none(shape, impl))
    if mode == "selective" and kind.recomputable:
        parts = kind.saved_selective(shape, impl, parts)
    return parts


def activation_bytes_per_layer(shape: RankShape, *, impl: ActivationImpl = TE, recompute: str | None = None) -> int:
    """Bytes saved for backward by one layer, one micro-batch, honouring SP/CP/TP/ETP and recompute."""
    return round(sum(activation_parts(shape, impl=impl, recompute=recompute).values()))


def linear_input_fraction(shape: RankShape, *, impl: ActivationImpl = TE) -> float:
    """Share of a layer's saved bytes that weight-gradient GEMMs need (kept until a deferred W pass)."""
    parts = activation_parts(shape, impl=impl, recompute="none")
    total = sum(parts.values())
    names = ("input_norm_out", "pre_mlp_norm_out", "attn_out", "mlp_fc2_in", "experts", "experts_fc2_in",
             "latent_proj", "output_in", "mla_q_compressed", "mla_kv_compressed")
    return sum(parts.get(n, 0.0) for n in names) / total if total else 0.0
