"""``recipe.node_count``: the node hint names the smallest count the layout divides, or says none fits."""

from __future__ import annotations

import dataclasses

from primus_ext.hardware import load_system
from primus_ext.recipe.node_count import DEFAULT_NODES, MAX_HINT_NODES, NODES_ENV, nodes_hint
from primus_ext.specs import ExecutionSpec


def _execution(**kw) -> ExecutionSpec:
    return dataclasses.replace(ExecutionSpec(), **kw)


def test_the_hint_names_the_smallest_node_count_the_layout_divides():
    system = load_system("mi300x", DEFAULT_NODES)  # 8 GPUs a node
    problem = nodes_hint(_execution(tensor_model_parallel_size=8, pipeline_model_parallel_size=4), system)
    assert problem.path == "nodes" and problem.value == DEFAULT_NODES
    assert "multiple of 4 node(s)" in problem.message
    assert "--nodes 4" in problem.fix and NODES_ENV in problem.fix
    expert = nodes_hint(_execution(pipeline_model_parallel_size=2, expert_model_parallel_size=16), system)
    assert "multiple of 4 node(s)" in expert.message  # 32 GPUs: 16 per stage, EP16


def test_a_layout_no_node_count_fits_says_so():
    system = load_system("mi300x", DEFAULT_NODES)
    problem = nodes_hint(_execution(tensor_model_parallel_size=3), system)  # 8n GPUs divide by 3 from n = 3
    assert "needs a multiple of 3 node(s)" in problem.message
    odd = nodes_hint(_execution(context_parallel_size=8191), system)  # a prime above the search
    assert f"no node count up to {MAX_HINT_NODES}" in odd.message and "parallel sizes" in odd.fix


def test_each_source_of_the_count_is_said_for_people():
    from primus_ext.recipe.node_count import NODES_DEFAULTED, nodes_source_text, stated_nodes

    problems: list = []
    assert stated_nodes(None, {}, {NODES_ENV: " 3 "}, problems) == (f"${NODES_ENV}", 3)
    assert nodes_source_text(f"${NODES_ENV}") == "$NNODES"
    assert nodes_source_text("primus_ext.nodes") == "the recipe's # primus-ext: nodes"
    assert nodes_source_text(NODES_DEFAULTED).startswith(f"the default ({DEFAULT_NODES}") and not problems
