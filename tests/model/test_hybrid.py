"""``model.hybrid``: the layer pattern and its pipeline split as megatron-core 0.16.1 makes them, and the Mamba-2
mixer's FLOPs against a hand count of Dao & Gu 2024's SSD cost."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from primus_ext.model import hybrid as Hy
from primus_ext.model.kinds import get_kind
from primus_ext.model.layers import allocate_layers
from primus_ext.model.rank_shape import LayerArch, RankShape

NEMOTRON_H_8B = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
"""Megatron-LM examples/post_training/modelopt/conf/nvidia/Nemotron-H-8B-Base-8K.sh @d98e8a64."""
NANO = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
"""NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.sh (same tree), = shared/validation/model_archs.csv "Nemotron-3-Nano"."""

ARCH = LayerArch(hidden_size=64, num_attention_heads=4, num_query_groups=2, kv_channels=16, ffn_hidden_size=128,
                 mamba_num_heads=8, mamba_head_dim=4, mamba_num_groups=2, mamba_state_dim=3, mamba_d_conv=4,
                 mamba_chunk_size=5)


@pytest.mark.parametrize("case", [(10, 0.2, 0.0, None), (48, 0.1, 0.0, None), (48, 0.3, 0.0, None),
                                  (10, 0.0, 0.3, None), (48, 0.2, 0.3, None), (48, 0.5, 0.5, None),
                                  (9, 0.0, 0.0, "M*-M*-M*-"), (10, 0.3, 0.2, "MM*M-*M*M-"),
                                  (52, 0.0, 0.0, NANO), (32, 0.25, 0.0, None), (24, 0.25, 0.0, None)])
def test_allocate_layers_equals_megatron_core(case):
    allocation = pytest.importorskip("megatron.core.ssm.mamba_hybrid_layer_allocation")
    total, attention, mlp, override = case
    assert allocate_layers(total, attention, mlp, override) == "".join(
        allocation.allocate_layers(total, attention, mlp, override))


def test_allocate_layers_refuses_what_megatron_core_refuses():
    with pytest.raises(Hy.HybridPatternError, match="52"):
        allocate_layers(51, 0.0, 0.0, NANO)
    with pytest.raises(Hy.HybridPatternError, match="Q"):  # a letter no layer kind registers (X is Kimi-K3's now)
        allocate_layers(3, 0.0, 0.0, "MQM")
    with pytest.raises(Hy.HybridPatternError, match="counts differ"):
        allocate_layers(9, 0.5, 0.0, "M*-M*-M*-")


class _Group:
    def __init__(self, rank: int, size: int):
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


@pytest.mark.parametrize("pattern,pp,first,last", [(NEMOTRON_H_8B, 4, None, None), (NANO, 4, None, None),
                                                   (NANO, 2, None, None), (NANO, 4, 10, None),
                                                   (NANO, 4, None, 16), (NANO, 3, 16, 16), (NEMOTRON_H_8B, 2, 20, 32)])
def test_pipeline_split_equals_mambastack(pattern, pp, first, last):
    """Each rank's slice equals what megatron-core's own ``MambaStack._select_layers_for_pipeline_parallel``
    selects on that rank."""
    pytest.importorskip("torch")
    from primus_ext.measure.mamba_stubs import mamba_modules

    mamba_modules()
    from megatron.core.ssm.mamba_block import MambaStack

    ours = Hy.stage_patterns(pattern, pp, first=first, last=last)
    for rank in range(pp):
        stack = SimpleNamespace(pp_group=_Group(rank, pp), config=SimpleNamespace(
            num_layers=len(pattern), num_layers_in_first_pipeline_stage=first,
            num_layers_in_last_pipeline_stage=last, virtual_pipeline_model_parallel_size=None))
        offset, layers = MambaStack._select_layers_for_pipeline_parallel(stack, list(pattern))
        assert ours[rank] == "".join(layers)
        assert pattern[offset:offset + len(layers)] == ours[rank]


def test_pipeline_split_refusals():
    with pytest.raises(Hy.HybridPatternError, match="virtual"):
        Hy.stage_patterns(NANO, 2, vpp=2)
    with pytest.raises(Hy.HybridPatternError, match="evenly"):
        Hy.stage_patterns(NANO, 3)
    assert Hy.stage_patterns(NANO, 1) == (NANO,)


def test_ssd_flops_match_a_hand_count():
    """H=8 heads of P=4, G=2 groups, N=3, Q=5, T=20 tokens (one sequence), per Dao & Gu 2024 Listing 1 with
    C B^T shared by a group: C B^T 2*G*T*Q*N = 1200; diagonal blocks 2*H*T*Q*P = 6400; chunk states
    2*H*T*N*P = 3840; state passing 2*H*(T/Q)*N*P = 768; off-diagonal 2*H*T*N*P = 3840."""
    shape = RankShape(kind="mamba", arch=ARCH, seq_length=20)
    assert Hy.ssd_flops(shape) == {"cb": 1200, "diag": 6400, "states": 3840, "passing": 768, "off": 3840}
    # conv1d: 2 * T * (d_inner + 2GN) * K = 2 * 20 * (32 + 12) * 4
    assert Hy.conv1d_flops(shape) == 7040
    # in_proj 64 -> 2*32 + 2*2*3 + 8 = 84, out_proj 32 -> 64: 2 * 20 * 64 * (84 + 32)
    assert Hy.projection_flops(shape) == 296960
    assert get_kind("mamba").fwd_flops_estimate(shape) == 296960 + 7040 + 1200 + 6400 + 3840 + 768 + 3840


def test_tp_and_cp_split_the_mixer():
    one = RankShape(kind="mamba", arch=ARCH, seq_length=20)
    tp2 = RankShape(kind="mamba", arch=ARCH, seq_length=20, tp=2)
    cp2 = RankShape(kind="mamba", arch=ARCH, seq_length=20, cp=2)
    assert sum(Hy.ssd_flops(tp2).values()) == pytest.approx(sum(Hy.ssd_flops(one).values()) / 2)
    assert sum(Hy.ssd_flops(cp2).values()) == pytest.approx(sum(Hy.ssd_flops(one).values()) / 2)
    assert Hy.in_proj_width(tp2) * 2 == Hy.in_proj_width(one)
    assert Hy.check_mamba_split(8, 2, 2, 2) is None
    assert "tensor parallel 4" in Hy.check_mamba_split(8, 2, 4)
    assert "context parallel 3" in Hy.check_mamba_split(12, 4, 2, 3)


def test_mamba_kind_answers_every_hook():
    from primus_ext.hardware import load_gpu
    from primus_ext.model.memory.activations import LOCAL, TE
    from primus_ext.model.roofline import _Parts

    kind, gpu = get_kind("mamba"), load_gpu("h100")
    shape = RankShape(kind="mamba", arch=ARCH, seq_length=4096, tp=2, sequence_parallel=True)
    assert kind.decoder_layer and not kind.recomputable and not kind.attention
    parts = _Parts({}, {}, {})
    kind.roofline(parts, shape, gpu)
    assert parts.fwd["mamba_scan"] > 0 and parts.dgrad["mamba_scan"] > parts.fwd["mamba_scan"]
    assert parts.fwd["mamba_linear"] > 0
    for impl in (TE, LOCAL):
        saved = kind.saved(shape, impl)
        # zxbcdt: T x in_proj width (84 / 2 per rank) in bf16
        assert saved["mamba_zxbcdt"] == 2 * 4096 * 42
    assert kind.comm(shape, True).pairs == (("mamba", "tp"),)


def test_model_flops_of_attention_plus_mlp_layers_equal_a_gpt_layer():
    """``*-`` twice holds what two GPT layers hold: the same model FLOPs; an ``M`` adds its mixer's."""
    from dataclasses import replace

    from primus_ext.model.flops import flops_breakdown
    from primus_ext.specs import ModelSpec

    gpt = ModelSpec(num_layers=2, hidden_size=256, ffn_hidden_size=1024, num_attention_heads=4, num_query_groups=2,
                    kv_channels=64, vocab_size=1000)
    hybrid = replace(gpt, num_layers=4, hybrid_layer_pattern="*-*-")
    assert flops_breakdown(hybrid, 512).total == pytest.approx(flops_breakdown(gpt, 512).total)
    mamba = replace(hybrid, num_layers=5, hybrid_layer_pattern="M*-*-", mamba_num_heads=8, mamba_head_dim=64,
                    mamba_num_groups=2, mamba_state_dim=16)
    shape = RankShape(kind="mamba", arch=LayerArch(hidden_size=256, num_attention_heads=4, num_query_groups=2,
                                                   kv_channels=64, ffn_hidden_size=1024, mamba_num_heads=8,
                                                   mamba_head_dim=64, mamba_num_groups=2, mamba_state_dim=16,
                                                   mamba_d_conv=4, mamba_chunk_size=128), seq_length=512)
    per_token = 3 * Hy.layer_flops(shape) / 512  # forward + backward (2x) per token
    assert flops_breakdown(mamba, 512).mamba == pytest.approx(per_token)


@pytest.mark.parametrize("name", ["hybrid_attention", "hybrid_mlp", "hybrid_moe"])
def test_hybrid_half_kinds_answer_every_hook(name):
    from dataclasses import replace

    from primus_ext.hardware import load_gpu
    from primus_ext.model.memory.activations import LOCAL, TE
    from primus_ext.model.roofline import _Parts

    arch = replace(ARCH, num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=64) if name == "hybrid_moe" else ARCH
    shape = RankShape(kind=name, arch=arch, seq_length=256, tp=2, sequence_parallel=True, recompute="selective",
                      recompute_modules=("core_attn", "layernorm", "mlp", "moe"))
    kind = get_kind(name)
    assert kind.params(shape) > 0 and kind.fwd_flops_estimate(shape) > 0
    parts = _Parts({}, {}, {})
    kind.roofline(parts, shape, load_gpu("h100"))
    assert parts.fwd and all(v >= 0 for v in parts.fwd.values())
    for impl in (TE, LOCAL):
        saved = kind.saved(shape, impl)
        assert sum(kind.saved_selective(shape, impl, dict(saved)).values()) < sum(saved.values())
    comm = kind.comm(shape, True)
    assert {part for part, _ in comm.pairs} <= comm.parts and comm.ep == (name == "hybrid_moe")
