"""Model FLOPs vs the published formula (Narayanan et al. 2021) and published TFLOP/s / tok/s rows."""

import csv
from pathlib import Path

import pytest

from primus_ext.model.flops import flops_breakdown, model_flops_per_step, model_flops_per_token
from primus_ext.specs import ModelSpec

VALIDATION = Path("/work/shared/validation/measured_throughput.csv")

LLAMA3_8B = ModelSpec(num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                      num_query_groups=8, kv_channels=128, vocab_size=128256)
QWEN3_235B = ModelSpec(num_layers=94, hidden_size=4096, ffn_hidden_size=12288, num_attention_heads=64,
                       num_query_groups=4, kv_channels=128, vocab_size=151936, num_experts=128, moe_router_topk=8,
                       moe_ffn_hidden_size=1536, moe_layer_pattern=(True,) * 94, qk_layernorm=True)
DEEPSEEK_V3 = ModelSpec(num_layers=61, hidden_size=7168, ffn_hidden_size=18432, num_attention_heads=128,
                        num_query_groups=128, kv_channels=128, vocab_size=129280, num_experts=256, moe_router_topk=8,
                        moe_ffn_hidden_size=2048, moe_shared_expert_intermediate_size=2048,
                        moe_layer_pattern=(False,) * 3 + (True,) * 58, multi_latent_attention=True, q_lora_rank=1536,
                        kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128, mtp_num_layers=1)
GPT3_175B = ModelSpec(num_layers=96, hidden_size=12288, ffn_hidden_size=49152, num_attention_heads=96,
                      num_query_groups=96, kv_channels=128, vocab_size=51200, activation="gelu")


def test_megatron_paper_equation_for_gpt():
    """72*B*s*l*h^2*(1 + s/(6h) + V/(12hl)): MHA, 4h GeLU MLP, full attention (no causal halving)."""
    b, s, layers, h, v = 4, 2048, 96, 12288, 51200
    paper = 72 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (12 * h * layers))
    ours = model_flops_per_step(GPT3_175B, s, b, causal=False)
    assert ours == pytest.approx(paper, rel=1e-12)


def test_causal_halves_only_the_score_part():
    full = flops_breakdown(LLAMA3_8B, 8192, causal=False)
    causal = flops_breakdown(LLAMA3_8B, 8192)
    assert causal.attention_core == pytest.approx(full.attention_core / 2)
    assert causal.mlp == full.mlp and causal.logits == full.logits


def _rows(model_name, seq):
    with VALIDATION.open() as fh:
        for row in csv.DictReader(fh):
            if (row["model"] == model_name and row["seq_len"] == str(seq) and row["tflops_per_gpu"]
                    and row["tokens_per_sec_per_gpu"] and "Megatron-Bridge" in row["source"]):
                yield float(row["tflops_per_gpu"]) * 1e12 / float(row["tokens_per_sec_per_gpu"])


@pytest.mark.skipif(not VALIDATION.exists(), reason="shared validation set not mounted")
@pytest.mark.parametrize("name,model,seq", [
    ("Llama3-8B", LLAMA3_8B, 8192), ("Qwen3-235B-A22B", QWEN3_235B, 4096), ("DeepSeek-V3", DEEPSEEK_V3, 4096),
])
def test_per_token_flops_match_published_rows(name, model, seq):
    """Megatron-Bridge's "Model TFLOP/s/GPU" / "tokens/s/GPU" is its FLOPs per token."""
    published = list(_rows(name, seq))
    assert published, f"no {name} rows"
    ours = model_flops_per_token(model, seq)
    for value in published:
        assert ours == pytest.approx(value, rel=0.02)  # rounding of the published integers


def test_moe_counts_active_experts_only():
    dense_equiv = model_flops_per_token(QWEN3_235B, 4096)
    more_experts = model_flops_per_token(
        ModelSpec(**{**QWEN3_235B.__dict__, "num_experts": 256}), 4096)
    assert more_experts == pytest.approx(dense_equiv)  # total experts do not matter, topk does
    top4 = ModelSpec(**{**QWEN3_235B.__dict__, "moe_router_topk": 4})
    assert model_flops_per_token(top4, 4096) < dense_equiv
