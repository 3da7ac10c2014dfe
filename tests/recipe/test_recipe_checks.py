"""One failing recipe per legality rule; every problem is listed at once, at the key's path."""

from __future__ import annotations

import pytest
from recipe_data import BASE, MOE

from primus_ext.errors import RecipeError
from primus_ext.recipe import check, load_recipe

SP2 = {"tensor_model_parallel_size": 2, "sequence_parallel": True}

# (name, base, changes, expected problem path, a word of the message) -- all on one mi300x node (8 GPUs)
RULES = [
    ("world", BASE, {"tensor_model_parallel_size": 3}, "tensor_model_parallel_size", "world size"),
    ("world_pp", BASE, {"pipeline_model_parallel_size": 3}, "pipeline_model_parallel_size", "world size"),
    ("heads_tp", BASE, {"num_attention_heads": 12, "num_query_groups": 12, "hidden_size": 1536,
                        "tensor_model_parallel_size": 8},
     "num_attention_heads", "TP=8"),
    ("groups_tp", BASE, {"num_attention_heads": 24, "hidden_size": 1536, "num_query_groups": 6,
                          "tensor_model_parallel_size": 4}, "num_query_groups", "TP=4"),
    ("groups_heads", BASE, {"num_query_groups": 6}, "num_query_groups", "num_attention_heads"),
    ("ffn_tp", BASE, {"ffn_hidden_size": 4098, "tensor_model_parallel_size": 4}, "ffn_hidden_size", "TP=4"),
    ("seq_cp", BASE, {"context_parallel_size": 2, "seq_length": 2050}, "seq_length", "2*CP"),
    ("seq_sp", BASE, {**SP2, "seq_length": 2049}, "seq_length", "sequence parallel"),
    ("vpp_pp1", BASE, {"num_virtual_stages_per_pipeline_rank": 2}, "num_virtual_stages_per_pipeline_rank", "PP"),
    ("tp_overlap_sp", BASE, {"tensor_model_parallel_size": 2, "sequence_parallel": False, "tp_comm_overlap": True},
     "tp_comm_overlap", "sequence_parallel"),
    ("gbs", BASE, {"global_batch_size": 60}, "global_batch_size", "MBS*DP"),
    ("interleaved_m", BASE, {"global_batch_size": 12, "pipeline_model_parallel_size": 2,
                             "num_virtual_stages_per_pipeline_rank": 2}, "global_batch_size", "interleaved"),
    ("ep_dense", BASE, {"expert_model_parallel_size": 2}, "expert_model_parallel_size", "num_experts"),
    ("experts_ep", MOE, {"num_experts": 6, "expert_model_parallel_size": 4}, "num_experts", "EP=4"),
    ("topk", MOE, {"moe_router_topk": 10}, "moe_router_topk", "num_experts"),
    ("folding", MOE, {"expert_model_parallel_size": 8, "expert_tensor_parallel_size": 2},
     "expert_model_parallel_size", "folding"),
    ("moe_ffn_etp", MOE, {**SP2, "moe_ffn_hidden_size": 1025}, "moe_ffn_hidden_size", "ETP=2"),
    ("shared_tp", MOE, {**SP2, "moe_shared_expert_intermediate_size": 1025},
     "moe_shared_expert_intermediate_size", "TP=2"),
    ("offload_pp", BASE, {"cpu_offloading": True, "cpu_offloading_num_layers": 1, "pipeline_model_parallel_size": 2},
     "cpu_offloading", "pipeline"),
    ("offload_recompute", BASE, {"cpu_offloading": True, "cpu_offloading_num_layers": 1,
                                 "recompute_granularity": "selective"}, "cpu_offloading", "recompute"),
    ("graphs_full_recompute", BASE, {"cuda_graph_impl": "local", "recompute_granularity": "full",
                                      "recompute_method": "uniform", "recompute_num_layers": 1},
     "recompute_granularity", "full-iteration graph"),
    ("offload_graphs", BASE, {"cpu_offloading": True, "cpu_offloading_num_layers": 1, "cuda_graph_impl": "local"},
     "cpu_offloading", "CUDA graphs"),
    ("offload_layers", BASE, {"cpu_offloading": True, "cpu_offloading_num_layers": 999},
     "cpu_offloading_num_layers", "num_layers"),
    ("moe_sp", MOE, {"tensor_model_parallel_size": 2, "sequence_parallel": False}, "sequence_parallel", "MoE"),
    ("moe_bias_etp", MOE, {**SP2, "add_bias_linear": True}, "expert_tensor_parallel_size", "ETP=1"),
    ("shared_overlap", MOE, {"moe_shared_expert_intermediate_size": 1024, "moe_shared_expert_overlap": True,
                             "moe_token_dispatcher_type": "allgather"}, "moe_shared_expert_overlap", "alltoall"),
    ("ep_overlap", MOE, {"overlap_moe_expert_parallel_comm": True, "moe_token_dispatcher_type": "alltoall"},
     "overlap_moe_expert_parallel_comm", "EP > 1"),
    ("ep_overlap_mtp_pp1", MOE, {"overlap_moe_expert_parallel_comm": True, "moe_token_dispatcher_type": "alltoall",
                                 "expert_model_parallel_size": 2, "mtp_num_layers": 1},
     "overlap_moe_expert_parallel_comm", "MTP layer needs PP > 1"),
    ("fp8_param_bf16", BASE, {"fp8_param_gather": True}, "fp8_param_gather", "fp8 mode"),
    ("moe_overlap_dense", BASE, {"overlap_moe_expert_parallel_comm": True}, "overlap_moe_expert_parallel_comm",
     "dense"),
    ("selective_n", BASE, {"recompute_granularity": "selective", "recompute_num_layers": 2},
     "recompute_num_layers", "selective"),
    ("full_method", BASE, {"recompute_granularity": "full", "recompute_num_layers": 2}, "recompute_method",
     "recompute_method"),
    ("full_n", BASE, {"recompute_granularity": "full", "recompute_method": "block"}, "recompute_num_layers",
     "recompute_num_layers"),
    ("uniform_0", BASE, {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 0},
     "recompute_num_layers", "at least 1"),
    ("block_too_many", BASE, {"recompute_granularity": "full", "recompute_method": "block",
                              "recompute_num_layers": 9}, "recompute_num_layers", "8 layers"),
    ("param_gather_distopt", BASE, {"overlap_param_gather": True, "overlap_grad_reduce": True},
     "overlap_param_gather", "distributed optimizer"),
    ("param_gather_grad", BASE, {"overlap_param_gather": True, "use_distributed_optimizer": True},
     "overlap_param_gather", "overlap_grad_reduce"),
    ("fsdp2_distopt", BASE, {"use_torch_fsdp2": True, "use_distributed_optimizer": True},
     "use_distributed_optimizer", "FSDP2"),
    ("layers_pp", BASE, {"num_layers": 9, "pipeline_model_parallel_size": 2}, "num_layers", "PP*VPP"),
    ("layers_vpp", BASE, {"pipeline_model_parallel_size": 2, "num_virtual_stages_per_pipeline_rank": 3},
     "num_layers", "PP*VPP"),
    ("uneven", BASE, {"pipeline_model_parallel_size": 4, "decoder_first_pipeline_num_layers": 3},
     "decoder_first_pipeline_num_layers", "middle"),
    ("layout", BASE, {"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "Et|tL"},
     "pipeline_model_parallel_layout", "decoder layers"),
    ("chunks", BASE, {"pipeline_model_parallel_size": 8, "num_virtual_stages_per_pipeline_rank": 4},
     "num_virtual_stages_per_pipeline_rank", "chunks"),
    ("chunks_pp", BASE, {"pipeline_model_parallel_size": 16, "global_batch_size": 64}, "pipeline_model_parallel_size",
     "chunks"),
]


@pytest.mark.parametrize(("name", "base", "changes", "path", "word"), RULES, ids=[r[0] for r in RULES])
def test_each_rule_fails_at_its_path(write, name, base, changes, path, word):
    with pytest.raises(RecipeError) as err:
        load_recipe(write(f"{name}.yaml", {**base, **changes}))
    hits = [p for p in err.value.problems if p.path == path and word in f"{p.message} {p.fix}"]
    assert hits, [str(p) for p in err.value.problems]
    assert hits[0].fix, "every problem carries a fix"


def test_every_problem_is_listed_together(write):
    bad = {**MOE, "tensor_model_parallel_size": 2, "sequence_parallel": False, "global_batch_size": 61,
           "moe_router_topk": 10, "recompute_granularity": "selective", "recompute_num_layers": 2,
           "overlap_param_gather": True, "context_parallel_size": 2, "seq_length": 2050}
    with pytest.raises(RecipeError) as err:
        load_recipe(write("many.yaml", bad))
    paths = {p.path for p in err.value.problems}
    assert {"sequence_parallel", "global_batch_size", "moe_router_topk", "recompute_num_layers",
            "overlap_param_gather", "seq_length"} <= paths
    text = str(err.value)
    assert text.count("\n  - ") == len(err.value.problems) >= 6


def test_paths_point_where_the_user_wrote_the_value(write):
    write("models/m.yaml", {k: v for k, v in BASE.items() if k != "global_batch_size"})
    path = write("exp.yaml", {"modules": {"pre_trainer": {
        "framework": "megatron", "model": "m.yaml",
        "overrides": {"tensor_model_parallel_size": 3, "global_batch_size": 60}}}})
    with pytest.raises(RecipeError) as err:
        load_recipe(path, ["num_virtual_stages_per_pipeline_rank=2"])
    paths = {p.path for p in err.value.problems}
    assert "modules.pre_trainer.overrides.tensor_model_parallel_size" in paths
    assert "cli.num_virtual_stages_per_pipeline_rank" in paths
    with pytest.raises(RecipeError) as err:
        load_recipe(path, ["tensor_model_parallel_size=2", "num_query_groups=3"])
    assert "cli.num_query_groups" in {p.path for p in err.value.problems}


def test_validate_false_returns_problems_instead(write):
    recipe = load_recipe(write("r.yaml", {**BASE, "global_batch_size": 60}), validate=False)
    assert [p.path for p in recipe.problems] == ["global_batch_size"]
    assert check(recipe.model, recipe.execution, recipe.system) == list(recipe.problems)


def test_legal_recipe_has_no_problems(write):
    recipe = load_recipe(write("ok.yaml", {**MOE, **SP2, "expert_model_parallel_size": 4,
                                           "expert_tensor_parallel_size": 1, "pipeline_model_parallel_size": 2,
                                           "num_virtual_stages_per_pipeline_rank": 2}))
    assert check(recipe.model, recipe.execution, recipe.system) == []
