"""Shared fixtures for the tuner tests: small real recipes' specs on small clusters."""

from __future__ import annotations

import pytest

from primus_ext.hardware import load_system
from primus_ext.recipe import load_recipe
from primus_ext.specs import ExecutionSpec, ModelSpec

MIXTRAL = "recipes/mixtral_8x22B-pretrain.yaml"
DEEPSEEK = "recipes/deepseek_v3-pretrain.yaml"


@pytest.fixture(scope="session")
def mixtral():
    return load_recipe(MIXTRAL, cluster="mi355x", nodes=4, validate=False)


@pytest.fixture(scope="session")
def deepseek():
    return load_recipe(DEEPSEEK, cluster="h100", nodes=128, validate=False)


@pytest.fixture(scope="session")
def tiny():
    """A small dense model on one 8-GPU node: spaces of a few hundred candidates."""
    model = ModelSpec(name="tiny", num_layers=8, hidden_size=768, ffn_hidden_size=3072, num_attention_heads=12,
                      num_query_groups=4, kv_channels=64, vocab_size=32000)
    system = load_system("h100", 1)
    execution = ExecutionSpec(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, data_parallel_size=2,
                              sequence_parallel=True, micro_batch_size=1, global_batch_size=32, seq_length=4096,
                              use_distributed_optimizer=True)
    return model, execution, system
