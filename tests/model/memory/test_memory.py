"""The memory model: hand-derived stage totals, published formulas, schedules, monotonicity, pre-filter.

Independent references: hand sums of the parameter/optimizer bytes Megatron documents (bf16 weight 2 B,
fp32 main grad 4 B, Adam + master 12 B, sharded by the distributed optimizer), Korthikanti et al. 2022
(activations ``sbh(34 + 5as/h)`` per layer; with flash attention / selective recompute and no dropout
``32 sbh``; full recompute ``2 sbh``), Megatron's interleaved-schedule warm-up rule.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.layers import layer_params, rank_shapes
from primus_ext.model.memory import estimate_memory, fits, peak_bytes
from primus_ext.model.memory.activations import TE
from primus_ext.model.memory.saved import activation_bytes_per_layer, activation_parts
from primus_ext.model.memory.schedule import chunk_in_flight
from primus_ext.specs import ExecutionSpec, ModelSpec

TINY = ModelSpec(name="tiny", num_layers=8, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
                 num_query_groups=16, kv_channels=64, vocab_size=32000, activation="gelu")
GQA = replace(TINY, name="gqa", num_query_groups=4, activation="swiglu", ffn_hidden_size=2816)
MOE = replace(GQA, name="moe", num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=1024,
              moe_shared_expert_intermediate_size=1024, moe_layer_pattern=(False,) + (True,) * 7)
H100 = load_system("h100", 4)


def _exe(**kw) -> ExecutionSpec:
    base = dict(data_parallel_size=1, micro_batch_size=1, global_batch_size=8, seq_length=2048)
    base.update(kw)
    return ExecutionSpec(**base)


# --- parameters, gradients, optimizer: hand sums ----------------------------------------------
def test_stage_static_bytes_hand_sum_pp2_untied():
    exe = _exe(pipeline_model_parallel_size=2, data_parallel_size=4, use_distributed_optimizer=True,
               global_batch_size=32)
    mem = estimate_memory(TINY, exe, H100)
    shapes = rank_shapes(TINY, exe)
    layer = layer_params(shapes["dense"])
    vocab = 32000  # already a multiple of 128
    first = 4 * layer + vocab * 1024
    last = 4 * layer + vocab * 1024 + 1024  # + final norm
    for stage, count in zip(mem.stages, (first, last), strict=True):
        assert stage.params_bytes == 2 * count
        assert stage.grads_bytes == 4 * count
        assert stage.optimizer_bytes == pytest.approx(12 * count / 4)


def test_tied_embeddings_single_stage_shares_weight_but_pp2_keeps_a_copy():
    tied = replace(TINY, untie_embeddings_and_output_weights=False)
    one = estimate_memory(tied, _exe(), H100).stages[0]
    untied = estimate_memory(TINY, _exe(), H100).stages[0]
    assert untied.params_bytes - one.params_bytes == 2 * 32000 * 1024
    two = estimate_memory(tied, _exe(pipeline_model_parallel_size=2), H100)
    two_untied = estimate_memory(TINY, _exe(pipeline_model_parallel_size=2), H100)
    assert two.stages[1].params_bytes == two_untied.stages[1].params_bytes  # Megatron's copy on the last stage


def test_expert_optimizer_sharded_over_expert_data_parallel():
    exe = _exe(data_parallel_size=8, expert_model_parallel_size=4, use_distributed_optimizer=True,
               global_batch_size=64)
    stage = estimate_memory(MOE, exe, H100).stages[0]
    expert, total = stage.detail["params.expert_count"], stage.detail["params.count"]
    assert exe.expert_data_parallel_size == 2
    assert stage.optimizer_bytes == pytest.approx(12 * ((total - expert) / 8 + expert / 2))


def test_fsdp_shards_params_grads_and_optimizer():
    exe = _exe(data_parallel_size=8, global_batch_size=64)
    ddp = estimate_memory(TINY, exe, H100).stages[0]
    fsdp = estimate_memory(TINY, replace(exe, fsdp="torch_fsdp2"), H100).stages[0]
    assert fsdp.params_bytes == pytest.approx(ddp.params_bytes / 8)
    # torch FSDP2 keeps bf16 gradient shards (the parameter dtype), not DDP's fp32 main-grad buffer
    # (tests/model/memory/test_memory_fsdp2.py, checked on the real modules in test_memory_fsdp2_megatron.py)
    assert fsdp.grads_bytes == pytest.approx(ddp.grads_bytes / 8 / 2)
    assert fsdp.optimizer_bytes == pytest.approx(ddp.optimizer_bytes / 8)
    optim_only = estimate_memory(TINY, replace(exe, fsdp="megatron_fsdp", data_parallel_sharding_strategy="optim"),
                                 H100).stages[0]
    assert optim_only.params_bytes == ddp.params_bytes and optim_only.grads_bytes == ddp.grads_bytes


@pytest.mark.parametrize("dist_opt", [False, True])
def test_megatron_fsdp_shards_what_its_strategy_names(dist_opt):
    """megatron-core 0.16.1 megatron_fsdp/param_and_grad_buffer.py ``_init_each_parameter_group_buffers``:
    no_shard keeps main weights (so Adam's state), grads and params whole; optim shards the main weights,
    optim_grads the grads too, optim_grads_params the params too. The distributed optimizer adds nothing
    under Megatron-FSDP (``DistributedOptimizer.__init__`` returns early)."""
    exe = _exe(data_parallel_size=8, global_batch_size=64)
    ddp = estimate_memory(TINY, exe, H100).stages[0]
    small = load_system("h100", 1)
    expected = {"no_shard": (1, 1, 1), "optim": (1, 1, 8), "optim_grads": (1, 8, 8), "optim_grads_params": (8, 8, 8)}
    for strategy, (p_div, g_div, o_div) in expected.items():
        e = replace(exe, fsdp="megatron_fsdp", data_parallel_sharding_strategy=strategy,
                    use_distributed_optimizer=dist_opt)
        stage = estimate_memory(TINY, e, H100).stages[0]
        assert stage.optimizer_bytes == pytest.approx(ddp.optimizer_bytes / o_div), strategy
        assert stage.grads_bytes == pytest.approx(ddp.grads_bytes / g_div), strategy
        if p_div == 1:
            assert stage.params_bytes == ddp.params_bytes, strategy
        else:
            assert stage.params_bytes == pytest.approx(ddp.params_bytes / p_div), strategy
        assert peak_bytes(TINY, e, small) == estimate_memory(TINY, e, small).peak_bytes  # the pre-filter agrees


# --- activations: Korthikanti et al. ------------------------------------------------------------
@pytest.mark.parametrize("tp,sp", [(1, False), (4, True)])
def test_dense_layer_matches_korthikanti_without_dropout(tp, sp):
    """GPT-style layer (MHA, GELU, ffn 4h): sbh * 34 / t with selective recompute / flash attention,
    minus the two 1-byte hidden-dropout masks (dropout 0) = 32 sbh / t."""
    exe = _exe(tensor_model_parallel_size=tp, sequence_parallel=sp, micro_batch_size=2)
    shape = rank_shapes(TINY, exe)["dense"]
    s, b, h = 2048, 2, 1024
    got = activation_bytes_per_layer(shape, impl=TE)
    assert got == pytest.approx(32 * s * b * h / tp, rel=0.01)
    full = activation_bytes_per_layer(replace(shape, recompute="full"), impl=TE)
    assert full == 2 * s * b * h / tp  # the checkpointed layer input


def test_swiglu_saves_three_ffn_wide_tensors():
    """SwiGLU keeps fc1's 2*ffn output and the ffn-wide product: 16 + 6 ffn/h (sbh units) with flash,
    not Korthikanti's GELU 16 + 4 ffn/h."""
    shape = replace(rank_shapes(GQA, _exe())["dense"], arch=replace(rank_shapes(GQA, _exe())["dense"].arch,
                                                                     num_query_groups=16))
    s, b, h, f = 2048, 1, 1024, 2816
    assert activation_bytes_per_layer(shape) == pytest.approx(s * b * h * (16 + 6 * f / h), rel=0.01)


def test_recompute_orders_activations():
    exe = _exe(tensor_model_parallel_size=2, sequence_parallel=True, micro_batch_size=2)
    for model in (GQA, MOE, replace(GQA, multi_latent_attention=True, q_lora_rank=512, kv_lora_rank=256,
                                    qk_head_dim=64, qk_pos_emb_head_dim=32, v_head_dim=64, qk_layernorm=True)):
        for kind, shape in rank_shapes(model, exe).items():
            if kind not in ("dense", "moe"):
                continue
            none = activation_bytes_per_layer(shape, recompute="none")
            sel = activation_bytes_per_layer(replace(shape, recompute="selective",
                                                     recompute_modules=("core_attn", "mlp", "moe", "layernorm")))
            full = activation_bytes_per_layer(shape, recompute="full")
            assert full < sel < none, (model.name, kind)


def test_te_mla_up_proj_recompute_frees_flash_attention_qkv_only():
    """TE spec: ``CheckpointWithoutOutput`` resizes q, k, v (its outputs) to 0 once core attention ran, and
    TE's flash attention saved those very tensors; its inputs (q/kv_compressed) stay, saved by the fused
    norm-linear anyway, and TE's fused RoPE keeps no per-layer cos/sin (megatron-core 0.16.1
    multi_latent_attention.py ``qkv_up_proj_and_rope_apply``)."""
    mla = replace(GQA, multi_latent_attention=True, q_lora_rank=512, kv_lora_rank=256, qk_head_dim=64,
                  qk_pos_emb_head_dim=32, v_head_dim=64, qk_layernorm=True, num_query_groups=16)
    shape = rank_shapes(mla, _exe())["dense"]
    none = activation_parts(shape, impl=TE, recompute="none")
    for modules, dropped in ((("mla_up_proj",), {"attn_qkv"}),
                             (("core_attn", "mla_up_proj"), {"attn_qkv", "attn_softmax_stats"})):
        sel = activation_parts(replace(shape, recompute="selective", recompute_modules=modules), impl=TE)
        assert set(none) - set(sel) == dropped and all(sel[k] == none[k] for k in sel), modules


def test_fp8_saves_quantised_gemm_inputs():
    shape = rank_shapes(GQA, _exe())["dense"]
    bf16 = activation_parts(shape)
    fp8 = activation_parts(replace(shape, precision="fp8"))
    assert fp8["mlp_fc2_in"] == bf16["mlp_fc2_in"] / 2
    assert sum(fp8.values()) < sum(bf16.values())


# --- schedules --------------------------------------------------------------------------------
def test_in_flight_1f1b_and_interleaved_rules():
    exe = _exe(pipeline_model_parallel_size=4, global_batch_size=16)
    assert [chunk_in_flight(exe, r) for r in range(4)] == [(4.0,), (3.0,), (2.0,), (1.0,)]
    few = replace(exe, global_batch_size=2)
    assert chunk_in_flight(few, 0) == (2.0,)
    inter = replace(exe, virtual_pipeline_model_parallel_size=2, pipeline_schedule="interleaved",
                    global_batch_size=64)
    # Megatron: warm-up (PP-1-r)*2 + (VPP-1)*PP, +1 steady: rank 0 -> 11 chunk-micro-batches = PP + (PP-1)/VPP,
    # issued PP at a time per chunk: chunk 0 gets forwards 0-3 and 8-10, chunk 1 forwards 4-7
    assert sum(chunk_in_flight(inter, 0)) == 11 and chunk_in_flight(inter, 0) == (7.0, 4.0)
    assert sum(chunk_in_flight(inter, 3)) == 5


def test_zero_bubble_keeps_rank0_peak_and_adds_deferred_wgrad_elsewhere():
    exe = _exe(pipeline_model_parallel_size=4, global_batch_size=16)
    base = estimate_memory(GQA, exe, H100)
    zb = estimate_memory(GQA, replace(exe, pipeline_schedule="zb-h1"), H100)
    assert zb.stages[0].activations_bytes == base.stages[0].activations_bytes
    assert zb.stages[2].activations_bytes > base.stages[2].activations_bytes
    assert zb.stages[2].microbatches_in_flight <= 4  # Qi et al.: peak stays within PP micro-batches


def test_block_recompute_between_uniform_full_and_none():
    exe = _exe(pipeline_model_parallel_size=2, global_batch_size=16)
    act = {}
    for name, kw in {"none": {}, "block2": dict(recompute_granularity="full", recompute_method="block",
                                                recompute_num_layers=2),
                     "uniform1": dict(recompute_granularity="full", recompute_method="uniform",
                                      recompute_num_layers=1)}.items():
        act[name] = estimate_memory(GQA, replace(exe, **kw), H100).stages[0].activations_bytes
    assert act["uniform1"] < act["block2"] < act["none"]


# --- monotonicity and the pre-filter --------------------------------------------------------
def test_more_parallelism_less_memory_per_gpu():
    exe = _exe(data_parallel_size=8, global_batch_size=64, use_distributed_optimizer=True)
    peaks = [estimate_memory(GQA, replace(exe, tensor_model_parallel_size=t, sequence_parallel=t > 1), H100).peak_bytes
             for t in (1, 2, 4)]
    assert peaks[0] > peaks[1] > peaks[2]
    no_sp = estimate_memory(GQA, replace(exe, tensor_model_parallel_size=4), H100).peak_bytes
    assert no_sp > peaks[2]
    plain = estimate_memory(GQA, replace(exe, use_distributed_optimizer=False), H100).peak_bytes
    assert plain > peaks[0]


LLAMA8B = replace(GQA, name="llama8b", num_layers=32, hidden_size=4096, ffn_hidden_size=14336,
                  num_attention_heads=32, num_query_groups=8, kv_channels=128, vocab_size=128256)
MIXTRAL = replace(LLAMA8B, name="mixtral", num_experts=8, moe_ffn_hidden_size=14336,
                  moe_shared_expert_intermediate_size=None, moe_layer_pattern=(True,) * 32)


def _configs():
    for model, tp, pp, vpp, mbs, rc, dopt in itertools.product(
            (LLAMA8B, MIXTRAL), (1, 2), (1, 2, 4), (None, 2), (1, 4), (None, "selective", "full"), (False, True)):
        if vpp and pp == 1:
            continue
        yield model, _exe(tensor_model_parallel_size=tp, sequence_parallel=tp > 1, pipeline_model_parallel_size=pp,
                          virtual_pipeline_model_parallel_size=vpp, micro_batch_size=mbs, data_parallel_size=2,
                          global_batch_size=64, recompute_granularity=rc, use_distributed_optimizer=dopt,
                          expert_model_parallel_size=2 if model.is_moe else 1, seq_length=8192,
                          recompute_method="uniform" if rc == "full" else None,
                          pipeline_schedule="interleaved" if vpp else "1f1b")


def test_prefilter_agrees_with_estimate_memory():
    small = load_system("h100", 1)
    checked = {True: 0, False: 0}
    for model, exe in _configs():
        mem = estimate_memory(model, exe, small)
        assert peak_bytes(model, exe) == pytest.approx(mem.peak_bytes)
        for margin in (0.0, 0.1):
            assert fits(model, exe, small, margin=margin) == estimate_memory(model, exe, small, margin=margin).fits
        checked[mem.fits] += 1
    assert checked[True] and checked[False]  # the grid straddles the capacity


def test_measured_saved_bytes_override_the_formula():
    exe = _exe()
    analytic = estimate_memory(GQA, exe, H100)
    formula = activation_bytes_per_layer(rank_shapes(GQA, exe)["dense"])
    measured = estimate_memory(GQA, exe, H100, activation_bytes={"dense": 2 * formula})
    assert measured.source == "measured saved-bytes" and analytic.source == "analytic"
    grown = measured.stages[0].activations_bytes - analytic.stages[0].activations_bytes
    assert grown == pytest.approx(GQA.num_layers * formula)


def test_cpu_local_measurement_at_reduced_scale_carries_only_its_ratio():
    """A local-spec (unfused attention) measurement at 1/4 scale that equals its own formula leaves the
    TE estimate at the target shape unchanged; 10 % more than its formula raises it by 10 %."""
    from primus_ext.model.memory.activations import LOCAL

    exe = _exe()
    shape = rank_shapes(GQA, exe)["dense"]
    local = activation_bytes_per_layer(shape.scaled(0.25), impl=LOCAL)
    analytic = estimate_memory(GQA, exe, H100).stages[0].detail["activations.per_microbatch"]
    same = estimate_memory(GQA, exe, H100, activation_bytes={"dense": local}, measured_impl="local",
                           measured_scale=0.25).stages[0].detail["activations.per_microbatch"]
    assert same == pytest.approx(analytic)
    more = estimate_memory(GQA, exe, H100, activation_bytes={"dense": round(1.1 * local)}, measured_impl="local",
                           measured_scale=0.25).stages[0].detail["activations.per_microbatch"]
    dense_part = GQA.num_layers * activation_bytes_per_layer(shape)
    assert more - analytic == pytest.approx(0.1 * dense_part, rel=1e-3)


def _per_microbatch(model, exe, **measured) -> float:
    return estimate_memory(model, exe, H100, **measured).stages[0].detail["activations.per_microbatch"]


@pytest.mark.parametrize(("cp", "split"), [(2, None), (1, False)])
def test_one_rank_sequence_parallel_measurement_compares_with_the_unsplit_formula(cp, split):
    """A TP=2 + SP shape measured in a one-rank world (``runner.layout_for``: always under CP > 1, else when
    TP exceeds the node) runs norms and residuals on the whole sequence (``build.py``): a measurement equal
    to the local formula of that unsplit shape carries a ratio of 1, leaving the TE estimate unchanged."""
    from primus_ext.model.memory.activations import LOCAL

    exe = _exe(tensor_model_parallel_size=2, context_parallel_size=cp, sequence_parallel=True, micro_batch_size=2,
               seq_length=256 * cp)
    shape = rank_shapes(GQA, exe)["dense"]
    unsplit = activation_bytes_per_layer(replace(shape, sequence_parallel=False), impl=LOCAL)
    assert unsplit > activation_bytes_per_layer(shape, impl=LOCAL)
    measured = _per_microbatch(GQA, exe, activation_bytes={"dense": unsplit}, measured_impl="local",
                               measured_sequence_split=split)
    assert measured == pytest.approx(_per_microbatch(GQA, exe))
    if cp == 1:  # real TP ranks (the default under CP = 1) split the sequence: compared with the SP formula
        split_bytes = activation_bytes_per_layer(shape, impl=LOCAL)
        assert _per_microbatch(GQA, exe, activation_bytes={"dense": split_bytes},
                               measured_impl="local") == pytest.approx(_per_microbatch(GQA, exe))


@pytest.mark.parametrize(("modules", "as_built"), [(("moe_act", "layernorm"), ("layernorm",)), (("moe_act",), None)])
def test_cpu_measurement_without_moe_act_compares_with_the_formula_without_it(modules, as_built):
    """megatron-core refuses ``moe_act`` recompute without grouped expert GEMMs, so the CPU (local spec)
    build drops it (``build._recompute_kwargs``; nothing left: no recompute): a measurement equal to the local
    formula of the shape as built leaves the estimate unchanged."""
    from primus_ext.model.memory.activations import LOCAL

    exe = _exe(recompute_granularity="selective", recompute_modules=modules)
    shape = rank_shapes(MOE, exe)["moe"]
    built = replace(shape, recompute_modules=as_built) if as_built else replace(shape, recompute="none",
                                                                                 recompute_modules=())
    local = activation_bytes_per_layer(built, impl=LOCAL)
    assert local != activation_bytes_per_layer(shape, impl=LOCAL)
    measured = _per_microbatch(MOE, exe, activation_bytes={"moe": local}, measured_impl="local")
    assert measured == pytest.approx(_per_microbatch(MOE, exe))
