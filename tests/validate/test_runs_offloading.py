"""The reader turns a row's activation CPU offloading into the ExecutionSpec fields megatron-core uses."""

import pytest
from validate_rows import runs_of

BRIDGE = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md"


def test_cpu_offloading_flags(tmp_path):
    first, second, plain = (r.execution for r in runs_of(tmp_path, (
        'NeMo,2025,M,8192,FP8,GB200,64,1,1,,1,,,64,2,256,"megatron_fsdp(FSDP col=64); recipe:[use_megatron_fsdp=True; '
        'cpu_offloading_num_layers=6]",1000,,,,\n'
        'NeMo,2025,M,8192,BF16,GB200,64,1,1,,1,,,64,2,256,"recipe:[cpu_offloading=True; cpu_offloading_num_layers=3; '
        'cpu_offloading_weights=True; cpu_offloading_activations=False]",1000,,,,\n'
        "NeMo,2025,M,8192,BF16,GB200,64,1,1,,1,,,64,2,256,,1000,,,,\n")))
    assert first.cpu_offloading and first.cpu_offloading_num_layers == 6
    assert first.cpu_offloading_activations and not first.cpu_offloading_weights
    assert second.cpu_offloading and second.cpu_offloading_num_layers == 3
    assert second.cpu_offloading_weights and not second.cpu_offloading_activations
    assert not plain.cpu_offloading and plain.cpu_offloading_num_layers == 0


def test_megatron_bridge_loss_implementation_by_recipe_family(tmp_path):
    runs = runs_of(tmp_path, (
        f"{BRIDGE},2025,Llama3-8B,8192,BF16,H100,8,1,1,,1,,,8,1,64,,1000,,,,\n"
        f"{BRIDGE},2025,GPT-OSS-120B,8192,BF16,H100,8,1,1,,1,,,8,1,64,,1000,,,,\n"
        "pytorch/torchtitan,2025,Llama3-8B,8192,BF16,H100,8,1,1,,1,,,8,1,64,,1000,,,,\n"
        f"{BRIDGE},2025,Llama3-8B,8192,BF16,H100,8,1,1,,1,,,8,1,64,recipe:[cross_entropy_fusion_impl=native],"
        "1000,,,,\n"),
        archs="Llama3-8B,8,1024,4096,16,4,32000,,,,,,no,\nGPT-OSS-120B,8,1024,4096,16,4,32000,,,,,,no,\n")
    assert [r.execution.cross_entropy_fusion_impl for r in runs] == ["te", "native", "native", "native"]


def test_torchtitan_selective_is_op_level_and_the_stated_hbm_is_used(tmp_path):
    titan, nemo = runs_of(tmp_path, (
        "pytorch/torchtitan benchmarks,2024,Llama3.1-8B,8192,BF16,H100,8,1,1,,1,,,8,2,16,"
        '"FSDP2 (dp_shard=8); selective activation checkpointing",5762,,,,H100 SXM 96GB HBM2e @500W\n'
        'NeMo,2025,Llama3.1-8B,8192,BF16,H100,8,1,1,,1,,,8,2,16,"recipe:[recompute_modules=core_attn]",'
        "5762,,,,\n"), archs="Llama3.1-8B,8,1024,4096,16,4,32000,,,,,,no,\n")
    assert titan.execution.recompute_granularity == "selective" and titan.execution.selective_ac_option == "op"
    assert titan.system.gpu.hbm_bytes == 96 * 10**9
    assert nemo.execution.selective_ac_option == "modules" and nemo.system.gpu.hbm_bytes == 80 * 10**9
    assert titan.execution.attention_kernel == "flash2" and nemo.execution.attention_kernel == "fused"


def test_fp8_param_gather_from_nvidia_fp8_recipes_or_the_row(tmp_path):
    runs = runs_of(tmp_path, (
        f"{BRIDGE},2025,Llama3-8B,8192,FP8,H100,8,1,1,,1,,,8,1,64,,1000,,,,\n"
        f"{BRIDGE},2025,Llama3-8B,8192,BF16,H100,8,1,1,,1,,,8,1,64,,1000,,,,\n"
        "AMD-AGI/Primus blog,2025,Llama3-8B,8192,FP8,MI300X,8,1,1,,1,,,8,1,64,,1000,,,,\n"
        "AMD-AGI/Primus blog,2025,Llama3-8B,8192,FP8,MI300X,8,1,1,,1,,,8,1,64,--fp8-param-gather,1000,,,,\n"),
        archs="Llama3-8B,8,1024,4096,16,4,32000,,,,,,no,\n")
    assert [r.execution.fp8_param_gather for r in runs] == [True, False, False, True]


@pytest.mark.parametrize(("flags", "mode"), [
    ("", "none"),
    ("recipe:[cuda_graph_impl=none; cuda_graph_scope=full_iteration]", "none"),
    ("recipe:[cuda_graph_impl=full_iteration; moe_a2a_overlap=True]", "full_iteration"),
    ("recipe:[cuda_graph_impl=local; cuda_graph_scope=full_iteration]", "full_iteration"),
    # a later call overrides an earlier one: TE graphs of attention + router
    ("recipe:[cuda_graph_impl=full_iteration; cuda_graph_impl=transformer_engine; "
     "cuda_graph_scope=attn+moe_router+moe_preprocess]", "layers"),
    ("recipe:[cuda_graph_impl=transformer_engine; cuda_graph_scope=moe_router+moe_preprocess]", "none"),
    ("GA=8; recipe:[cuda_graphs=True]", "layers"),
    ('recipe:[cuda_graph_impl=transformer_engine; cuda_graph_scope=["moe_router", "moe_preprocess"]]', "none"),
    ('recipe:[cuda_graph_impl=transformer_engine; cuda_graph_scope=["attn", "mamba"]]', "layers"),
    ("recipe:[external_cuda_graph=True]", "layers"),
    ("final: recompute moe_act+mlp, TE cuda graphs attn+moe_router+moe_preprocess, fp8-param-gather", "layers"),
    ("step6: CUDA Graphs; pp_layout=Et|(tt|)*30L", "none"),  # an intermediate step's prose: scope unknown
    ("recipe:[sequence_parallel=False; calls=_benchmark_common+_enable_hybridep_full_iteration_mxfp8]",
     "full_iteration"),
])
def test_cuda_graph_mode_of_a_row(flags, mode):
    from primus_ext.validate.run_keys import cuda_graph_of

    assert cuda_graph_of(flags) == mode


def test_precision_aware_optimizer_of_a_row():
    from primus_ext.validate.run_keys import optimizer_of

    assert optimizer_of("final: recompute moe_act+mlp, fp8-param-gather, precision-aware optimizer bf16 moments") == {
        "use_precision_aware_optimizer": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}
    assert optimizer_of("recipe:[use_precision_aware_optimizer=True; exp_avg_sq_dtype=fp16]") == {
        "use_precision_aware_optimizer": True, "exp_avg_dtype": "fp32", "exp_avg_sq_dtype": "fp16"}
    assert optimizer_of("recipe:[recompute_modules=core_attn]") == {}
