"""Search strategies behind one interface: ``run(ctx, options) -> notes``.

A strategy proposes configurations through ``ctx.try_config`` (legality, pre-filter, cache, oracle,
budget) until it is done or ``BudgetExhausted`` is raised; it returns notes for the report (e.g.
"LLM unreachable, fell back to tpe"). Strategies are imported on first use (optuna, litellm are
optional dependencies).

    run = get_strategy("tpe")
    notes = run(ctx, StrategyOptions(seed=0))
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from primus_ext.errors import Problem, RecipeError
from primus_ext.tune.space import Config

STRATEGIES = {
    "exhaustive": "primus_ext.tune.strategies.exhaustive",
    "tpe": "primus_ext.tune.strategies.tpe",
    "llm": "primus_ext.tune.strategies.llm",
}


@dataclass(frozen=True, kw_only=True)
class StrategyOptions:
    """Knobs of the strategies (each reads its own)."""

    seed: int = 0
    bound: bool = True
    """Exhaustive search: branch and bound on the compute lower bound of the step (exact; off = plain)."""
    keep: int = 1
    """Exhaustive search: the ranking is exact down to this place (a prefix is skipped only when its bound cannot
    beat the ``keep``-th best found; ``tune --verify-top K`` keeps K)."""
    start: Config | None = None
    """A configuration to try first (the recipe's own, when it is a point of the space)."""
    llm_model: str | None = None
    """Any litellm model string, e.g. ``openai/gpt-4o`` or ``anthropic/claude-...``."""
    llm_api_base: str | None = None
    llm_timeout_s: float = 60.0
    """Wall-clock deadline of one LLM call, from request to the last byte of the reply."""
    llm_total_s: float = 600.0
    """Wall-clock budget of all LLM calls of one search; past it the search goes on with tpe."""
    llm_batch: int = 8
    """Configurations asked for per LLM round."""
    llm_retries: int = 2
    """Consecutive failed calls (network, malformed reply) tolerated before falling back to tpe."""
    completion: Callable[..., Any] | None = None
    """Injectable LLM call (default ``litellm.completion``)."""


Strategy = Callable[[Any, StrategyOptions], list[str]]


def get_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise RecipeError(problems=[Problem(path="--strategy", value=name, message="unknown strategy",
                                            fix=f"use one of {', '.join(STRATEGIES)}")])
    return importlib.import_module(STRATEGIES[name]).run
