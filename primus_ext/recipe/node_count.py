"""The node count a recipe runs on (``stated_nodes``: the one that states it, else the default), and the hint that
names the count its layout needs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from primus_ext.errors import Problem
from primus_ext.specs import ExecutionSpec, SystemSpec

DEFAULT_NODES = 1
"""Nodes assumed when neither ``--nodes``, the recipe's ``# primus-ext: nodes`` nor ``$NNODES`` gives a count."""
NODES_ENV = "NNODES"
"""Node count of Primus's launch scripts (``examples/run_pretrain.sh``, ``run_slurm_pretrain.sh``)."""
WORLD_SIZE_PATHS = frozenset({"tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                              "expert_model_parallel_size"})
"""Where ``recipe.checks.check`` reports a layout that does not divide the GPU count."""
MAX_HINT_NODES = 4096
"""Largest node count the 'needs N nodes' hint searches."""
MAX_NODES = 100_000
"""Largest node count accepted (guards absurd input)."""
NODES_DEFAULTED = "nodes"
"""``stated_nodes``' source when nothing states a count."""
NODES_SOURCES = {"--nodes": "--nodes", "primus_ext.nodes": "the recipe's # primus-ext: nodes",
                 f"${NODES_ENV}": f"${NODES_ENV}",
                 NODES_DEFAULTED: f"the default ({DEFAULT_NODES}: nothing states a count)"}
"""``stated_nodes``' source -> where the node count came from, for people (``Recipe.nodes_source``, JSON
``nodes_source``; as ``target_source`` says the GPU's)."""


def nodes_source_text(path: str) -> str:
    """Where a node count stated at ``path`` (``stated_nodes``' source) came from, for people."""
    return NODES_SOURCES.get(path, path)


def stated_nodes(nodes: int | None, block: Mapping[str, Any], env: Mapping[str, str],
                 problems: list[Problem]) -> tuple[str, int | None]:
    """Where the node count is stated and the count: ``--nodes`` (``nodes``), the recipe's ``primus_ext.nodes``
    (``block``), ``$NNODES``, else ``DEFAULT_NODES`` (source ``NODES_DEFAULTED``). The count is ``None``, and a
    problem is added, when it is not an integer in 1..``MAX_NODES``."""
    count: Any
    if nodes is not None:
        path, count = "--nodes", nodes
    elif "nodes" in block:
        path, count = "primus_ext.nodes", block["nodes"]
    elif env.get(NODES_ENV, "").strip():
        path, text = f"${NODES_ENV}", env[NODES_ENV].strip()
        count = int(text) if text.isdigit() and len(text) < 10 else text
    else:
        path, count = NODES_DEFAULTED, DEFAULT_NODES
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_NODES:
        problems.append(Problem(path=path, value=count, message=f"node count must be an integer in 1..{MAX_NODES}",
                                fix="e.g. nodes: 4"))
        return path, None
    return path, count


def nodes_hint(e: ExecutionSpec, s: SystemSpec) -> Problem:
    """The problem that says how many nodes the recipe's layout needs, when no node count was given."""
    gpn = s.gpu.gpus_per_node
    dense, expert = e.tp * e.pp * e.cp, (e.expert_tensor_parallel_size or e.tp) * e.expert_model_parallel_size
    need = next((n for n in range(1, MAX_HINT_NODES + 1)
                 if (n * gpn) % dense == 0 and ((n * gpn) // e.pp) % expert == 0), None)
    given = (f"no node count was given (--nodes, the recipe's primus_ext.nodes, or ${NODES_ENV}), so "
             f"{DEFAULT_NODES} node of {gpn} GPUs was assumed")
    if need is None:
        return Problem(path="nodes", message=f"{given}; no node count up to {MAX_HINT_NODES} fits the layout",
                       fix="change the parallel sizes")
    return Problem(path="nodes", value=DEFAULT_NODES,
                   message=f"{given}; this recipe's layout needs a multiple of {need} node(s)",
                   fix=f"pass --nodes {need} (or export {NODES_ENV}={need}, as Primus's launch scripts do)")


__all__ = ["DEFAULT_NODES", "MAX_HINT_NODES", "MAX_NODES", "NODES_DEFAULTED", "NODES_ENV", "NODES_SOURCES",
           "WORLD_SIZE_PATHS", "nodes_hint", "nodes_source_text", "stated_nodes"]
