"""Real megatron-core modules at per-rank shapes: parameter counts against the closed form."""

from __future__ import annotations

import pytest
from archs import GQA, MLA, MOE

from primus_ext.measure.build import build_layer
from primus_ext.model.layers import layer_params
from primus_ext.model.rank_shape import RankShape

CASES = {
    "dense": RankShape(kind="dense", arch=GQA, seq_length=64),
    "moe-shared": RankShape(kind="moe", arch=MOE, seq_length=64),
    "mla": RankShape(kind="dense", arch=MLA, seq_length=64),
    "embedding": RankShape(kind="embedding", arch=GQA, seq_length=64),
    "output": RankShape(kind="output", arch=GQA, seq_length=64),
    # one-rank world at per-rank sizes of a TP=2 / EP=2 run (TE layout: MLA down-projections whole)
    "dense-tp2": RankShape(kind="dense", arch=GQA, tp=2, seq_length=64),
    "moe-tp2-ep2": RankShape(kind="moe", arch=MOE, tp=2, ep=2, etp=2, seq_length=64),
    "mla-tp2": RankShape(kind="dense", arch=MLA, tp=2, seq_length=64),
}


@pytest.mark.parametrize("name", list(CASES))
def test_param_count_is_module_sum_and_closed_form(world1, name):
    shape = CASES[name]
    built = build_layer(shape, device=world1)
    module_sum = sum(p.numel() for p in built.module.parameters())
    assert built.param_count == module_sum - built.extra_params
    # a one-rank world routes over the experts it built; megatron's router scores all of them
    router_gap = (shape.arch.num_experts - (built.config.num_moe_experts or 0)) * shape.arch.hidden_size
    assert built.param_count == layer_params(shape, impl="te") - router_gap
    if shape.tp == 1:
        assert built.param_count == layer_params(shape, impl="local")


def test_moe_has_shared_expert_and_local_experts(world1):
    built = build_layer(RankShape(kind="moe", arch=MOE, ep=2, seq_length=64), device=world1)
    mlp = built.module.layers[0].mlp
    assert mlp.shared_experts is not None
    assert len(mlp.experts.local_experts) == MOE.num_experts // 2


def test_topk_above_local_experts_builds_carriers_not_counted(world1):
    """EP=4 leaves 1 local expert; top-2 routing needs 2 slots per token: 1 carrier expert, not counted."""
    shape = RankShape(kind="moe", arch=MOE, ep=4, seq_length=64)
    built = build_layer(shape, device=world1)
    assert built.config.num_moe_experts == 2 and built.config.moe_router_topk == 2
    assert built.extra_params > 0
    assert built.param_count == sum(p.numel() for p in built.module.parameters()) - built.extra_params
    assert any("built 2 experts" in n for n in built.notes)


def test_recompute_targets_follow_megatron_modules(world1):
    full = build_layer(RankShape(kind="dense", arch=GQA, seq_length=64, recompute="full"), device=world1)
    assert full.config.recompute_granularity == "full" and full.config.recompute_num_layers == 1
    assert full.recompute_targets == (full.module.layers[0],)
    sel = build_layer(RankShape(kind="dense", arch=GQA, seq_length=64, recompute="selective"), device=world1)
    assert sel.recompute_targets == (sel.module.layers[0].self_attention.core_attention,)


def test_inputs_are_per_rank_sized(world1):
    shape = RankShape(kind="dense", arch=GQA, seq_length=128, cp=2, micro_batch_size=3)
    inputs = build_layer(shape, device=world1).make_inputs()
    assert tuple(inputs["hidden_states"].shape) == (64, 3, GQA.hidden_size)
    assert inputs["attention_mask"].dtype.is_floating_point is False


def test_window_pattern_builds_one_period_and_measures_its_mean(world1):
    """GPT-OSS-style alternation (window on layer 1, full attention on layer 2): both layers built and timed,
    costs per layer; without the pattern one windowed layer would stand for every layer."""
    from dataclasses import replace

    from primus_ext.measure.runner import MeasureOptions, measure_built

    arch = replace(GQA, window_size=(8, 0), window_attn_skip_freq=2)
    shape = RankShape(kind="dense", arch=arch, seq_length=64, recompute="selective", recompute_modules=("layernorm",),
                      attention=True)
    built = build_layer(shape, device=world1)
    assert built.layers == len(built.module.layers) == 2
    windows = [layer.self_attention.core_attention.scale_mask_softmax.window_size for layer in built.module.layers]
    assert windows == [(8, 0), None]
    assert built.param_count == layer_params(shape, impl="local")
    assert len(built.recompute_targets) == 4  # both norms of both layers
    assert any("2 layers timed" in note for note in built.notes)
    plain = build_layer(replace(shape, arch=replace(arch, window_attn_skip_freq=0)), device=world1)
    assert plain.layers == 1 and len(plain.module.layers) == 1
    opts = MeasureOptions(warmup=1, reps=2)
    block, one = measure_built(built, shape, 1.0, opts).cost, measure_built(plain, shape, 1.0, opts).cost
    assert block.params == one.params
    assert abs(block.saved_bytes - one.saved_bytes) <= 0.1 * one.saved_bytes


def test_window_pattern_costs_are_per_layer_and_keyed_apart(world1, monkeypatch):
    """The block's timings are divided by its layers (a fixed fake timing: exact halves); entries timed before
    the pattern was built (one windowed layer) are not reused: the shape's store key changed."""
    from dataclasses import replace

    from primus_ext.measure import single
    from primus_ext.measure.timing import Stats, Timing

    def stats(ms: float) -> Stats:
        return Stats(median_ms=ms, p10_ms=ms, p90_ms=ms, n=3)

    fake = Timing(fwd=stats(10.0), bwd=stats(20.0), recompute=stats(4.0), wgrad_ms=6.0)
    monkeypatch.setattr(single, "time_layer", lambda *_a, **_k: fake)
    arch = replace(GQA, window_size=(8, 0), window_attn_skip_freq=2)
    shape = RankShape(kind="dense", arch=arch, seq_length=64, attention=True)
    cost = single.measure_built(build_layer(shape, device=world1), shape, 1.0, single.MeasureOptions()).cost
    assert (cost.fwd_ms, cost.bwd_ms, cost.recompute_ms, cost.wgrad_ms) == (5.0, 10.0, 2.0, 3.0)
    assert shape.window_pattern == 2
    assert replace(shape, arch=replace(arch, window_attn_skip_freq=0)).window_pattern == 0
    assert RankShape(kind="output", arch=arch, seq_length=64).window_pattern == 0
    assert '"window_period_timed"' not in RankShape(kind="dense", arch=GQA, seq_length=64).key()  # others keep keys
    assert shape.key() != replace(shape, arch=replace(arch, window_size=None)).key()


def test_window_skip_freq_one_means_full_attention_everywhere(world1):
    """megatron: layer_number % 1 == 0, no layer windowed; the measurement follows (it used to window it)."""
    from dataclasses import replace

    shape = RankShape(kind="dense", arch=replace(GQA, window_size=(8, 0), window_attn_skip_freq=1), seq_length=64,
                      attention=True)
    built = build_layer(shape, device=world1)
    assert built.layers == 1
    assert built.module.layers[0].self_attention.core_attention.scale_mask_softmax.window_size is None


def test_latent_moe_without_transformer_engine_is_refused_with_the_reason(world1):
    # megatron-core 0.16.1 moe_layer.py asserts HAVE_TE for its latent projections (TELinear); its SequentialMLP
    # experts ignore moe_latent_size: no CPU stand-in would have the real layer's shapes
    from dataclasses import replace

    from primus_ext.measure.build import UnsupportedLayer

    with pytest.raises(UnsupportedLayer, match=r"latent MoE .* Transformer Engine"):
        build_layer(RankShape(kind="moe", arch=replace(MOE, moe_latent_size=64)), device="cpu")
