"""Bytes saved for backward: positive, linear in seq and MBS, and the unfused attention's s^2 term."""

from __future__ import annotations

import pytest
from measure_archs import GQA, MLA, MOE

from primus_ext.measure.build import build_layer
from primus_ext.measure.saved import saved_bytes
from primus_ext.model.rank_shape import RankShape

SOFTMAX_BYTES_PER_SCORE = 4 + 2
"""megatron's unfused softmax (attention_softmax_in_fp32) saves its fp32 output, and the probs
cast back to bf16 are saved again by the probs x V bmm (transformer/dot_product_attention.py)."""

ARCHS = {"dense": ("dense", GQA), "moe-shared": ("moe", MOE), "mla": ("dense", MLA)}


def _saved(kind, arch, seq, mbs, recompute="none") -> int:
    shape = RankShape(kind=kind, arch=arch, seq_length=seq, micro_batch_size=mbs, recompute=recompute,
                      precision="bf16")
    return saved_bytes(build_layer(shape, device="cpu"))


@pytest.mark.parametrize("name", list(ARCHS))
def test_linear_in_seq_and_mbs_with_core_attention_recomputed(world1, name):
    """Without the s x s score tensor (selective core_attn recompute) activations are linear."""
    kind, arch = ARCHS[name]
    base = _saved(kind, arch, 128, 1, "selective")
    assert base > 0
    assert _saved(kind, arch, 256, 1, "selective") / base == pytest.approx(2.0, rel=0.05)
    assert _saved(kind, arch, 128, 2, "selective") / base == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize("name", list(ARCHS))
def test_quadratic_term_is_the_attention_scores(world1, name):
    """saved(2s) - 2 saved(s) is exactly the softmax's b x heads x s^2 storage, and MBS stays linear."""
    kind, arch = ARCHS[name]
    s = 128
    one, two = _saved(kind, arch, s, 1), _saved(kind, arch, 2 * s, 1)
    heads = arch.num_attention_heads
    assert two - 2 * one == heads * ((2 * s) ** 2 - 2 * s**2) * SOFTMAX_BYTES_PER_SCORE
    assert _saved(kind, arch, s, 2) / one == pytest.approx(2.0, rel=0.05)


def test_full_recompute_keeps_only_the_layer_input(world1):
    shape = RankShape(kind="dense", arch=GQA, seq_length=128, micro_batch_size=2, recompute="full")
    input_bytes = 128 * 2 * GQA.hidden_size * 2  # [s, b, h] bf16
    assert saved_bytes(build_layer(shape, device="cpu")) == input_bytes


def test_context_parallel_rank_attends_to_the_whole_sequence(world1):
    """CP=2 at seq 2s vs CP=1 at seq s: same s local queries, twice the keys. The extra storage is
    exactly the wider score rectangle plus the wider (GQA-expanded) K and V."""
    s, heads, kv = 256, GQA.num_attention_heads, GQA.kv_channels
    cp2 = build_layer(RankShape(kind="dense", arch=GQA, seq_length=2 * s, cp=2), device="cpu")
    one = _saved("dense", GQA, s, 1)
    scores = heads * s * (2 * s - s) * SOFTMAX_BYTES_PER_SCORE
    keys_values = 2 * (2 * s - s) * heads * kv * 2  # [sk, b, heads, kv] bf16, K and V
    assert saved_bytes(cp2) - one == scores + keys_values
    assert cp2.param_count == build_layer(RankShape(kind="dense", arch=GQA, seq_length=s), device="cpu").param_count
    assert any(n.startswith("CP=2: local queries attend to the whole sequence") for n in cp2.notes)
