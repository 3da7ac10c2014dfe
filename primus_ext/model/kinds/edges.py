"""The pipeline's edge kinds: ``embedding`` (first stage) and ``output`` (last stage: final norm, logits, loss).

Neither is a ``TransformerLayer``: no recompute, no attention, not captured by per-layer CUDA graphs.
"""

from __future__ import annotations

from primus_ext.model import params as P
from primus_ext.model import roofline as R
from primus_ext.model.kinds.base import Kind, KindComm, no_recompute
from primus_ext.model.memory import activations as A
from primus_ext.model.rank_shape import layer_arch


class EdgeKind(Kind):
    """What the two edges share: every model has them, at the padded vocabulary, never recomputed."""

    def present(self, model) -> bool:
        return True

    def layer_arch(self, model, execution):
        return layer_arch(model, moe=False, vocab=model.padded_vocab_size(execution.tp))

    def shape_fields(self, fields: dict) -> dict:
        return dict(no_recompute(fields), attention_kernel="fused")  # they do not attend


class EmbeddingKind(EdgeKind):
    """``embedding``: the word-embedding lookup (``LanguageModelEmbedding``, rope: no position table)."""

    name = "embedding"
    takes_sequence_split = False  # its input is token ids; its output is scattered under SP

    def params(self, shape, *, impl="te") -> int:
        return P.embedding_params(shape)

    def roofline(self, parts, shape, gpu) -> None:
        R.embedding_parts(parts, shape, gpu)

    def fwd_flops_estimate(self, shape) -> float:
        return float(shape.tokens * shape.arch.hidden_size)

    def saved(self, shape, impl) -> dict[str, float]:
        return {}  # a lookup keeps only its integer ids (megatron-core saves no activation here)

    def comm(self, shape, sequence_parallel) -> KindComm:
        # VocabParallelEmbedding: the partial lookups summed (reduce-scattered onto the SP split); backward: none
        return KindComm(fwd=("reduce_scatter" if sequence_parallel else "all_reduce",), bwd=())


class OutputKind(EdgeKind):
    """``output``: final layernorm + the output projection + the cross-entropy loss."""

    name = "output"

    def params(self, shape, *, impl="te") -> int:
        return P.output_params(shape)

    def roofline(self, parts, shape, gpu) -> None:
        R.output_parts(parts, shape, gpu)

    def fwd_flops_estimate(self, shape) -> float:
        return 2.0 * shape.tokens * shape.arch.hidden_size * shape.arch.vocab_size / shape.tp

    def saved(self, shape, impl) -> dict[str, float]:
        return A.output_saved(shape, impl)

    def comm(self, shape, sequence_parallel) -> KindComm:
        # ColumnParallelLinear: gather the SP input; backward reduces the input's gradient
        return KindComm(fwd=("all_gather",) if sequence_parallel else (),
                        bwd=("reduce_scatter" if sequence_parallel else "all_reduce",))


KINDS = (EmbeddingKind(), OutputKind())
"""What the registry registers from this module (``kinds.registry``)."""
