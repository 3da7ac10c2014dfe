"""A search's result as a schema document (``primus-ext tune --json OUT``; ``-`` for stdout).

    from primus_ext.results.tune import tune_document
    tune_document(result, recipe=recipe, margin=0.05, launch_environment={...})

Every trial (best, baseline, optimum, ranking, Pareto front) has the projection's figure names
(``step_time_s``, ``tokens_per_s_per_gpu``, ``mfu``) and memory in GiB (``peak_memory_gib``, ``capacity_gib``);
``gain``, ``regret`` and a sensitivity ``change`` are fractions (0.12 = 12 % faster). ``best`` is the configuration
chosen: the recipe's own when it ties with the fastest (``kept_recipe``; ``ties``: the configurations inside
``tie_band``, the fastest's band), else, with ``max_changes`` N, the fastest tie changing at most N recipe settings,
else ``fastest``. ``regret`` is the best's against the exhaustive ``optimum`` (0 whenever that was computed: its
configurations are ranked too); ``search_regret`` the strategy's own fastest against it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from primus_ext.results import document, gib
from primus_ext.results.projection import recipe_fields

if TYPE_CHECKING:
    from primus_ext.recipe import Recipe
    from primus_ext.tune.agent import Trial
    from primus_ext.tune.run import TuneResult


def trial_fields(t: Trial | None) -> dict[str, Any] | None:
    """One ``tune.agent.Trial``: its configuration, verdict, figures (None unless projected) and memory."""
    if t is None:
        return None
    score, verdict = t.score, t.memory
    peak = score.peak_bytes if score is not None and score.peak_bytes is not None else (
        verdict.peak_bytes if verdict is not None else None)
    capacity = score.capacity_bytes if score is not None and score.capacity_bytes is not None else (
        verdict.capacity_bytes if verdict is not None else None)
    return {
        "config": dict(t.config), "status": t.status, "origin": t.origin,
        "step_time_s": score.step_time_s if score else None,
        "tokens_per_s_per_gpu": score.tokens_per_s_per_gpu if score else None,
        "mfu": score.mfu if score else None,
        "breakdown": dict(score.breakdown) if score else None,
        "sources": dict(score.sources) if score else None,
        "peak_memory_gib": gib(peak), "capacity_gib": gib(capacity),
        "peak_stage": verdict.worst_stage if verdict is not None else None,
        "problems": [{"path": p.path, "message": p.message, "fix": p.fix,
                      "value": p.value if isinstance(p.value, int | float | str | bool) else None}
                     for p in t.problems],
    }


def tune_document(result: TuneResult, *, recipe: Recipe | None = None, margin: float | None = None,
                  launch_environment: Mapping[str, Any] | None = None, top: int = 50) -> dict[str, Any]:
    """The ``tune`` document of a ``tune.run.TuneResult``."""
    system = recipe.system if recipe is not None else None
    target = {} if system is None else {"model": recipe.model.name, "cluster": system.name, "gpu": system.gpu.name,
                                        "nodes": system.num_nodes, "world_size": system.world_size}
    return document(
        "tune", **target, strategy=result.strategy, margin=margin,
        best=trial_fields(result.best), baseline=trial_fields(result.baseline), gain=result.gain,
        optimum=trial_fields(result.optimum), regret=result.regret, search_regret=result.search_regret,
        ranked=[trial_fields(t) for t in result.ranked[:top]], pareto=[trial_fields(t) for t in result.pareto],
        sensitivity=[dataclasses.asdict(s) for s in result.sensitivity],
        stats=dataclasses.asdict(result.stats),
        exhaustive_stats=None if result.exhaustive_stats is None else dataclasses.asdict(result.exhaustive_stats),
        candidates=result.candidates, notes=list(result.notes),
        best_execution=None if result.best_execution is None else dataclasses.asdict(result.best_execution),
        launch_environment=dict(launch_environment or {}), fastest=trial_fields(result.fastest),
        tie_band=None if result.band is None else {
            "low": result.band[0], "high": result.band[1],
            "what": "tokens_per_s_per_gpu band of the fastest configuration: configurations projected inside it tie"},
        ties=[trial_fields(t) for t in result.ties[:top]], kept_recipe=result.kept_recipe,
        max_changes=result.max_changes,
        same_figures=result.same_figures, **recipe_fields(recipe))
