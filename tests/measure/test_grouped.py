"""The GPU stand-in for TE's grouped expert GEMMs: the op against a per-expert loop, and megatron's
GroupedMLP built and run on it (forced onto the CPU)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch
from archs import MOE

from primus_ext.measure.build import build_layer
from primus_ext.measure.grouped import gmm, grouped_unavailable
from primus_ext.model.layers import layer_params
from primus_ext.model.rank_shape import RankShape


@pytest.mark.parametrize("trans_b", [False, True])
def test_gmm_is_a_gemm_per_expert_forward_and_backward(trans_b):
    torch.manual_seed(0)
    sizes = torch.tensor([3, 0, 5, 8])  # an expert with no token too
    a = torch.randn(int(sizes.sum()), 16, requires_grad=True)
    b = torch.randn(4, 8, 16, requires_grad=True) if trans_b else torch.randn(4, 16, 8, requires_grad=True)
    out = gmm(a, b, sizes, trans_b=trans_b)
    grad = torch.randn_like(out)
    out.backward(grad)
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    bounds = itertools.pairwise([0, *torch.cumsum(sizes, 0).tolist()])
    want = torch.cat([a2[s:e] @ (b2[i].T if trans_b else b2[i]) for i, (s, e) in enumerate(bounds)])
    want.backward(grad)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(a.grad, a2.grad)
    torch.testing.assert_close(b.grad, b2.grad)


def test_moe_layer_runs_megatrons_grouped_mlp_on_it(world1):
    shape = RankShape(kind="moe", arch=MOE, seq_length=64, ep=2)
    built = build_layer(shape, device=world1, stand_ins=True)
    experts = built.module.layers[0].mlp.experts
    assert type(experts).__name__ == "GroupedMLP" and built.spec_kind == "local+torch"
    assert any("torch._grouped_mm" in n for n in built.notes) and any("SDPA" in n for n in built.notes)
    # the same parameters as the per-expert layout (a one-rank world's router scores only the local experts)
    router_gap = (MOE.num_experts - built.config.num_moe_experts) * MOE.hidden_size
    assert built.param_count == layer_params(shape, impl="local") - router_gap
    inputs = built.make_inputs()
    out = built.module(**inputs)
    out.float().sum().backward()
    assert torch.isfinite(out.float()).all() and inputs["hidden_states"].grad is not None
    assert experts.weight1.grad is not None and experts.weight1.grad.abs().sum() > 0


def test_experts_with_biases_fall_back_to_one_gemm_each(world1):
    shape = RankShape(kind="moe", arch=replace(MOE, add_bias_linear=True, moe_shared_expert_intermediate_size=0),
                      seq_length=64)  # megatron refuses biases in shared experts
    assert "biases" in grouped_unavailable(shape, torch.bfloat16)
    assert "bf16" in grouped_unavailable(RankShape(kind="moe", arch=MOE, seq_length=64), torch.float32)
    built = build_layer(shape, device=world1, stand_ins=True)
    assert type(built.module.layers[0].mlp.experts).__name__ == "SequentialMLP"
    assert any("one GEMM per local expert" in n for n in built.notes)


def test_a_device_whose_grouped_gemm_fails_gets_the_per_expert_layout(monkeypatch):
    from primus_ext.measure import grouped

    def broken(*_args, **_kwargs):
        raise RuntimeError("CUDA error: no kernel image is available\nmore")

    monkeypatch.setattr(torch, "_grouped_mm", broken)
    grouped._probe.cache_clear()
    try:
        reason = grouped_unavailable(RankShape(kind="moe", arch=MOE, seq_length=64), torch.bfloat16,
                                     torch.device("cpu"))
    finally:
        grouped._probe.cache_clear()
    assert reason == "torch._grouped_mm failed on cpu: CUDA error: no kernel image is available"


def test_moe_act_recompute_runs_on_grouped_experts(world1):
    shape = RankShape(kind="moe", arch=MOE, seq_length=64, ep=2, recompute="selective", recompute_modules=("moe_act",))
    built = build_layer(shape, device=world1, stand_ins=True)
    assert built.config.recompute_modules == ["moe_act"]  # megatron allows it with grouped experts
    assert any("inside bwd_ms" in n for n in built.notes)
    inputs = built.make_inputs()
    built.module(**inputs).float().sum().backward()  # megatron's output-discarding checkpoint (shim 7)
    assert torch.isfinite(inputs["hidden_states"].grad).all()
    per_expert = build_layer(shape, device=world1)  # no grouped experts: megatron refuses moe_act
    assert "moe_act" not in (per_expert.config.recompute_modules or [])


def test_unaligned_expert_widths_are_not_grouped():
    odd = RankShape(kind="moe", arch=replace(MOE, moe_ffn_hidden_size=250), seq_length=64)
    assert "multiples of 8" in grouped_unavailable(odd, torch.bfloat16)
    assert grouped_unavailable(RankShape(kind="moe", arch=MOE, seq_length=64), torch.bfloat16) is None
