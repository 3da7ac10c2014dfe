"""A validation row is a user's recipe: the specs ``read_runs`` gives a row equal those of the recipe a user would
write for that run, resolved by ``recipe.resolve.resolve_all`` (issue 54 part 4). One row per family: dense (Llama,
Megatron-Bridge), MoE in FP8, MLA + MoE with group-limited routing in MXFP8, a hybrid Mamba model with MTP, torch
FSDP2 (torchtitan, FP8 rowwise, op-level selective AC), Megatron FSDP and LoRA fine-tuning (MLPerf)."""

from __future__ import annotations

import pytest
from validate_rows import runs_of

from primus_ext.recipe.resolve import resolve_all

BRIDGE = "NVIDIA-NeMo/Megatron-Bridge perf"
TORCHTITAN = "pytorch/torchtitan benchmarks"
# the keys of every Megatron-Bridge row: distributed optimizer with overlapped reduce / gather, fused loss
BRIDGE_KEYS = dict(use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True,
                   cross_entropy_loss_fusion=True, bf16=True, add_bias_linear=False,
                   untie_embeddings_and_output_weights=True, position_embedding_type="rope",
                   normalization="RMSNorm")

CASES = {
    "dense": (
        "L,8,1024,4096,16,4,32000,,,,,,no,SwiGLU\n",
        f"{BRIDGE},2026-01-01,L,4096,BF16,H100,16,2,2,,1,,,4,1,64,,1000,,,,\n",
        dict(BRIDGE_KEYS, num_layers=8, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
             group_query_attention=True, num_query_groups=4, vocab_size=32000, swiglu=True, seq_length=4096,
             tensor_model_parallel_size=2, pipeline_model_parallel_size=2, sequence_parallel=True,
             tp_comm_overlap=True, micro_batch_size=1, global_batch_size=64,
             cross_entropy_fusion_impl="native"),  # "L" is no Llama family name: megatron-core's native loss
    ),
    "moe_fp8": (
        "Mixtral-S,8,1024,3584,16,8,32000,8,2,3584,0,0,no,SwiGLU\n",
        f"{BRIDGE},2026-01-01,Mixtral-S,4096,FP8 (delayed scaling),H100,16,1,1,,1,8,,16,1,128,,1000,,,,\n",
        dict(BRIDGE_KEYS, num_layers=8, hidden_size=1024, ffn_hidden_size=3584, num_attention_heads=16,
             group_query_attention=True, num_query_groups=8, vocab_size=32000, swiglu=True, num_experts=8,
             moe_router_topk=2, moe_ffn_hidden_size=3584, seq_length=4096, expert_model_parallel_size=8,
             expert_tensor_parallel_size=1, micro_batch_size=1, global_batch_size=128, fp8="hybrid",
             fp8_recipe="delayed", fp8_param_gather=True,  # NeMo / Bridge fp8 recipes gather fp8 weights
             moe_token_dispatcher_type="alltoall", moe_grouped_gemm=True,
             moe_router_force_load_balancing=True),
    ),
    "mla_mxfp8": (
        "DeepSeek-S,6,1024,4096,16,MLA,32000,16,4,512,1 (512),1,yes,\"q_lora_rank 384, kv_lora_rank 128, "
        "qk_head_dim 64, qk_pos_emb_head_dim 32, v_head_dim 64; group-limited (4 groups, top-2 groups)\"\n",
        f"{BRIDGE},2026-01-01,DeepSeek-S,4096,MXFP8,B200,16,1,2,,1,8,1,8,1,256,"
        "recipe:[recompute_modules=mla_up_proj; moe_flex_dispatcher_backend=hybridep],1000,,,,\n",
        dict(BRIDGE_KEYS, num_layers=6, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
             multi_latent_attention=True, q_lora_rank=384, kv_lora_rank=128, qk_head_dim=64,
             qk_pos_emb_head_dim=32, v_head_dim=64, kv_channels=64, vocab_size=32000, swiglu=True, num_experts=16,
             moe_router_topk=4, moe_ffn_hidden_size=512, moe_shared_expert_intermediate_size=512,
             first_k_dense_replace=1, moe_router_num_groups=4, moe_router_group_topk=2, seq_length=4096,
             pipeline_model_parallel_size=2, expert_model_parallel_size=8, expert_tensor_parallel_size=1,
             micro_batch_size=1, global_batch_size=256, fp8="hybrid", fp8_recipe="mxfp8", fp8_param_gather=True,
             recompute_granularity="selective", recompute_modules=["mla_up_proj"], moe_token_dispatcher_type="flex",
             moe_grouped_gemm=True, moe_router_force_load_balancing=True,
             cross_entropy_fusion_impl="te"),  # a DeepSeek: TE's loss
    ),
    "hybrid": (
        "Nemotron-H-S,8,1024,512,16,2,32000,16,4,512,1 (1024),,no,\"hybrid Mamba, pattern MEM*EMEM/*E, "
        "mamba_num_heads 32, mamba_head_dim 64, kv_channels 64, squared-ReLU\"\n",
        f"{BRIDGE},2026-01-01,Nemotron-H-S,8192,BF16,GB200,8,1,1,,1,8,1,8,2,512,"
        "recipe:[cuda_graph_impl=transformer_engine; cuda_graph_scope=attn+mamba+moe_router],1000,,,,\n",
        dict(BRIDGE_KEYS, model_type="mamba", is_hybrid_model=True, hybrid_override_pattern="MEM*EMEM/*E",
             mtp_num_layers=1, position_embedding_type="none", num_layers=8, hidden_size=1024, ffn_hidden_size=512,
             num_attention_heads=16, group_query_attention=True, num_query_groups=2, kv_channels=64,
             mamba_num_heads=32, mamba_head_dim=64, vocab_size=32000, squared_relu=True, num_experts=16,
             moe_router_topk=4, moe_ffn_hidden_size=512, moe_shared_expert_intermediate_size=1024,
             seq_length=8192, expert_model_parallel_size=8, expert_tensor_parallel_size=1, micro_batch_size=2,
             global_batch_size=512, cuda_graph_impl="transformer_engine", cuda_graph_scope=["attn", "mamba",
                                                                                           "moe_router"],
             moe_token_dispatcher_type="alltoall", moe_grouped_gemm=True,
             moe_router_force_load_balancing=True),
    ),
    "torch_fsdp2": (
        "Llama-S,8,1024,4096,16,4,32000,,,,,,no,SwiGLU\n",
        f"{TORCHTITAN},2026-01-01,Llama-S,8192,FP8 (rowwise),H100,16,1,1,,1,,,16,1,16,"
        "per-op selective AC,1000,,,,\n",
        dict(BRIDGE_KEYS, use_distributed_optimizer=False, num_layers=8, hidden_size=1024, ffn_hidden_size=4096,
             num_attention_heads=16, group_query_attention=True, num_query_groups=4, vocab_size=32000, swiglu=True,
             seq_length=8192, micro_batch_size=1, global_batch_size=16, fp8="hybrid", fp8_recipe="rowwise",
             use_torch_fsdp2=True, recompute_granularity="selective",
             # torchtitan's own keys: FSDP2 reduce in fp32, op-level selective AC, SDPA attention
             mixed_precision_reduce="float32", selective_ac_option="op", attn_type="sdpa"),
    ),
    "megatron_fsdp": (
        "Llama-M,8,1024,4096,16,4,32000,,,,,,no,SwiGLU\n",
        f"{BRIDGE},2026-01-01,Llama-M,4096,BF16,B200,16,1,1,,1,,,16,2,64,recipe:[use_megatron_fsdp=True],1000,,,,\n",
        dict(BRIDGE_KEYS, use_distributed_optimizer=False, num_layers=8, hidden_size=1024, ffn_hidden_size=4096,
             num_attention_heads=16, group_query_attention=True, num_query_groups=4, vocab_size=32000, swiglu=True,
             seq_length=4096, micro_batch_size=2, global_batch_size=64, use_megatron_fsdp=True,
             data_parallel_sharding_strategy="optim_grads_params", cross_entropy_fusion_impl="te"),  # a Llama
    ),
    "lora": (
        "Llama2-S,8,1024,4096,16,4,32000,,,,,,no,SwiGLU\n",
        "MLPerf Training llama2_70b_lora,2025-06-04,Llama2-S,8192,FP8 (delayed scaling),MI300X,8,1,1,,1,,,8,1,8,"
        "recompute=full/block/4 layers; LoRA r=16 alpha=32 on attention (qkv+proj),1000,,,,fp8 params\n",
        # LoRA runs in Primus's SFT trainer (stage: sft, its lora block): a Primus recipe
        dict(BRIDGE_KEYS, num_layers=8, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
             group_query_attention=True, num_query_groups=4, vocab_size=32000, swiglu=True, seq_length=8192,
             micro_batch_size=1, global_batch_size=8, fp8="hybrid", fp8_recipe="delayed", fp8_param_gather=True,
             recompute_granularity="full", recompute_method="block", recompute_num_layers=4, stage="sft",
             lora={"enabled": True, "dim": 16, "target_modules": ["linear_qkv", "linear_proj"]}),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_row_projects_the_specs_of_the_recipe_a_user_writes_for_it(tmp_path, case):
    arch, row, recipe = CASES[case]
    (run,) = runs_of(tmp_path, row, arch)
    assert run.model is not None, run.skipped_reason
    primus = recipe.get("stage") == "sft"
    model, execution, problems, _ = resolve_all(recipe, run.system, name=run.model_name, primus=primus, environ={})
    assert not problems
    assert run.model == model
    assert run.execution == execution


def test_the_row_families_differ_where_their_recipes_do(tmp_path):
    """The comparison is not vacuous: the families give the spec fields their keys set."""
    runs = {case: runs_of(tmp_path / case, CASES[case][1], CASES[case][0])[0] for case in CASES
            if (tmp_path / case).mkdir() is None}
    assert runs["hybrid"].model.hybrid_layer_pattern == "MEM*EMEM" and runs["hybrid"].model.mtp_num_layers == 1
    assert runs["mla_mxfp8"].model.moe_layer_pattern == (False, True, True, True, True, True)
    assert runs["mla_mxfp8"].execution.fp8_recipe == "mxfp8"
    titan = runs["torch_fsdp2"].execution
    assert (titan.fsdp, titan.fsdp_reduce_dtype, titan.attention_kernel, titan.selective_ac_option,
            titan.fp8_recipe) == ("torch_fsdp2", "fp32", "flash2", "op", "rowwise")
    assert runs["megatron_fsdp"].execution.fsdp == "megatron_fsdp"
    assert runs["dense"].execution.sequence_parallel and runs["dense"].execution.tp_comm_overlap
    assert (runs["lora"].execution.lora_rank, runs["lora"].execution.recompute_method) == (16, "block")
