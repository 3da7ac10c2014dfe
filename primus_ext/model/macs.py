"""Multiply-accumulates per token of one layer's parts: the terms of the model FLOPs (``model.flops``, whose
docstring gives the convention and the sources).

    >>> attention_linear_macs(model) + attention_core_macs(model, seq_length=8192) + dense_mlp_macs(model)

A leaf of the model layer: ``flops.flops_breakdown`` and the hybrid kinds' ``Kind.model_macs`` sum these. Pure and
torch-free.
"""

from __future__ import annotations

from primus_ext.specs import ModelSpec

FLOPS_PER_MAC = 2


def attention_linear_macs(model: ModelSpec) -> float:
    """Multiply-adds per token of one layer's attention projections (q, k, v, out)."""
    h, a = model.hidden_size, model.num_attention_heads
    if model.multi_latent_attention:
        qk = model.qk_head_dim + model.qk_pos_emb_head_dim
        q = model.q_lora_rank * (h + a * qk) if model.q_lora_rank else h * a * qk
        kv = h * (model.kv_lora_rank + model.qk_pos_emb_head_dim)
        kv += model.kv_lora_rank * a * (model.qk_head_dim + model.v_head_dim)
        return q + kv + a * model.v_head_dim * h
    d, g = model.kv_channels, model.num_query_groups
    return h * a * d + 2 * h * g * d + a * d * h


def attention_core_macs(model: ModelSpec, seq_length: int, *, causal: bool = True) -> float:
    """Multiply-adds per token of QK^T and AV (causal masks half of the score matrix)."""
    a = model.num_attention_heads
    if model.multi_latent_attention:
        width = (model.qk_head_dim + model.qk_pos_emb_head_dim) + model.v_head_dim
    else:
        width = 2 * model.kv_channels
    return seq_length * a * width * (0.5 if causal else 1.0)


def dense_mlp_macs(model: ModelSpec) -> float:
    return model.hidden_size * model.ffn_hidden_size * (3 if model.gated else 2)


def moe_mlp_macs(model: ModelSpec) -> float:
    """Active routed experts (topk) + shared experts (+ latent MoE's two projections), per token; routed experts
    read and write ``moe_latent_size`` features under latent MoE, hidden otherwise."""
    per_proj = 3 if model.gated else 2
    width = model.moe_latent_size or model.hidden_size
    routed = model.moe_router_topk * width * model.expert_ffn_hidden_size * per_proj
    shared = model.hidden_size * (model.moe_shared_expert_intermediate_size or 0) * per_proj
    latent = 2 * model.hidden_size * (model.moe_latent_size or 0)
    return routed + shared + latent


def logits_macs(model: ModelSpec) -> float:
    return model.hidden_size * model.padded_vocab_size(1)
