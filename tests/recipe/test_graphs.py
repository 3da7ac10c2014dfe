"""CUDA graph settings: megatron-core's impl / scope semantics -> ExecutionSpec.cuda_graph, and what it refuses."""

from __future__ import annotations

import pytest
from recipe_data import BASE

from primus_ext.hardware import load_system
from primus_ext.recipe import resolve_specs

NODE = load_system("mi300x", 1)


def resolve(args):
    return resolve_specs(args, NODE, name="t")


@pytest.mark.parametrize(("args", "mode"), [
    ({}, "none"),
    ({"cuda_graph_impl": "local"}, "layers"),  # scope "full" (megatron-core's default): the whole layer
    ({"cuda_graph_impl": "local", "cuda_graph_scope": "full_iteration"}, "full_iteration"),
    ({"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["attn", "moe_router"]}, "layers"),
    ({"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": "moe_router,moe_preprocess"}, "none"),
    ({"enable_cuda_graph": True, "cuda_graph_scope": "full_iteration"}, "full_iteration"),  # deprecated alias
    ({"external_cuda_graph": True, "cuda_graph_scope": "full"}, "layers"),
])
def test_cuda_graph_mode_follows_megatron_core(args, mode):
    _, execution, problems = resolve({**BASE, **args})
    assert not problems and execution.cuda_graph == mode


@pytest.mark.parametrize(("args", "key"), [
    ({"cuda_graph_impl": "full_iteration"}, "cuda_graph_impl"),
    ({"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": "full_iteration"}, "cuda_graph_scope"),
    ({"cuda_graph_impl": "local", "enable_cuda_graph": True}, "enable_cuda_graph"),
    ({"enable_cuda_graph": True, "external_cuda_graph": True}, "external_cuda_graph"),
    ({"cuda_graph_impl": "local", "cuda_graph_scope": "attn,everything"}, "cuda_graph_scope"),
    ({"cuda_graph_impl": "local", "cuda_graph_scope": ["full", "attn"]}, "cuda_graph_scope"),
    ({"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": "moe_router", "cpu_offloading": True},
     "cpu_offloading"),
])
def test_cuda_graph_conflicts_megatron_core_asserts_on_are_problems(args, key):
    _, _, problems = resolve({**BASE, **args})
    assert [p.path for p in problems] == [key] and problems[0].fix
