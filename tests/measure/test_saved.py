"""Bytes saved for backward: positive, linear in seq and MBS, and the unfused attention's s^2 term; storages
told apart by identity, not by an address a freed storage handed back to the allocator."""

from __future__ import annotations

import pytest
import torch
from archs import GQA, MLA, MOE

from primus_ext.measure.build import BuiltLayer, build_layer
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


class _ReusedAddress(torch.nn.Module):
    """Saves ``n`` floats at one address, optionally frees that storage (as ``CheckpointWithoutOutput`` does
    with ``resize_(0)``), then saves ``n`` floats in another storage at the same address, and a view of it.
    ``torch.frombuffer`` over one host buffer pins the address (the allocator only tends to reuse it)."""

    def __init__(self, n: int, free_first: bool):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.memory = bytearray(4 * n)
        self.free_first = free_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        first = torch.frombuffer(self.memory, dtype=torch.float32)
        self.weight * first  # packs ``first``; the product is not part of the output
        if self.free_first:
            first.set_()  # the saved storage holds nothing at backward
        second = torch.frombuffer(self.memory, dtype=torch.float32)
        assert second.data_ptr() == torch.frombuffer(self.memory, dtype=torch.float32).data_ptr()
        out = self.weight * second  # packs ``second``: another storage at that address
        half = self.weight[: n // 2] * second[n // 2 :]  # packs a view of ``second``'s storage
        out = torch.cat([out[: n // 2] + half, out[n // 2 :]])  # add and cat save nothing
        return out * x  # packs ``out`` and the differentiable input ``x``


@pytest.mark.parametrize("free_first", [True, False])
def test_freed_storage_address_reused_counts_the_new_storage_once(free_first):
    """``second`` (and its view) once, ``out`` and ``x``: 3 x n floats. A freed ``first`` counts 0 and must
    not hide ``second``; a live ``first`` aliases ``second``'s memory and counts with it."""
    n = 1024
    built = BuiltLayer(shape=RankShape(kind="dense", arch=GQA), module=_ReusedAddress(n, free_first),
                       device=torch.device("cpu"), dtype=torch.float32, config=None, distributed=False,
                       make_inputs=lambda: {"x": torch.ones(n, requires_grad=True)})
    assert saved_bytes(built) == 3 * 4 * n
