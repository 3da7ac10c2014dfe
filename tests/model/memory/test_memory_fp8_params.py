"""fp8 GEMMs with bf16 parameters vs ``fp8_param_gather``, by scaling recipe and GPU generation (hand sums
of what Transformer Engine keeps for the transformer layers' GEMM weights; embedding and output layer stay
bf16).

With bf16 parameters megatron-core's TE layers get ``is_first_microbatch`` and TE keeps each weight's fp8
copy for the step's other micro-batches. With ``fp8_param_gather`` the parameter is the fp8 tensor, no
cache. Per-tensor scaling keeps data + transpose on Hopper (1 + 1 B: cuBLASLt's FP8 GEMMs take only TN
there) and the data alone on Blackwell; MXFP8 keeps row- and column-wise data and a scale byte per 32
elements (2 x 33/32 B). Gradients and optimizer state are unchanged (fp32 main grads, fp32 master).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.memory import estimate_memory, peak_bytes
from primus_ext.specs import ExecutionSpec, ModelSpec

GQA = ModelSpec(name="gqa", num_layers=8, hidden_size=1024, ffn_hidden_size=2816, num_attention_heads=16,
                num_query_groups=4, kv_channels=64, vocab_size=32000, activation="swiglu")
H100 = load_system("h100", 4)
B200 = load_system("b200", 4)
EDGE = 2 * 32000 * 1024 + 1024
"""Untied embedding + output layer + final norm parameters of GQA (the vocabulary is a multiple of 128: no
padding)."""

# (system, recipe) -> (layer weight bytes with fp8_param_gather, cache bytes with bf16 parameters)
EXPECTED = {
    ("h100", "delayed"): (2.0, 2.0), ("h100", "tensorwise"): (2.0, 2.0), ("h100", "blockwise"): (2.0, 2.0),
    ("b200", "delayed"): (1.0, 1.0), ("b200", "tensorwise"): (1.0, 1.0), ("b200", "mxfp8"): (2.0625, 2.0625),
    ("h100", "rowwise"): (2.0, 0.0),
}


@pytest.mark.parametrize("pp", [1, 2])
@pytest.mark.parametrize(("gpu", "recipe"), sorted(EXPECTED))
def test_fp8_weight_bytes_by_recipe_and_generation(pp, gpu, recipe):
    system = {"h100": H100, "b200": B200}[gpu]
    weight_pg, cache = EXPECTED[(gpu, recipe)]
    base = dict(pipeline_model_parallel_size=pp, data_parallel_size=32 // pp, micro_batch_size=1,
                global_batch_size=64, seq_length=2048, use_distributed_optimizer=True)
    bf16 = estimate_memory(GQA, ExecutionSpec(**base), system)
    fp8 = estimate_memory(GQA, ExecutionSpec(**base, precision="fp8", fp8_recipe=recipe), system)
    pg_exe = ExecutionSpec(**base, precision="fp8", fp8_recipe=recipe, fp8_param_gather=True)
    fp8_params = estimate_memory(GQA, pg_exe, system)
    edges = 0
    for s_bf16, s_fp8, s_pg in zip(bf16.stages, fp8.stages, fp8_params.stages, strict=True):
        count = s_bf16.detail["params.count"]
        edge = s_bf16.detail["params.embedding_output_mtp"] / 2
        edges += edge
        assert s_bf16.params_bytes == 2 * count
        assert s_fp8.params_bytes == pytest.approx(2 * count + cache * (count - edge))
        assert s_fp8.detail["params.fp8_weight_cache"] == pytest.approx(cache * (count - edge))
        assert s_pg.params_bytes == pytest.approx(weight_pg * (count - edge) + 2 * edge)
        assert s_pg.detail["params.fp8_weight_cache"] == 0
        assert s_fp8.grads_bytes == s_pg.grads_bytes == 4 * count
        assert s_fp8.optimizer_bytes == s_pg.optimizer_bytes
    assert edges == EDGE
    for e in (ExecutionSpec(**base, precision="fp8", fp8_recipe=recipe), pg_exe):
        assert peak_bytes(GQA, e, system) == estimate_memory(GQA, e, system).peak_bytes


def test_peak_without_a_system_counts_the_conservative_formats():
    e = ExecutionSpec(data_parallel_size=32, global_batch_size=64, seq_length=2048, precision="fp8",
                      fp8_recipe="tensorwise", fp8_param_gather=True, use_distributed_optimizer=True)
    assert peak_bytes(GQA, e) == estimate_memory(GQA, e, H100).peak_bytes
    assert peak_bytes(GQA, e, B200) < peak_bytes(GQA, e)


def test_recipe_reads_fp8_param_gather():
    from primus_ext.recipe import load_recipe

    recipe = Path(__file__).resolve().parents[3] / "recipes" / "llama3.1_8B-pretrain.yaml"
    assert load_recipe(recipe, ["fp8_param_gather=true"]).execution.fp8_param_gather
    assert not load_recipe(recipe).execution.fp8_param_gather  # Primus trainer_base.yaml: false
    assert load_recipe(recipe).execution.fp8_recipe == "delayed"  # Primus trainer_base.yaml: delayed
    assert load_recipe(recipe, ["fp8_recipe=mxfp8"]).execution.fp8_recipe == "mxfp8"


def test_megatron_fsdp_keeps_fp8_parameter_shards_in_one_byte():
    """Megatron-FSDP's model-weight buffer is uint8 for fp8 parameters (param_and_grad_buffer.py), sharded
    under optim_grads_params: 1 B per parameter of the shard instead of 2; torch FSDP2 unchanged."""
    base = dict(data_parallel_size=32, micro_batch_size=1, global_batch_size=64, seq_length=2048,
                precision="fp8", data_parallel_sharding_strategy="optim_grads_params")
    for fsdp, ratio in (("megatron_fsdp", 0.5), ("torch_fsdp2", 1.0)):
        bf16_params = estimate_memory(GQA, ExecutionSpec(**base, fsdp=fsdp), H100).stages[0]
        fp8_params = estimate_memory(GQA, ExecutionSpec(**base, fsdp=fsdp, fp8_param_gather=True), H100).stages[0]
        count = bf16_params.detail["params.count"]
        assert bf16_params.params_bytes == pytest.approx(2 * count / 32)
        assert fp8_params.params_bytes == pytest.approx(ratio * 2 * count / 32)
        assert fp8_params.grads_bytes == bf16_params.grads_bytes
        e = ExecutionSpec(**base, fsdp=fsdp, fp8_param_gather=True)
        assert peak_bytes(GQA, e) == estimate_memory(GQA, e, H100).peak_bytes
