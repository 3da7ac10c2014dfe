"""Group-limited routing fields travel ModelSpec -> LayerArch of the MoE kind, without moving the
timing-store keys of shapes that do not use them."""

from dataclasses import asdict, replace

from primus_ext.measure.store import shape_from_dict
from primus_ext.model.layers import rank_shapes
from primus_ext.model.rank_shape import LayerArch, RankShape
from primus_ext.specs import ExecutionSpec, ModelSpec

MODEL = ModelSpec(num_layers=4, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16, num_query_groups=4,
                  kv_channels=64, vocab_size=32000, num_experts=64, moe_router_topk=8, moe_ffn_hidden_size=512,
                  moe_layer_pattern=(False, True, True, True), moe_router_num_groups=8, moe_router_group_topk=4)


def test_carried_into_the_moe_kind_only():
    shapes = rank_shapes(MODEL, ExecutionSpec(expert_model_parallel_size=8, data_parallel_size=8))
    assert (shapes["moe"].arch.moe_router_num_groups, shapes["moe"].arch.moe_router_group_topk) == (8, 4)
    for kind in ("dense", "embedding", "output"):
        assert (shapes[kind].arch.moe_router_num_groups, shapes[kind].arch.moe_router_group_topk) == (0, 0)
    plain = rank_shapes(replace(MODEL, moe_router_num_groups=None, moe_router_group_topk=None), ExecutionSpec())
    assert plain["moe"].arch.moe_router_group_topk == 0
    assert plain["moe"] != rank_shapes(MODEL, ExecutionSpec())["moe"]  # distinct memo entries
    assert plain["dense"] == rank_shapes(MODEL, ExecutionSpec())["dense"]


def test_keys_of_ungrouped_shapes_unchanged():
    # golden keys computed by the code before these fields existed (commit ce1e263)
    moe = LayerArch(hidden_size=1024, num_attention_heads=16, num_query_groups=4, kv_channels=64, ffn_hidden_size=0,
                    num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=1024)
    dense = LayerArch(hidden_size=1024, num_attention_heads=16, num_query_groups=4, kv_channels=64,
                      ffn_hidden_size=4096)
    assert RankShape(kind="moe", arch=moe, ep=4).key() == "moe-dbe3eff9e79520e2"
    assert RankShape(kind="dense", arch=dense, tp=2).key() == "dense-7903c5a9eb082e28"
    grouped = RankShape(kind="moe", arch=replace(moe, moe_router_num_groups=4, moe_router_group_topk=2), ep=4)
    assert grouped.key() != "moe-dbe3eff9e79520e2"
    assert shape_from_dict(asdict(grouped)) == grouped  # the store's round trip keeps them


def test_scaled_keeps_grouping_only_while_experts_divide():
    shape = rank_shapes(MODEL, ExecutionSpec(expert_model_parallel_size=8, data_parallel_size=8))["moe"]
    top2 = replace(shape, arch=replace(shape.arch, moe_router_topk=2))
    small = top2.scaled(0.5)  # 64 -> 32 experts: 8 groups still divide
    assert small.arch.num_experts == 32
    assert (small.arch.moe_router_num_groups, small.arch.moe_router_group_topk) == (8, 4)
    odd = replace(top2, ep=4, arch=replace(top2.arch, num_experts=48, moe_router_num_groups=16)).scaled(0.5)
    assert odd.arch.num_experts == 24 and (odd.arch.moe_router_num_groups, odd.arch.moe_router_group_topk) == (0, 0)
