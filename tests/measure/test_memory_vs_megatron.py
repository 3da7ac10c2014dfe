"""Activation bytes of the formula vs the bytes the real megatron-core module saves for backward.

The reference is ``primus_ext.measure.saved.saved_bytes`` (saved_tensors_hooks, unique storages) on the
layer ``primus_ext.measure.build.build_layer`` builds on CPU, i.e. megatron-core's local spec, which is
why the formula runs with its ``LOCAL`` implementation (unfused attention, torch norms, unfused
SwiGLU). Tolerance 3 % (the issue's bar); dense, MLA and the output layer agree to the byte, MoE to
within the balanced router's rounding of per-expert token counts.
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from primus_ext.model.memory import LOCAL, activation_bytes_per_layer  # noqa: E402
from primus_ext.model.rank_shape import LayerArch, RankShape  # noqa: E402

TOLERANCE = 0.03
GQA = LayerArch(hidden_size=256, num_attention_heads=8, num_query_groups=2, kv_channels=32, ffn_hidden_size=768)
MOE = replace(GQA, ffn_hidden_size=0, num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=256,
              moe_shared_expert_intermediate_size=256)
MLA = replace(GQA, num_query_groups=8, multi_latent_attention=True, q_lora_rank=128, kv_lora_rank=64,
              qk_head_dim=32, qk_pos_emb_head_dim=16, v_head_dim=32, qk_layernorm=True)


def _shape(kind: str, arch: LayerArch, **kw) -> RankShape:
    base = dict(seq_length=128, micro_batch_size=2)
    base.update(kw)
    return RankShape(kind=kind, arch=arch, **base)


ONE_RANK = {
    "dense-none": _shape("dense", GQA),
    "dense-selective-core_attn": _shape("dense", GQA, recompute="selective"),
    "dense-selective-mlp": _shape("dense", GQA, recompute="selective", recompute_modules=("core_attn", "mlp")),
    "dense-full": _shape("dense", GQA, recompute="full"),
    "dense-seq256-mbs1": _shape("dense", GQA, seq_length=256, micro_batch_size=1),
    "dense-tp2-slice": _shape("dense", GQA, tp=2),
    "dense-cp2-chunk": _shape("dense", GQA, seq_length=256, cp=2),
    "dense-qk-layernorm": _shape("dense", replace(GQA, qk_layernorm=True)),
    "dense-layernorm-bias": _shape("dense", replace(GQA, normalization="LayerNorm", add_bias_linear=True)),
    "dense-mha-gelu": _shape("dense", replace(GQA, num_query_groups=8, activation="gelu"), micro_batch_size=4,
                             seq_length=64),
    "moe-none": _shape("moe", MOE),
    "moe-selective": _shape("moe", MOE, recompute="selective"),
    "moe-selective-moe": _shape("moe", MOE, recompute="selective", recompute_modules=("moe",)),
    "moe-full": _shape("moe", MOE, recompute="full"),
    "moe-tp2-ep2-etp1": _shape("moe", MOE, seq_length=256, micro_batch_size=1, tp=2, ep=2, etp=1),
    "mla-none": _shape("dense", MLA),
    "mla-selective": _shape("dense", MLA, recompute="selective"),
    "mla-full": _shape("dense", MLA, recompute="full"),
    "mla-no-q-lora-no-qk-norm": _shape("dense", replace(MLA, q_lora_rank=None, qk_layernorm=False)),
    "mla-moe": _shape("moe", replace(MOE, **{k: getattr(MLA, k) for k in (
        "num_query_groups", "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
        "qk_pos_emb_head_dim", "v_head_dim", "qk_layernorm")})),
    "output": _shape("output", replace(GQA, vocab_size=1024)),
}
MLA_UP_PROJ = {  # CheckpointWithoutOutput frees q, k, v and core attention's views of them: to within 1 %
    "mla-up_proj": _shape("dense", MLA, recompute="selective", recompute_modules=("mla_up_proj",)),
    "mla-core_attn-up_proj": _shape("dense", MLA, recompute="selective",
                                    recompute_modules=("core_attn", "mla_up_proj")),
    "mla-cp2-up_proj": _shape("dense", MLA, seq_length=256, cp=2, recompute="selective",
                              recompute_modules=("mla_up_proj",)),
    "mla-layernorm-up_proj": _shape("dense", replace(MLA, normalization="LayerNorm"), recompute="selective",
                                    recompute_modules=("layernorm", "mla_up_proj")),
    "mla-no-q-lora-no-qk-norm-up_proj": _shape("dense", replace(MLA, q_lora_rank=None, qk_layernorm=False),
                                               recompute="selective", recompute_modules=("mla_up_proj",)),
}


@pytest.fixture(scope="module")
def one_rank_world():
    from primus_ext.measure.shims import parallel_context

    with parallel_context(device="cpu"):
        yield


def _measured(shape: RankShape, *, distributed: bool = False) -> int:
    from primus_ext.measure.build import build_layer
    from primus_ext.measure.saved import saved_bytes

    return saved_bytes(build_layer(shape, device="cpu", distributed=distributed))


@pytest.mark.parametrize("name", sorted(ONE_RANK))
def test_activation_bytes_match_saved_tensors(name, one_rank_world):
    shape = ONE_RANK[name]
    measured = _measured(shape)
    formula = activation_bytes_per_layer(shape, impl=LOCAL)
    assert formula == pytest.approx(measured, rel=TOLERANCE), (name, formula, measured)


@pytest.mark.parametrize("name", sorted(MLA_UP_PROJ))
def test_mla_up_proj_recompute_matches_saved_tensors(name, one_rank_world):
    shape = MLA_UP_PROJ[name]
    measured = _measured(shape)
    formula = activation_bytes_per_layer(shape, impl=LOCAL)
    assert formula == pytest.approx(measured, rel=0.01), (name, formula, measured)


SEQUENCE_PARALLEL = {
    "dense-tp2-sp-none": _shape("dense", GQA, tp=2, sequence_parallel=True),
    "dense-tp2-sp-selective": _shape("dense", GQA, tp=2, sequence_parallel=True, recompute="selective"),
    "dense-tp2-sp-full": _shape("dense", GQA, tp=2, sequence_parallel=True, recompute="full"),
    "dense-tp2-no-sp": _shape("dense", GQA, tp=2),
    "mla-tp2-sp": _shape("dense", MLA, tp=2, sequence_parallel=True),
    "mla-tp2-sp-up_proj": _shape("dense", MLA, tp=2, sequence_parallel=True, recompute="selective",
                                 recompute_modules=("mla_up_proj",)),
    "moe-tp2-sp-etp1": _shape("moe", MOE, tp=2, etp=1, sequence_parallel=True),
    "output-tp2-sp": _shape("output", replace(GQA, vocab_size=1024), tp=2, sequence_parallel=True),
}


def _rank_worker(rank: int, port: int, queue) -> None:
    torch.set_num_threads(1)
    from primus_ext.measure.shims import ParallelLayout, parallel_context

    result: dict[str, int | str] = {}
    try:
        with parallel_context(ParallelLayout(tp=2, world=2), device="cpu", rank=rank, master_port=port):
            for name, shape in SEQUENCE_PARALLEL.items():
                result[name] = _measured(shape, distributed=True)
    except Exception as err:  # reported to the parent, which fails the test with it
        result["error"] = repr(err)
    queue.put((rank, result))


@pytest.mark.slow
def test_activation_bytes_with_sequence_parallel_tp2_gloo():
    """Two real ranks (gloo): megatron splits heads/ffn and, with SP, the sequence of norms/inputs."""
    from primus_ext.measure.shims import free_port

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank_worker, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=180) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    for rank in (0, 1):
        assert "error" not in results[rank], results[rank]
        for name, shape in SEQUENCE_PARALLEL.items():
            formula = activation_bytes_per_layer(shape, impl=LOCAL)
            assert formula == pytest.approx(results[rank][name], rel=TOLERANCE), (rank, name)
    sp, no_sp = results[0]["dense-tp2-sp-none"], results[0]["dense-tp2-no-sp"]
    assert sp < no_sp  # SP shards the norms and linear inputs


def test_shared_expert_gate_bytes_match_saved_tensors(one_rank_world):
    """``moe_shared_expert_gate`` keeps the shared experts' output and the gate score for the backward: the formula's
    difference with and without the gate equals the measured one (a few % of the layer: below ``TOLERANCE``)."""
    plain, gated = _shape("moe", MOE), _shape("moe", replace(MOE, moe_shared_expert_gate=True))
    measured = _measured(gated) - _measured(plain)
    formula = activation_bytes_per_layer(gated, impl=LOCAL) - activation_bytes_per_layer(plain, impl=LOCAL)
    assert measured > 0 and formula == pytest.approx(measured, rel=1e-6), (formula, measured)
    recomputed = _shape("moe", replace(MOE, moe_shared_expert_gate=True), recompute="selective",
                        recompute_modules=("moe",))
    assert activation_bytes_per_layer(recomputed, impl=LOCAL) == pytest.approx(_measured(recomputed), rel=TOLERANCE)

