"""Latent MoE (megatron-core ``moe_latent_size``; Nemotron-3 Super / Ultra): routed experts at the latent width, two
duplicated latent projections, the EP all-to-all at the latent width; router and shared experts at hidden.

Shapes from Megatron-LM @d98e8a64 megatron/core/transformer/moe/moe_layer.py (``fc1_latent_proj`` /
``fc2_latent_proj``: ``TELinear(parallel_mode="duplicated")``), experts.py (fc1 input / fc2 output
``moe_latent_size``), token_dispatcher.py (``hidden_dim = moe_latent_size or hidden_size``).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus_ext.hardware import load_gpu, load_system
from primus_ext.model import macs
from primus_ext.model.layers import layer_params, rank_shapes
from primus_ext.model.placement import group_placements
from primus_ext.model.rank_shape import LayerArch, RankShape
from primus_ext.model.roofline import _Parts, moe_mlp_parts
from primus_ext.projection.comm import _ep
from primus_ext.recipe import resolve_specs
from primus_ext.specs import ExecutionSpec, ModelSpec

H, LATENT, FFN, EXPERTS, SHARED = 4096, 1024, 2688, 512, 5376  # Nemotron-3 Super's MoE block
ARCH = LayerArch(hidden_size=H, num_attention_heads=32, num_query_groups=2, kv_channels=128, ffn_hidden_size=0,
                 activation="squared_relu", num_experts=EXPERTS, moe_router_topk=22, moe_ffn_hidden_size=FFN,
                 moe_shared_expert_intermediate_size=SHARED, moe_latent_size=LATENT)


def test_latent_moe_parameters_follow_megatrons_module_shapes():
    tp, ep = 2, 64
    shape = RankShape(kind="hybrid_moe", arch=ARCH, tp=tp, ep=ep, etp=1)
    norm = H  # pre-MLP RMSNorm
    router = EXPERTS * H  # TopKRouter.weight [experts, hidden]: routing reads the hidden state
    latent = 2 * H * LATENT  # fc1_latent_proj + fc2_latent_proj, whole on every TP rank
    experts = EXPERTS // ep * 2 * LATENT * FFN  # squared ReLU (not gated): fc1 [ffn, latent] + fc2 [latent, ffn]
    shared = 2 * H * SHARED // tp  # shared experts stay at hidden, split over TP
    assert layer_params(shape) == norm + router + latent + experts + shared
    plain = replace(shape, arch=replace(ARCH, moe_latent_size=0))
    assert layer_params(plain) == norm + router + EXPERTS // ep * 2 * H * FFN + shared


def test_latent_moe_model_macs_count_experts_at_the_latent_width():
    model = ModelSpec(name="m", num_layers=2, hidden_size=H, ffn_hidden_size=FFN, num_attention_heads=32,
                      num_query_groups=2, kv_channels=128, vocab_size=131072, activation="squared_relu",
                      num_experts=EXPERTS, moe_router_topk=22, moe_shared_expert_intermediate_size=SHARED,
                      moe_layer_pattern=(True, True), moe_latent_size=LATENT)
    assert macs.moe_mlp_macs(model) == 22 * LATENT * FFN * 2 + H * SHARED * 2 + 2 * H * LATENT


def _shapes(latent: int, hidden: int = H):
    model = ModelSpec(name="m", num_layers=2, hidden_size=hidden, ffn_hidden_size=FFN, num_attention_heads=32,
                      num_query_groups=2, kv_channels=128, vocab_size=131072, activation="squared_relu",
                      num_experts=EXPERTS, moe_router_topk=22, moe_layer_pattern=(True, True),
                      moe_latent_size=latent or None)
    ex = ExecutionSpec(tensor_model_parallel_size=2, expert_model_parallel_size=64, data_parallel_size=32,
                       sequence_parallel=True, seq_length=8192, micro_batch_size=1, global_batch_size=512,
                       moe_token_dispatcher_type="alltoall")
    return rank_shapes(model, ex)["moe"], ex


def test_the_ep_all_to_all_moves_the_latent_width_not_hidden():
    system = load_system("gb200", 64)
    latent, ex = _shapes(LATENT)
    plain, _ = _shapes(0)
    narrow, _ = _shapes(0, hidden=LATENT)  # a model whose hidden is the latent width: the same wire bytes
    pl = group_placements(ex, system)
    assert _ep(latent, ex, pl, system) == pytest.approx(_ep(narrow, ex, pl, system))
    fwd, plain_fwd = _ep(latent, ex, pl, system)[0], _ep(plain, ex, pl, system)[0]
    assert fwd < plain_fwd / 3  # 1024 of 4096 features (latency terms aside)


def test_expert_gemms_run_at_the_latent_width_and_the_projections_are_priced():
    gpu = load_gpu("b200")
    latent, _ = _shapes(LATENT)
    narrow, _ = _shapes(0, hidden=LATENT)
    a, b = _Parts({}, {}, {}), _Parts({}, {}, {})
    moe_mlp_parts(a, latent, gpu)
    moe_mlp_parts(b, narrow, gpu)
    assert a.fwd["moe"] == pytest.approx(b.fwd["moe"])
    assert a.fwd["moe_permute"] == pytest.approx(b.fwd["moe_permute"])
    assert a.fwd["moe_latent_proj"] > 0 and "moe_latent_proj" not in b.fwd
    assert a.fwd["router"] > b.fwd["router"]  # the router still reads hidden (4096) features


def test_a_shape_without_latent_keeps_its_stored_key():
    plain = RankShape(kind="moe", arch=replace(ARCH, moe_latent_size=0))
    assert "moe_latent_size" not in plain.key()
    assert RankShape(kind="moe", arch=ARCH).key() != plain.key()


def test_the_recipe_reads_moe_latent_size_instead_of_refusing_it():
    moe = {"num_layers": 8, "hidden_size": 1024, "ffn_hidden_size": 4096, "num_attention_heads": 16,
           "seq_length": 2048, "micro_batch_size": 1, "global_batch_size": 64, "bf16": True, "swiglu": True,
           "normalization": "RMSNorm", "add_bias_linear": False, "vocab_size": 32000, "num_experts": 8,
           "moe_router_topk": 2, "moe_ffn_hidden_size": 1024}
    model, _, problems = resolve_specs({**moe, "moe_latent_size": 256}, load_system("mi300x", 1))
    assert not problems, [str(p) for p in problems]
    assert model.moe_latent_size == 256
