"""Projections shared by the report tests: a small 4-stage model and two shipped production recipes."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus_ext.hardware import load_system
from primus_ext.projection import project
from primus_ext.specs import ExecutionSpec, ModelSpec

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.fixture(scope="session")
def projection():
    model = ModelSpec(name="small", num_layers=8, hidden_size=2048, ffn_hidden_size=5504, num_attention_heads=16,
                      num_query_groups=4, kv_channels=128, vocab_size=32000)
    execution = ExecutionSpec(tensor_model_parallel_size=2, pipeline_model_parallel_size=4, data_parallel_size=1,
                              micro_batch_size=1, global_batch_size=8, seq_length=2048, precision="bf16")
    return project(model, execution, load_system("h100", 1), None)


def _recipe(name: str):
    from primus_ext.recipe import load_recipe

    recipe = load_recipe(str(RECIPES / f"{name}-pretrain.yaml"), [])
    return project(recipe.model, recipe.execution, recipe.system, None)


@pytest.fixture(scope="session")
def llama405b():
    """Llama-3.1-405B as shipped: 192 micro-batches x 8 chunks on PP 8 (TP and CP comm exposed)."""
    return _recipe("llama3.1_405B")


@pytest.fixture(scope="session")
def deepseek_v3():
    """DeepSeek-V3 as shipped: 64 micro-batches x 4 chunks, exposed EP all-to-all about a fifth of the step."""
    return _recipe("deepseek_v3")


@pytest.fixture(scope="session")
def llama70b():
    """Llama-3.1-70B as shipped: interleaved 1F1B, 128 micro-batches x 5 chunks on PP 8; the last stage (output
    layer and loss) the busiest, the other seven idle ~17 % of the step."""
    return _recipe("llama3.1_70B")
