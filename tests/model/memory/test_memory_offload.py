"""Activation CPU offloading (megatron-core ``cpu_offloading*`` -> Transformer Engine's cpu_offload).

Independent references: the hand count of what stays on the GPU at the peak (the L - N layers that are not
offloaded plus the one offloaded layer in transit of TE's double-buffered group handler), and megatron-core
0.16.1's own TransformerConfig, which refuses offloading with pipeline parallelism or with recompute (so
the memory model never combines them), and the recipe resolver reading the Megatron argument names.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.layers import rank_shapes
from primus_ext.model.memory import estimate_memory, peak_bytes
from primus_ext.model.memory.saved import activation_bytes_per_layer
from primus_ext.specs import ExecutionSpec, ModelSpec

GQA = ModelSpec(name="gqa", num_layers=8, hidden_size=1024, ffn_hidden_size=2816, num_attention_heads=16,
                num_query_groups=4, kv_channels=64, vocab_size=32000, activation="swiglu")
MOE = replace(GQA, name="moe", num_experts=8, moe_router_topk=2, moe_ffn_hidden_size=1024,
              moe_layer_pattern=(False,) + (True,) * 7)
H100 = load_system("h100", 4)


def _exe(**kw) -> ExecutionSpec:
    base = dict(data_parallel_size=32, micro_batch_size=2, global_batch_size=64, seq_length=2048, precision="bf16")
    base.update(kw)
    return ExecutionSpec(**base)


@pytest.mark.parametrize("n", [1, 3, 7])
def test_offloaded_layers_leave_one_in_transit(n):
    plain = estimate_memory(GQA, _exe(), H100).stages[0]
    off = estimate_memory(GQA, _exe(cpu_offloading=True, cpu_offloading_num_layers=n), H100).stages[0]
    layer = activation_bytes_per_layer(rank_shapes(GQA, _exe())["dense"])
    assert plain.activations_bytes - off.activations_bytes == pytest.approx((n - 1) * layer)
    assert (off.params_bytes, off.grads_bytes, off.optimizer_bytes) == (
        plain.params_bytes, plain.grads_bytes, plain.optimizer_bytes)
    assert peak_bytes(GQA, _exe(cpu_offloading=True, cpu_offloading_num_layers=n)) == pytest.approx(off.total_bytes)


def test_offloading_off_or_weights_only_keeps_activations():
    plain = estimate_memory(GQA, _exe(), H100).peak_bytes
    assert estimate_memory(GQA, _exe(cpu_offloading_num_layers=4), H100).peak_bytes == plain
    weights_only = _exe(cpu_offloading=True, cpu_offloading_num_layers=4, cpu_offloading_activations=False,
                        cpu_offloading_weights=True)
    # offloading the weights' saved references frees nothing while the module still holds the parameter
    assert estimate_memory(GQA, weights_only, H100).peak_bytes == plain


def test_moe_offload_counts_the_first_layers_by_kind():
    shapes = rank_shapes(MOE, _exe())
    dense, moe = (activation_bytes_per_layer(shapes[k]) for k in ("dense", "moe"))
    plain = estimate_memory(MOE, _exe(), H100).stages[0].activations_bytes
    off = estimate_memory(MOE, _exe(cpu_offloading=True, cpu_offloading_num_layers=3), H100).stages[0]
    # layers 0 (dense), 1, 2 (MoE) offloaded; the larger of the two kinds stays in transit
    assert plain - off.activations_bytes == pytest.approx(dense + 2 * moe - max(dense, moe))


def test_megatron_core_refuses_offloading_with_pp_or_recompute():
    from megatron.core.transformer.transformer_config import TransformerConfig

    base = dict(num_layers=8, hidden_size=64, num_attention_heads=4, cpu_offloading=True,
                cpu_offloading_num_layers=4)
    TransformerConfig(**base)  # legal: PP 1, no recompute
    import torch

    with pytest.raises(ValueError, match="Pipeline"):
        TransformerConfig(**base, pipeline_model_parallel_size=2, pipeline_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="recomputation"):
        TransformerConfig(**base, recompute_granularity="selective")


def test_recipe_reads_megatron_offloading_arguments():
    from pathlib import Path

    from primus_ext.recipe import load_recipe

    recipe = Path(__file__).resolve().parents[3] / "recipes" / "llama3.1_8B-pretrain.yaml"
    e = load_recipe(recipe, ["cpu_offloading=true", "cpu_offloading_num_layers=4"]).execution
    assert e.cpu_offloading and e.cpu_offloading_num_layers == 4
    assert e.cpu_offloading_activations and not e.cpu_offloading_weights
    default = load_recipe(recipe).execution
    assert not default.cpu_offloading and default.cpu_offloading_num_layers == 0
