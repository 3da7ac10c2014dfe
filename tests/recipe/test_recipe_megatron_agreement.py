"""check() agrees with megatron-core's own TransformerConfig validation on the rules both enforce.

Independent reference: constructing megatron-core 0.16's ``TransformerConfig`` runs its
``__post_init__`` assertions (heads / query groups vs TP, recompute settings, uneven pipeline
stages, MoE bias vs ETP, shared-expert overlap vs dispatcher, EP without experts).
"""

from __future__ import annotations

import pytest
from recipe_data import BASE, MOE, megatron_config_accepts

from primus_ext.hardware import load_system
from primus_ext.recipe import check, resolve_specs

CASES = [
    ("legal", BASE, {}),
    ("heads_tp", BASE, {"num_attention_heads": 12, "num_query_groups": 12, "hidden_size": 1536,
                        "tensor_model_parallel_size": 8}),
    ("groups_tp", BASE, {"num_attention_heads": 24, "hidden_size": 1536, "num_query_groups": 6,
                          "tensor_model_parallel_size": 4}),
    ("groups_below_tp", BASE, {"num_query_groups": 2, "tensor_model_parallel_size": 4}),
    ("full_no_layers", BASE, {"recompute_granularity": "full", "recompute_method": "block"}),
    ("full_no_method", BASE, {"recompute_granularity": "full", "recompute_num_layers": 2}),
    ("selective_layers", BASE, {"recompute_granularity": "selective", "recompute_num_layers": 2}),
    ("full_ok", BASE, {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}),
    ("uneven_bad", BASE, {"pipeline_model_parallel_size": 4, "decoder_first_pipeline_num_layers": 3}),
    ("uneven_ok", BASE, {"pipeline_model_parallel_size": 4, "decoder_first_pipeline_num_layers": 2,
                         "decoder_last_pipeline_num_layers": 2}),
    ("ep_dense", BASE, {"expert_model_parallel_size": 2}),
    ("moe_ok", MOE, {"expert_model_parallel_size": 4}),
    ("moe_bias_etp", MOE, {"add_bias_linear": True, "tensor_model_parallel_size": 2, "sequence_parallel": True}),
    ("shared_overlap", MOE, {"moe_shared_expert_intermediate_size": 1024, "moe_shared_expert_overlap": True,
                             "moe_token_dispatcher_type": "allgather"}),
    ("offload_ok", BASE, {"cpu_offloading": True, "cpu_offloading_num_layers": 2}),
    ("offload_pp", BASE, {"cpu_offloading": True, "cpu_offloading_num_layers": 2, "pipeline_model_parallel_size": 2}),
    ("offload_recompute", BASE, {"cpu_offloading": True, "cpu_offloading_num_layers": 2,
                                 "recompute_granularity": "selective"}),
    ("offload_all_layers", BASE, {"cpu_offloading": True, "cpu_offloading_num_layers": 99}),
]


def _megatron_accepts(model, e) -> bool:
    import torch
    kwargs = dict(
        num_layers=model.num_layers, hidden_size=model.hidden_size, ffn_hidden_size=model.ffn_hidden_size,
        num_attention_heads=model.num_attention_heads, num_query_groups=model.num_query_groups,
        kv_channels=model.kv_channels, add_bias_linear=model.add_bias_linear, bf16=True,
        tensor_model_parallel_size=e.tp, pipeline_model_parallel_size=e.pp, pipeline_dtype=torch.bfloat16,
        sequence_parallel=e.sequence_parallel, expert_model_parallel_size=e.ep,
        expert_tensor_parallel_size=e.etp, num_layers_in_first_pipeline_stage=e.decoder_first_pipeline_num_layers,
        num_layers_in_last_pipeline_stage=e.decoder_last_pipeline_num_layers,
        recompute_granularity=e.recompute_granularity, recompute_method=e.recompute_method,
        recompute_num_layers=e.recompute_num_layers, num_moe_experts=model.num_experts,
        moe_ffn_hidden_size=model.moe_ffn_hidden_size, moe_router_topk=model.moe_router_topk,
        moe_shared_expert_intermediate_size=model.moe_shared_expert_intermediate_size,
        moe_shared_expert_overlap=e.moe_shared_expert_overlap, moe_token_dispatcher_type=e.moe_token_dispatcher_type,
        cpu_offloading=e.cpu_offloading, cpu_offloading_num_layers=e.cpu_offloading_num_layers,
    )
    return megatron_config_accepts(**kwargs)


@pytest.mark.parametrize(("name", "base", "changes"), CASES, ids=[c[0] for c in CASES])
def test_check_agrees_with_megatron_core(name, base, changes):
    pytest.importorskip("megatron.core")
    model, execution, problems = resolve_specs({**base, **changes}, load_system("mi300x", 1))
    assert not problems
    ours = check(model, execution, load_system("mi300x", 1))
    assert (not ours) == _megatron_accepts(model, execution), [str(p) for p in ours]
