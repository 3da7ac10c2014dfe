"""A model's layers, asked of their kinds: the dispatchers above the kind registry (docs/DESIGN.md "Layers").

    >>> from primus_ext.model.layers import layer_params, rank_shapes
    >>> shapes = rank_shapes(model, execution)         # {"dense": RankShape, "moe": ..., "embedding": ..., ...}
    >>> layer_params(shapes["moe"])                    # parameters one rank holds for one MoE layer

Which kinds a model places and at which per-rank shape (``rank_shapes``), the parameters a layer of each holds
(``layer_params``, ``hybrid_stage_params``) and a hybrid model's layer pattern (``allocate_layers``: its legal
symbols are the registered kinds'). Each looks the kind up (``model.kinds.registry``) and asks its hook; the
formulas the hooks sum are the leaves' (``model.params``, ``model.hybrid``), which import no kind. Pure and
torch-free.
"""

from __future__ import annotations

from primus_ext.model.hybrid import ATTENTION, MAMBA, MLP, HybridPatternError, stage_patterns
from primus_ext.model.kinds.registry import get_kind, placed_kinds, symbol_kinds
from primus_ext.model.params import Impl, embedding_params, output_params
from primus_ext.model.rank_shape import DEFAULT_MOE_IMBALANCE, LayerKind, RankShape, execution_fields
from primus_ext.specs import ExecutionSpec, ModelSpec


def rank_shapes(
    model: ModelSpec, execution: ExecutionSpec, *, moe_imbalance: float = DEFAULT_MOE_IMBALANCE
) -> dict[LayerKind, RankShape]:
    """The distinct layer kinds one rank executes, each at its per-rank shape: every registered kind ``present`` in
    ``model`` (``kinds.registry.placed_kinds``), as it builds its shape (``Kind.shape``: its ``layer_arch``, its
    ``shape_fields`` of ``rank_shape.execution_fields``, its traits)."""
    fields = execution_fields(execution, moe_imbalance)
    return {kind.name: kind.shape(model, execution, fields) for kind in placed_kinds() if kind.present(model)}


def layer_params(shape: RankShape, *, impl: Impl = "te") -> int:
    """Parameters one rank holds for this layer kind (``Kind.params``; ``model.params``' docstring gives the rules).

    ``dense``/``moe``: input_layernorm + attention + pre_mlp_layernorm + MLP block.
    ``embedding``: word embeddings only (rope / no positions; learned positions are
    ``position_embedding_params``). ``output``: final layernorm + output projection (what
    ``primus_ext.measure.build`` builds for the kind; a tied single-stage model drops the projection).
    """
    return get_kind(shape.kind).params(shape, impl=impl)


def expert_layer_params(shape: RankShape) -> int:
    """The part of ``layer_params`` that lives in the expert-parallel groups (sharded over expert-DP)."""
    return get_kind(shape.kind).expert_params(shape)


# -- a whole hybrid model (an independent check of the stage sums: tests/projection/test_hybrid_stages.py) --
def hybrid_symbol_params(model: ModelSpec, execution: ExecutionSpec) -> dict[str, int]:
    """Parameters one rank holds for one layer of each symbol in ``model.hybrid_layer_pattern`` (TE spec):
    ``M`` the ``MambaLayer``; ``*`` input norm + self-attention (GQA or MLA); ``-`` pre-MLP norm + dense MLP;
    ``E`` pre-MLP norm + router + local experts + shared experts (mamba_layer_specs.py ``mamba_stack_spec``)."""
    shapes = rank_shapes(model, execution)
    return {symbol: get_kind(kind).params(shapes[kind]) for symbol, kind in symbol_kinds().items()
            if symbol in model.hybrid_layer_pattern}


def hybrid_stage_params(model: ModelSpec, execution: ExecutionSpec) -> tuple[int, ...]:
    """Parameters each pipeline rank holds (one TP / EP rank of it): its slice of the pattern
    (``hybrid.stage_patterns``), the embedding on the first, the final norm + output layer on the last (shared with
    the embedding when tied and PP = 1)."""
    shapes = rank_shapes(model, execution)
    per = hybrid_symbol_params(model, execution)
    stages = stage_patterns(model.hybrid_layer_pattern, execution.pp, first=execution.decoder_first_pipeline_num_layers,
                            last=execution.decoder_last_pipeline_num_layers,
                            vpp=execution.virtual_pipeline_model_parallel_size)
    totals = [sum(per[s] for s in stage) for stage in stages]
    totals[0] += embedding_params(shapes["embedding"])
    output = output_params(shapes["output"])
    if not model.untie_embeddings_and_output_weights and len(stages) == 1:
        output -= embedding_params(shapes["embedding"])
    totals[-1] += output
    return tuple(totals)


# -- a hybrid model's layer pattern -----------------------------------------------------------------------------------
def symbols() -> str:
    """Every legal layer symbol: those of the registered kinds (``kinds.registry.symbol_kinds``), in their order."""
    return "".join(symbol_kinds())


def allocate_layers(total: int, attention_ratio: float = 0.0, mlp_ratio: float = 0.0,
                    override: str | None = None) -> str:
    """The layer pattern megatron-core's ``allocate_layers`` builds: attention layers evenly spaced (each
    section of Mamba layers rounded at .5), then MLP layers evenly among the remaining Mamba ones; an
    ``override`` pattern replaces it when its per-symbol counts agree with the ratios' (or no ratio is set)."""
    if total <= 0:
        raise HybridPatternError(f"num_layers must be positive, got {total}")
    if not (0.0 <= attention_ratio <= 1.0 and 0.0 <= mlp_ratio <= 1.0 and attention_ratio + mlp_ratio <= 1.0):
        raise HybridPatternError(f"hybrid_attention_ratio {attention_ratio} + hybrid_mlp_ratio {mlp_ratio} "
                                 "must each lie in [0, 1] and sum to at most 1")
    layers = [MAMBA] * total
    n_attention = round(total * attention_ratio)
    n_mamba = total - n_attention
    section = n_mamba / (n_attention + 1)  # Mamba layers between consecutive attention layers
    budget = section
    for i in range(total):
        if budget < 0.5:
            layers[i] = ATTENTION
            budget += section
        else:
            budget -= 1
    n_mlp = round(total * mlp_ratio)
    if n_mlp > 0:
        per_mlp = (n_mamba - n_mlp) / n_mlp
        budget = per_mlp
        for i in range(total):
            if layers[i] == MAMBA:
                if budget < 0.5:
                    layers[i] = MLP
                    budget += per_mlp
                else:
                    budget -= 1
    auto = "".join(layers)
    if override is None:
        return auto
    if len(override) != total:
        raise HybridPatternError(f"hybrid_override_pattern has {len(override)} layers, num_layers is {total}")
    legal = symbols()
    bad = sorted(set(override) - set(legal))
    if bad:
        raise HybridPatternError(f"hybrid_override_pattern symbol(s) {''.join(bad)} are not one of {' '.join(legal)}")
    if (attention_ratio > 0 or mlp_ratio > 0) and any(override.count(s) != auto.count(s) for s in legal):
        raise HybridPatternError("hybrid_override_pattern's layer counts differ from those hybrid_attention_ratio "
                                 f"/ hybrid_mlp_ratio allocate ({auto})")
    return override
