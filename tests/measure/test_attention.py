"""The GPU stand-in for TE's fused attention computes what megatron's local attention computes."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from archs import GQA, MLA

from primus_ext.measure.attention import sdpa_core_attention_class, window_keep_mask
from primus_ext.measure.build import build_layer, uses_torch_stand_ins
from primus_ext.model.rank_shape import RankShape

CASES = {
    "gqa": RankShape(kind="dense", arch=GQA, seq_length=64, micro_batch_size=2),
    "mla": RankShape(kind="dense", arch=MLA, seq_length=64),
    "gqa-cp2": RankShape(kind="dense", arch=GQA, seq_length=64, cp=2),  # load-balanced chunks, whole keys
    "gqa-cp4": RankShape(kind="dense", arch=GQA, seq_length=128, cp=4),
    "gqa-window": RankShape(kind="dense", arch=replace(GQA, window_size=(8, 0)), seq_length=64),
}


@pytest.mark.parametrize("name", list(CASES))
def test_sdpa_matches_unfused_local_attention(world1, name):
    shape = CASES[name]
    built = build_layer(shape, device=world1, dtype=torch.float32)
    local = built.module.layers[0].self_attention.core_attention
    assert (local.scale_mask_softmax.window_size is not None) == (shape.arch.window_size is not None)
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
    # the same module state with the fused kernel (build.py puts the CP stand-in inside it)
    base = type(local).__bases__[0] if shape.cp > 1 else type(local)
    local.__class__ = sdpa_core_attention_class(base, shape.cp)
    got = local(q, k, v, mask)
    assert got.shape == want.shape == (sq, b, heads * v_dim)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_window_mask_keeps_the_last_w_plus_one_keys():
    keep = window_keep_mask(6, 6, (2, 0), torch.device("cpu"))
    assert keep[5].tolist() == [False, False, False, True, True, True]
    assert keep[0].tolist() == [True] + [False] * 5


def test_stand_ins_only_on_gpu_without_te(world1):
    assert uses_torch_stand_ins(torch.device("cuda"), use_te=False)
    assert not uses_torch_stand_ins(torch.device("cuda"), use_te=True)
    assert not uses_torch_stand_ins(torch.device("cpu"), use_te=False)
    built = build_layer(CASES["gqa"], device=world1)
    assert built.spec_kind == "local"
    assert "SDPA" not in type(built.module.layers[0].self_attention.core_attention).__name__
