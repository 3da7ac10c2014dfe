"""Parameters one rank holds for one layer kind, in closed form (megatron-core 0.16.1).

Usage::

    from primus_ext.model.layers import layer_params, rank_shapes
    shapes = rank_shapes(model, execution)
    layer_params(shapes["dense"])               # per TP/EP rank (TE spec layout, the default)
    layer_params(shapes["dense"], impl="local")  # local spec in a real TP group

A leaf of the model layer: the formulas each ``Kind.params`` hook sums; ``model.layers.layer_params`` asks the
shape's kind.

Every count follows the module that megatron-core builds (file:class in the comments):

* norms: ``WrappedTorchNorm`` (RMSNorm: weight) / ``FusedLayerNorm`` (LayerNorm: weight + bias), never
  split by TP. The local spec keeps ``input_layernorm`` and ``pre_mlp_layernorm`` as separate modules;
  the TE spec fuses them into the following linear (``TELayerNormColumnParallelLinear``), same count.
* ``ColumnParallelLinear`` splits the output dim (and its bias) by TP; ``RowParallelLinear`` splits the
  input dim and keeps the full bias on every rank (tensor_parallel/layers.py).
* MLA (transformer/multi_latent_attention.py): the local spec builds ``linear_q_down_proj`` and
  ``linear_kv_down_proj`` as ``ColumnParallelLinear`` (output split by TP, then gathered), the TE spec as
  ``TELinear(parallel_mode='duplicated')`` (full on every rank) - the only place the two specs' counts
  differ, hence ``impl``.
* MoE (transformer/moe): ``TopKRouter.weight`` [experts, hidden] (fp32) + bias with add_bias_linear;
  ``num_experts / EP`` local experts, each an MLP at ``moe_ffn_hidden_size / ETP``; shared experts
  (``SharedExpertMLP``, bias not allowed) at ``moe_shared_expert_intermediate_size / TP``, plus its whole
  ``1 x hidden`` ``gate_weight`` with ``moe_shared_expert_gate``. Latent MoE (``moe_latent_size``, Megatron-LM
  core_v0.16.0+ moe_layer.py): the routed experts' fc1 input and fc2 output are the latent width (experts.py
  ``moe_latent_size``), plus ``fc1_latent_proj`` [latent, hidden] and ``fc2_latent_proj`` [hidden, latent], each a
  ``TELinear(parallel_mode="duplicated")``: whole on every TP rank, a bias each with add_bias_linear.
* embedding: ``VocabParallelEmbedding`` [padded_vocab / TP, hidden] (+ learned absolute positions, not
  split: ``position_embedding_params``). output: ``ColumnParallelLinear`` [padded_vocab / TP, hidden], no
  bias; the ``output`` kind also holds the decoder block's final layernorm. Tied-embedding copies are
  a stage-level matter handled by ``primus_ext.model.memory``.

Pure and torch-free.
"""

from __future__ import annotations

from typing import Literal

from primus_ext.model.rank_shape import LayerArch, RankShape

Impl = Literal["local", "te"]
"""``te`` (default): the Transformer-Engine spec production runs use, which is also what
``primus_ext.measure.build`` builds at per-rank sizes in a one-rank world (MLA down-projections whole).
``local``: the local spec in a real TP group (MLA down-projections column-split)."""

ROUTER_PARAM_BYTES = 4
"""TopKRouter keeps its weight in fp32 whatever params_dtype is (transformer/moe/router.py:53)."""


def norm_params(arch: LayerArch, size: int) -> int:
    """One norm over ``size`` features: RMSNorm has a weight, LayerNorm a weight and a bias."""
    return size * (2 if arch.normalization == "LayerNorm" else 1)


def _mlp_params(arch: LayerArch, ffn: int, split: int, *, bias: bool, width: int = 0) -> int:
    """MLP (fc1 column-parallel, fc2 row-parallel) at intermediate size ``ffn`` split ``split`` ways, reading and
    writing ``width`` features (0: hidden)."""
    h = width or arch.hidden_size
    fc1_out = ffn * (2 if arch.gated else 1) // split
    params = h * fc1_out + (ffn // split) * h
    if bias:
        params += fc1_out + h  # column bias split, row bias full
    return params


def _gqa_params(arch: LayerArch, tp: int) -> int:
    h, kv = arch.hidden_size, arch.kv_channels
    qkv_out = (arch.num_attention_heads + 2 * arch.num_query_groups) * kv // tp
    params = h * qkv_out
    if arch.add_bias_linear or arch.add_qkv_bias:
        params += qkv_out
    if arch.qk_layernorm:
        params += 2 * norm_params(arch, kv)  # per-head q_layernorm and k_layernorm
    params += arch.num_attention_heads * kv // tp * h  # linear_proj
    if arch.add_bias_linear:
        params += h
    return params


def _mla_params(arch: LayerArch, tp: int, impl: Impl) -> int:
    h, heads = arch.hidden_size, arch.num_attention_heads
    q_head = arch.qk_head_dim + arch.qk_pos_emb_head_dim
    down_split = tp if impl == "local" else 1
    if arch.q_lora_rank is None:
        params = h * heads * q_head // tp  # linear_q_proj
    else:
        params = h * arch.q_lora_rank // down_split + arch.q_lora_rank * heads * q_head // tp
        if arch.qk_layernorm:
            params += norm_params(arch, arch.q_lora_rank)
    params += h * (arch.kv_lora_rank + arch.qk_pos_emb_head_dim) // down_split  # linear_kv_down_proj
    params += arch.kv_lora_rank * heads * (arch.qk_head_dim + arch.v_head_dim) // tp  # linear_kv_up_proj
    if arch.qk_layernorm:
        params += norm_params(arch, arch.kv_lora_rank)
    params += heads * arch.v_head_dim // tp * h  # linear_proj
    if arch.add_bias_linear:
        params += h
    return params


def attention_params(shape: RankShape, *, impl: Impl = "te") -> int:
    """Self-attention (GQA/MHA or MLA) parameters on one TP rank, without the input layernorm."""
    if shape.arch.multi_latent_attention:
        return _mla_params(shape.arch, shape.tp, impl)
    return _gqa_params(shape.arch, shape.tp)


def router_params(shape: RankShape) -> int:
    arch = shape.arch
    return arch.num_experts * arch.hidden_size + (arch.num_experts if arch.add_bias_linear else 0)


def expert_params(shape: RankShape) -> int:
    """Routed experts held by one expert rank: ``num_experts / EP`` experts at ``ffn / ETP``."""
    arch = shape.arch
    per_expert = _mlp_params(arch, arch.moe_ffn_hidden_size, shape.etp, bias=arch.add_bias_linear,
                             width=arch.expert_width)
    return shape.local_experts * per_expert


def latent_proj_params(shape: RankShape) -> int:
    """Latent MoE's ``fc1_latent_proj`` + ``fc2_latent_proj``: whole on every rank (``parallel_mode="duplicated"``)."""
    arch = shape.arch
    if not arch.moe_latent_size:
        return 0
    bias = (arch.moe_latent_size + arch.hidden_size) if arch.add_bias_linear else 0
    return 2 * arch.hidden_size * arch.moe_latent_size + bias


def shared_expert_params(shape: RankShape) -> int:
    arch = shape.arch
    if not arch.moe_shared_expert_intermediate_size:
        return 0
    gate = arch.hidden_size if arch.moe_shared_expert_gate else 0  # SharedExpertMLP.gate_weight, 1 x hidden, whole
    return _mlp_params(arch, arch.moe_shared_expert_intermediate_size, shape.tp, bias=False) + gate


def dense_mlp_params(shape: RankShape) -> int:
    """A dense MLP (fc1, fc2), without its norm."""
    arch = shape.arch
    return _mlp_params(arch, arch.ffn_hidden_size, shape.tp, bias=arch.add_bias_linear)


def moe_mlp_params(shape: RankShape) -> int:
    """An MoE block: router + latent projections + local experts + shared experts, without its norm."""
    return router_params(shape) + latent_proj_params(shape) + expert_params(shape) + shared_expert_params(shape)


def decoder_params(shape: RankShape, mlp: int, *, impl: Impl = "te") -> int:
    """A decoder layer: input_layernorm + attention + pre_mlp_layernorm + the MLP block's ``mlp`` parameters."""
    arch = shape.arch
    norms = 2 * norm_params(arch, arch.hidden_size)
    return norms + attention_params(shape, impl=impl) + mlp


def embedding_params(shape: RankShape) -> int:
    """Word embeddings, split over TP by vocabulary rows."""
    return shape.arch.vocab_size // shape.tp * shape.arch.hidden_size


def output_params(shape: RankShape) -> int:
    """The output projection (split over TP by vocabulary rows) + the final layernorm."""
    arch = shape.arch
    return arch.vocab_size // shape.tp * arch.hidden_size + final_norm_params(arch)


def final_norm_params(arch: LayerArch) -> int:
    """The decoder block's final layernorm (on the stage holding the output layer)."""
    return norm_params(arch, arch.hidden_size)


def position_embedding_params(max_position_embeddings: int, hidden_size: int, kind: str) -> int:
    """Learned absolute position embeddings (not TP-split); 0 for rope / none."""
    return max_position_embeddings * hidden_size if kind == "learned_absolute" else 0
