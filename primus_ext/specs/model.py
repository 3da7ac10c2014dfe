"""The model architecture: what is computed, independent of how it is parallelised.

Field names follow Megatron's argument names. ``ModelSpec`` is frozen; build it through the recipe
loader (``primus_ext.recipe``) which resolves defaults (``num_query_groups``, ``kv_channels``,
``moe_layer_freq``) and validates it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Activation = Literal["swiglu", "gelu", "squared_relu", "geglu"]
Normalization = Literal["RMSNorm", "LayerNorm"]


GATED_ACTIVATIONS = ("swiglu", "geglu")
"""Activations of gated linear units: the MLP's first projection makes a gate and a value half (Shazeer 2020,
"GLU Variants Improve Transformer")."""


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer (dense or MoE, MHA/GQA or MLA)."""

    name: str = "model"
    """Free-form label (the model preset's file stem or the recipe's model name)."""
    num_layers: int
    """Decoder layers (MTP layers are counted separately in ``mtp_num_layers``)."""
    hidden_size: int
    ffn_hidden_size: int
    """Dense MLP intermediate size (per gate/up projection for gated activations)."""
    num_attention_heads: int
    num_query_groups: int
    """KV heads (== num_attention_heads for MHA). The loader resolves Megatron's ``None``."""
    kv_channels: int
    """Per-head dimension (hidden_size / num_attention_heads unless set)."""
    vocab_size: int
    """Unpadded vocabulary; padding to ``make_vocab_size_divisible_by * TP`` is done per execution."""
    vocab_source: str = "vocab_size"
    """Where ``vocab_size`` came from: ``vocab_size``, ``tokenizer <id>``, Primus's mock-data NullTokenizer, or
    ``assumed`` (an unknown tokenizer; the recipe's warnings say so)."""
    make_vocab_size_divisible_by: int = 128
    max_position_embeddings: int = 4096
    activation: Activation = "swiglu"
    normalization: Normalization = "RMSNorm"
    add_bias_linear: bool = False
    add_qkv_bias: bool = False
    qk_layernorm: bool = False
    untie_embeddings_and_output_weights: bool = True
    position_embedding_type: Literal["rope", "learned_absolute", "none"] = "rope"
    window_size: tuple[int, int] | None = None
    """Sliding-window attention (left, right) for the layers that use it; ``None`` = full."""
    window_attn_skip_freq: int = 0
    """Megatron's ``window_attn_skip_freq``: every N-th layer uses full attention, the others the
    sliding window (GPT-OSS: 2, alternating). 0 = every layer uses ``window_size``."""

    # --- mixture of experts -------------------------------------------------------------------
    num_experts: int | None = None
    """Routed experts per MoE layer; ``None`` for a dense model."""
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    """Intermediate size of one routed expert (defaults to ffn_hidden_size)."""
    moe_shared_expert_intermediate_size: int | None = None
    """Total intermediate size of the shared experts (num_shared * moe_ffn_hidden_size)."""
    moe_latent_size: int | None = None
    """Latent MoE (megatron-core ``moe_latent_size``, core_v0.16.0+ transformer_config.py; Nemotron-3 Super / Ultra):
    ``fc1_latent_proj`` projects the routed tokens from hidden to this width before dispatch, the routed experts'
    fc1 input / fc2 output are this width, the EP all-to-all moves it, ``fc2_latent_proj`` projects back. The router
    and the shared experts stay at hidden. ``None``: no latent projection."""
    moe_shared_expert_gate: bool = False
    """A sigmoid gate on the shared experts' output (megatron-core ``moe_shared_expert_gate``, Qwen2-MoE):
    one ``1 x hidden`` weight per MoE layer (``SharedExpertMLP.gate_weight``)."""
    moe_layer_pattern: tuple[bool, ...] = ()
    """Per decoder layer: True where the layer is MoE. Resolved from Megatron's ``moe_layer_freq``
    (an int N = every N-th layer, or a list / ``"([0]*3+[1]*58)"`` expression). Empty for dense."""
    moe_router_num_groups: int | None = None
    """Group-limited routing: experts split into this many equal contiguous groups (megatron-core
    TransformerConfig ``moe_router_num_groups``). Only takes effect with ``moe_router_group_topk``
    (megatron-core ignores it otherwise). DeepSeek-V3 (arXiv:2412.19437 sec. 2.1.2, "node-limited
    routing"): 8 groups, one per node of its EP64 training layout."""
    moe_router_group_topk: int | None = None
    """Groups each token may draw its top-k experts from (megatron-core ``moe_router_group_topk``);
    ``None`` = unrestricted routing. DeepSeek-V3: M = 4 of 8 groups (Hugging Face config
    ``n_group: 8, topk_group: 4``)."""

    # --- multi-latent attention (DeepSeek) ----------------------------------------------------
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    """``None`` = no query compression (full q projection)."""
    kv_lora_rank: int = 512
    qk_head_dim: int = 128
    qk_pos_emb_head_dim: int = 64
    v_head_dim: int = 128

    mtp_num_layers: int = 0
    """Multi-token-prediction depth (DeepSeek-V3 uses 1)."""
    mtp_use_repeated_layer: bool = False
    """One MTP layer applied at every depth (megatron-core ``mtp_use_repeated_layer``, core_v0.17.0+
    multi_token_prediction.py: "only 1 layer is created and applied mtp_num_layers times"): its parameters are held
    once, its compute runs ``mtp_num_layers`` times."""
    mtp_layer_pattern: str = ""
    """A hybrid model's layers of one MTP depth (megatron-core ``ParsedHybridPattern.mtp_pattern``: the part after
    each ``/`` of the hybrid layer pattern, e.g. ``*E``); "" for a GPT model (one decoder layer per depth)."""

    # --- hybrid Mamba models (megatron-core MambaModel; ``primus_ext.model.hybrid``) ---------------------------
    hybrid_layer_pattern: str = ""
    """One symbol per decoder layer as megatron-core's ``allocate_layers`` resolves ``hybrid_override_pattern`` /
    ``hybrid_attention_ratio`` / ``hybrid_mlp_ratio``: ``M`` Mamba-2, ``*`` attention, ``-`` MLP, ``E`` MoE.
    Empty for a GPT model (every layer attention + MLP)."""
    mamba_num_heads: int = 0
    """Mamba-2 heads, resolved (megatron's ``None`` = 2 * hidden / ``mamba_head_dim``); 0 without Mamba layers."""
    mamba_head_dim: int = 64
    mamba_num_groups: int = 8
    mamba_state_dim: int = 128
    """TransformerConfig defaults (megatron-core 0.16.1 transformer_config.py ``mamba_*``)."""
    kind_dims: tuple[tuple[str, Any], ...] = ()
    """(kind name, its own hyper-parameter record) for each layer kind of the model that reads recipe keys of its own
    (``model.kinds.base.KindDims``: ``Kind.read_dims`` builds it, ``Kind.dims`` reads it back)."""

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts)

    @property
    def mtp_weight_copies(self) -> int:
        """MTP layers whose parameters the model holds: one under ``mtp_use_repeated_layer``, else one per depth."""
        return min(1, self.mtp_num_layers) if self.mtp_use_repeated_layer else self.mtp_num_layers

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layer_pattern)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def expert_ffn_hidden_size(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    @property
    def gated(self) -> bool:
        """True when the MLP's first projection is doubled (gate + up)."""
        return self.activation in GATED_ACTIVATIONS

    def padded_vocab_size(self, tensor_parallel: int = 1) -> int:
        """Megatron pads the vocabulary to a multiple of ``make_vocab_size_divisible_by * TP``."""
        multiple = self.make_vocab_size_divisible_by * tensor_parallel
        return -(-self.vocab_size // multiple) * multiple
