"""Closed-form parameter counts against hand-derived sums and published model sizes.

The exact comparison with the real megatron-core modules lives in ``test_params_megatron.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus_ext.model.layers import layer_params
from primus_ext.model.params import position_embedding_params
from primus_ext.model.rank_shape import LayerArch, RankShape

LLAMA3_8B = LayerArch(hidden_size=4096, num_attention_heads=32, num_query_groups=8, kv_channels=128,
                      ffn_hidden_size=14336)
DSV3_MLA = dict(multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
                qk_pos_emb_head_dim=64, v_head_dim=128, qk_layernorm=True)


def _total(arch: LayerArch, layers: int, vocab: int, *, moe_arch: LayerArch | None = None, moe_layers: int = 0,
           impl: str = "te") -> int:
    dense = layer_params(RankShape(kind="dense", arch=arch), impl=impl) * layers
    moe = layer_params(RankShape(kind="moe", arch=moe_arch), impl=impl) * moe_layers if moe_arch else 0
    edge = replace(arch, vocab_size=vocab)
    emb = layer_params(RankShape(kind="embedding", arch=edge)) + layer_params(RankShape(kind="output", arch=edge))
    return dense + moe + emb  # the output kind holds the final norm


def test_llama3_8b_matches_published_count():
    # Hugging Face's meta-llama/Meta-Llama-3-8B: 8,030,261,248 parameters (untied embeddings).
    assert _total(LLAMA3_8B, 32, 128256) == 8_030_261_248


def test_dense_layer_hand_sum_with_tp_and_biases():
    arch = replace(LLAMA3_8B, normalization="LayerNorm", add_bias_linear=True, qk_layernorm=True)
    tp = 4
    h, kv = 4096, 128
    qkv = h * 48 * kv // tp + 48 * kv // tp
    proj = h * h // tp + h  # row-parallel bias is not split
    fc1 = h * 2 * 14336 // tp + 2 * 14336 // tp
    fc2 = 14336 // tp * h + h
    norms = 2 * 2 * h + 2 * 2 * kv  # LayerNorm weight+bias; per-head q/k norms
    assert layer_params(RankShape(kind="dense", arch=arch, tp=tp)) == qkv + proj + fc1 + fc2 + norms


def test_gelu_mha_gpt2_small():
    # GPT-2 small (124,439,808 in HF with tied embeddings, learned positions, LayerNorm, biases).
    arch = LayerArch(hidden_size=768, num_attention_heads=12, num_query_groups=12, kv_channels=64,
                     ffn_hidden_size=3072, activation="gelu", normalization="LayerNorm", add_bias_linear=True)
    layers = layer_params(RankShape(kind="dense", arch=arch)) * 12
    emb = layer_params(RankShape(kind="embedding", arch=replace(arch, vocab_size=50257)))
    pos = position_embedding_params(1024, 768, "learned_absolute")
    assert layers + emb + pos + 2 * 768 == 124_439_808


def test_deepseek_v3_total_is_671b():
    # DeepSeek-V3 report: 671B total parameters (without the 14B MTP module). Megatron keeps the
    # router's score-correction bias as a buffer (HF counts 256 per MoE layer: 14,848 in all).
    dense = LayerArch(hidden_size=7168, num_attention_heads=128, num_query_groups=128, kv_channels=128,
                      ffn_hidden_size=18432, **DSV3_MLA)
    moe = replace(dense, ffn_hidden_size=0, num_experts=256, moe_router_topk=8, moe_ffn_hidden_size=2048,
                  moe_shared_expert_intermediate_size=2048)
    total = _total(dense, 3, 129280, moe_arch=moe, moe_layers=58) + 58 * 256
    assert total == pytest.approx(671.0e9, rel=1.5e-3)
    assert total == 671_026_419_200  # HF safetensors index of deepseek-ai/DeepSeek-V3 minus MTP layer


def test_moe_split_over_ep_etp_tp():
    arch = LayerArch(hidden_size=1024, num_attention_heads=16, num_query_groups=4, kv_channels=64,
                     ffn_hidden_size=0, num_experts=16, moe_router_topk=2, moe_ffn_hidden_size=512,
                     moe_shared_expert_intermediate_size=1024)
    base = RankShape(kind="moe", arch=arch)
    split = RankShape(kind="moe", arch=arch, tp=2, ep=4, etp=1)
    h = 1024
    attn_full = h * 24 * 64 + 16 * 64 * h
    experts_full = 16 * 3 * h * 512
    shared_full = 3 * h * 1024
    router = 16 * h
    assert layer_params(base) == 2 * h + attn_full + router + experts_full + shared_full
    assert layer_params(split) == 2 * h + attn_full // 2 + router + experts_full // 4 + shared_full // 2


def test_mla_local_splits_down_projections_te_does_not():
    arch = LayerArch(hidden_size=1024, num_attention_heads=16, num_query_groups=16, kv_channels=64,
                     ffn_hidden_size=2048, **dict(DSV3_MLA, q_lora_rank=256, kv_lora_rank=128))
    local = layer_params(RankShape(kind="dense", arch=arch, tp=2), impl="local")
    te = layer_params(RankShape(kind="dense", arch=arch, tp=2))
    assert te - local == 1024 * (256 + 128 + 64) // 2
    no_q_lora = replace(arch, q_lora_rank=None)
    q_lora_part = 1024 * 256 + 256 * 16 * 192 + 256  # down + up + q_layernorm
    assert layer_params(RankShape(kind="dense", arch=arch)) - layer_params(
        RankShape(kind="dense", arch=no_q_lora)) == q_lora_part - 1024 * 16 * 192
