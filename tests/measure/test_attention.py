"""The GPU stand-in for TE's fused attention computes what megatron's local attention computes."""

from __future__ import annotations

import pytest
import torch
from measure_archs import GQA, MLA

from primus_ext.measure.attention import sdpa_core_attention_class
from primus_ext.measure.build import build_layer, cp_core_attention_class
from primus_ext.model.rank_shape import RankShape

CASES = {
    "gqa": RankShape(kind="dense", arch=GQA, seq_length=64, micro_batch_size=2),
    "mla": RankShape(kind="dense", arch=MLA, seq_length=64),
    "gqa-cp2": RankShape(kind="dense", arch=GQA, seq_length=64, cp=2),  # rectangular load-balanced mask
}


@pytest.mark.parametrize("name", list(CASES))
def test_sdpa_matches_unfused_local_attention(world1, name):
    shape = CASES[name]
    built = build_layer(shape, device=world1, dtype=torch.float32)
    local = built.module.layers[0].self_attention.core_attention
    heads, groups = local.num_attention_heads_per_partition, local.num_query_groups_per_partition
    a = shape.arch
    qk_dim = a.qk_head_dim + a.qk_pos_emb_head_dim if a.multi_latent_attention else a.kv_channels
    v_dim = a.v_head_dim if a.multi_latent_attention else a.kv_channels
    kv_heads = heads if a.multi_latent_attention else groups
    sq, b = shape.local_seq, shape.micro_batch_size
    torch.manual_seed(0)
    q = torch.randn(sq, b, heads, qk_dim)
    k, v = torch.randn(sq, b, kv_heads, qk_dim), torch.randn(sq, b, kv_heads, v_dim)
    mask = built.make_inputs()["attention_mask"]
    want = local(q, k, v, mask)
    # the same module state with the fused kernel; build.py's order: the CP stand-in wraps it
    if shape.cp > 1:
        local.__class__ = cp_core_attention_class(sdpa_core_attention_class(type(local).__bases__[0]), shape.cp)
    else:
        local.__class__ = sdpa_core_attention_class(type(local))
    got = local(q, k, v, mask)
    assert got.shape == want.shape == (sq, b, heads * v_dim)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_build_uses_sdpa_only_on_gpu_without_te(world1):
    built = build_layer(CASES["gqa"], device=world1)
    assert built.spec_kind == "local"
    assert "SDPA" not in type(built.module.layers[0].self_attention.core_attention).__name__
