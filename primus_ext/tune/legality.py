"""The tuner's legality: space membership (axes, pins) on top of THE check, ``recipe.checks.check``.

Every proposer (exhaustive, TPE, LLM, sensitivity) goes through ``problems_of``; the reasons go back
to the LLM verbatim. ``normalise`` is the strict reader of a proposed configuration from outside
(the LLM's JSON): only known axes, JSON scalars, candidate values; axes with one candidate may be left
out. Nothing in a proposal is ever executed or evaluated as code.

    problems = problems_of(space, config)       # [] = legal; else every reason, with a fix
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from primus_ext.errors import Problem
from primus_ext.recipe.checks import check
from primus_ext.tune.axes import canonical, spelled
from primus_ext.tune.space import AXIS_DOCS, AXIS_ORDER, Config, Space

STRUCTURAL_PATHS = frozenset({
    "tensor_model_parallel_size", "data_parallel_size", "num_attention_heads", "num_query_groups",
    "ffn_hidden_size", "seq_length", "virtual_pipeline_model_parallel_size", "num_experts", "moe_router_topk",
    "expert_model_parallel_size", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
    "sequence_parallel", "expert_tensor_parallel_size", "num_layers", "pipeline_model_parallel_layout",
    "decoder_first_pipeline_num_layers", "account_for_embedding_in_pipeline_split",
})
"""Paths of ``check`` problems that depend only on the structural axes (TP, ETP, PP, VPP, CP, EP) for a
fixed model and recipe (sequence parallelism and the pipeline split are derived from them). The
exhaustive search prunes a structural prefix when its first completion has one of these; the test
``tests/tune/test_legality.py`` samples completions to confirm none of a pruned prefix is legal."""


def problems_of(space: Space, config: Mapping[str, Any]) -> list[Problem]:
    """Every reason ``config`` cannot be tried: outside the space, or illegal for Megatron."""
    membership = space.membership(config)
    if membership:
        return membership
    return check(space.model, space.to_execution(config), space.system)


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def rule_of(problems: Sequence[Problem]) -> str:
    """The rule that excluded a candidate: its first problem's key and message with the numbers as ``N`` (``61
    layers ... PP*VPP=16*1`` and ``61 layers ... PP*VPP=8*2`` are one rule), so a refusal can say which rule
    excluded how many candidates (``SearchStats.excluded``)."""
    if not problems:
        return "illegal"
    first = problems[0]
    return _NUMBER.sub("N", f"{first.path}: {first.message}")[:160]


def is_structural(problems: list[Problem]) -> bool:
    """True when some problem depends on the structural axes only (see ``STRUCTURAL_PATHS``)."""
    return any(p.path in STRUCTURAL_PATHS for p in problems)


def normalise(space: Space, raw: Any) -> tuple[Config | None, list[Problem]]:
    """A proposal from outside -> a configuration of the space, or the reasons it is not one. Its axes may be named
    by their names or their short labels (``axes.canonical``); nothing else is translated."""
    if not isinstance(raw, dict):
        return None, [Problem(path="config", value=type(raw).__name__, message="expected a JSON object",
                              fix="give {axis: value, ...}")]
    raw = canonical(raw)  # an axis given by its short label (tp, mbs, ...) reads as its name
    problems = []
    for key, value in raw.items():
        if key not in AXIS_DOCS:
            problems.append(Problem(path=str(key)[:40], message="unknown axis",
                                    fix=f"use only {spelled(AXIS_ORDER)}"))
        elif value is not None and not isinstance(value, bool | int | str):
            problems.append(Problem(path=key, value=str(value)[:40], message="expected a scalar (int, bool, string)"))
    if problems:
        return None, problems
    config: Config = {}
    for name in AXIS_ORDER:
        allowed = space.domain(name, config)
        if name in raw:
            value = raw[name]
        elif len(allowed) == 1:
            value = allowed[0]
        else:
            return None, [Problem(path=name, message="missing (it has several candidates here)",
                                  fix=f"give one of {list(allowed)}")]
        match = [a for a in allowed if a == value and type(a) is type(value)]
        if not match:
            given = ", ".join(f"{k}={v}" for k, v in config.items() if len(space.domain(k, config)) > 1)
            pinned = f"; the user limited {name} to {list(space.pins[name])}" if name in space.pins else ""
            shown = value[:40] if isinstance(value, str) else value
            return None, [Problem(path=name, value=shown, message=f"not a candidate given {given or 'the space'}"
                                  f"{pinned}", fix=f"choose one of {list(allowed)}")]
        config[name] = match[0]
    return config, []
