"""``layer_params`` equals the parameter count of the real megatron-core modules, per rank.

One-rank world: ``primus_ext.measure.build.build_layer`` builds per-rank sizes (heads/TP, ffn/TP,
experts/EP at ffn/ETP, MLA down-projections whole = the TE layout). Two-rank gloo world: the real TP=2 /
EP=2 split done by megatron itself (local spec: MLA down-projections column-split).
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from primus_ext.model.layers import layer_params  # noqa: E402
from primus_ext.model.rank_shape import LayerArch, RankShape  # noqa: E402

GQA = LayerArch(hidden_size=128, num_attention_heads=8, num_query_groups=4, kv_channels=16, ffn_hidden_size=384)
MOE = replace(GQA, ffn_hidden_size=0, num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=128,
              moe_shared_expert_intermediate_size=256)
MLA = replace(GQA, num_query_groups=8, multi_latent_attention=True, q_lora_rank=64, kv_lora_rank=32,
              qk_head_dim=16, qk_pos_emb_head_dim=8, v_head_dim=16, qk_layernorm=True)

CASES = {
    "dense-gqa": RankShape(kind="dense", arch=GQA),
    "dense-tp2": RankShape(kind="dense", arch=GQA, tp=2),
    "dense-layernorm-bias-qknorm": RankShape(kind="dense", arch=replace(
        GQA, normalization="LayerNorm", add_bias_linear=True, qk_layernorm=True), tp=2),
    "dense-gelu-mha": RankShape(kind="dense", arch=replace(GQA, num_query_groups=8, activation="gelu")),
    "moe-shared": RankShape(kind="moe", arch=MOE),
    "moe-tp2-etp1": RankShape(kind="moe", arch=MOE, tp=2, etp=1),
    "moe-no-shared": RankShape(kind="moe", arch=replace(MOE, moe_shared_expert_intermediate_size=0)),
    "moe-shared-gate-tp2": RankShape(kind="moe", arch=replace(MOE, moe_shared_expert_gate=True), tp=2, etp=1),
    "first-k-dense-of-moe-model": RankShape(kind="dense", arch=replace(GQA, ffn_hidden_size=512)),
    "mla-q-lora": RankShape(kind="dense", arch=MLA),
    "mla-no-q-lora-tp2": RankShape(kind="dense", arch=replace(MLA, q_lora_rank=None), tp=2),
    "mla-moe": RankShape(kind="moe", arch=replace(MOE, **{k: getattr(MLA, k) for k in (
        "num_query_groups", "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
        "qk_pos_emb_head_dim", "v_head_dim", "qk_layernorm")})),
    "embedding-tp2": RankShape(kind="embedding", arch=replace(GQA, vocab_size=512), tp=2),
    "output": RankShape(kind="output", arch=replace(GQA, vocab_size=512)),
}


@pytest.fixture(scope="module")
def one_rank_world():
    from primus_ext.measure.shims import parallel_context

    with parallel_context(device="cpu"):
        yield


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_params_equal_megatron_per_rank(name, one_rank_world):
    from primus_ext.measure.build import build_layer

    shape = CASES[name]
    assert layer_params(shape) == build_layer(shape, device="cpu").param_count


def _rank_counts(rank: int, port: int, queue) -> None:
    torch.set_num_threads(1)
    from primus_ext.measure.build import build_layer
    from primus_ext.measure.shims import ParallelLayout, parallel_context

    counts: dict[str, int | str] = {}
    try:
        with parallel_context(ParallelLayout(tp=2, ep=2, etp=1, world=2), device="cpu", rank=rank,
                              master_port=port):
            for name, shape in _DISTRIBUTED.items():
                counts[name] = build_layer(shape, device="cpu", distributed=True).param_count
    except Exception as err:  # reported to the parent, which fails the test with it
        counts["error"] = repr(err)
    queue.put((rank, counts))


_DISTRIBUTED = {
    "dense": RankShape(kind="dense", arch=GQA, tp=2, etp=1),
    "moe-tp2-ep2-etp1": RankShape(kind="moe", arch=MOE, tp=2, ep=2, etp=1),
    "moe-shared-gate": RankShape(kind="moe", arch=replace(MOE, moe_shared_expert_gate=True), tp=2, ep=2, etp=1),
    "mla": RankShape(kind="dense", arch=MLA, tp=2, etp=1),
}


@pytest.mark.slow
def test_layer_params_equal_megatron_tp2_ep2_gloo():
    """Megatron splits the global sizes itself over a real 2-rank group (router kept whole)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    from primus_ext.measure.shims import free_port

    port = free_port()
    procs = [ctx.Process(target=_rank_counts, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    for rank in (0, 1):
        assert "error" not in results[rank], results[rank]
        for name, shape in _DISTRIBUTED.items():
            assert results[rank][name] == layer_params(shape, impl="local"), (rank, name)
