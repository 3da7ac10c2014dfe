"""A recipe's problems when its target cannot be loaded (no GPU named, an unknown profile, a bad node count): the
arguments are resolved, and checked, on stand-in targets, so the missing target is listed with every other problem.

    problems = untargeted_problems(args.values, "llama")   # resolve problems, or the legality found on every stand-in
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from primus_ext.errors import Problem
from primus_ext.recipe.checks import check
from primus_ext.recipe.resolve import resolve_all

LISTING_TARGETS = (("mi300x", 1), ("h100", 64))
"""Stand-in targets, unlike in GPU, memory and count (8 GPUs, 512 GPUs): nothing is projected on them; a legality
problem found on both (TP dividing the heads) is the recipe's, one found on one only (a GPU count's) is not listed."""


def untargeted_problems(values: Mapping[str, Any], model_name: str) -> list[Problem]:
    """The arguments' resolve problems on the first stand-in; when there are none, the legality problems every
    stand-in has."""
    from primus_ext.hardware import load_system

    found: dict[tuple[str, str], Problem] | None = None
    for cluster, nodes in LISTING_TARGETS:
        system = load_system(cluster, nodes)
        model, execution, problems, _ = resolve_all(values, system, name=model_name)
        if problems:
            return problems
        got = {(p.path, p.message): p for p in check(model, execution, system)}
        found = got if found is None else {key: p for key, p in found.items() if key in got}
    return list((found or {}).values())
