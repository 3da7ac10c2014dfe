"""Run a search and assemble what it found: ranking, best, gain, regret, Pareto front, sensitivity.

    result = tune(ctx, "tpe", baseline=recipe.execution, options=StrategyOptions(seed=0))
    result.best.config, result.gain, result.regret, result.pareto, result.sensitivity
    tune_document(result)               # the ``tune`` document of ``primus-ext tune --json``: primus_ext.results.tune

Regret is measured against the exhaustive optimum when the space is enumerable (``ENUMERABLE_MAX``
candidates): the exhaustive search then runs on the same oracle and cache, so its projections are
free for configurations the strategy already tried.

Ties: ``band(execution)`` (the CLI passes the projection's sensitivity band, or a calibration record's) gives the
fastest configuration's band as factors of its throughput; every configuration projected inside it is a tie with
it (``TuneResult.ties``): the projection cannot order them. Among ties the recipe's own configuration is kept
(``kept_recipe``), else the fastest. Configurations that project exactly alike (they differ only in settings the
projection does not see) are listed once, the one closest to the recipe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from primus_ext.specs import ExecutionSpec
from primus_ext.tune.agent import BudgetExhausted, SearchContext, SearchStats, Trial, evaluate_execution
from primus_ext.tune.axes import label
from primus_ext.tune.config_keys import config_key
from primus_ext.tune.strategies import StrategyOptions, get_strategy

ENUMERABLE_MAX = 100_000
"""Candidate count up to which the exhaustive optimum is computed for the regret (``--no-regret`` skips
it). Its cost is the exhaustive search's (benchmarks/tune_search.py): ~6-7 s for Mixtral-8x22B on 32
GPUs (~42k candidates) and for DeepSeek-V3 on 1 024 GPUs (~62k) on a shared 2-core machine."""


@dataclass(frozen=True, kw_only=True)
class Sensitivity:
    """One one-axis change of the winner and what it does."""

    axis: str
    value: Any
    status: str
    """``projected``, ``oom`` or ``illegal``."""
    change: float | None
    """Relative tok/s/GPU change vs the winner (-0.12 = 12 % slower); None unless projected."""
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class TuneResult:
    """Everything a search found, in objects (the CLI prints it, ``to_dict`` serialises it)."""

    strategy: str
    ranked: tuple[Trial, ...]
    """Projected trials, best first."""
    best: Trial | None
    baseline: Trial | None
    """The recipe's own configuration, as written."""
    gain: float | None
    """best / baseline - 1 (None when the baseline does not run)."""
    optimum: Trial | None
    """The exhaustive optimum (None when the space is not enumerable or not asked)."""
    regret: float | None
    """1 - best / optimum."""
    pareto: tuple[Trial, ...]
    """Not dominated in (tok/s/GPU, memory headroom), fastest first."""
    sensitivity: tuple[Sensitivity, ...]
    stats: SearchStats
    exhaustive_stats: SearchStats | None
    candidates: int | None
    """Size of the candidate space (before legality and memory), when counted."""
    notes: tuple[str, ...]
    trials: tuple[Trial, ...] = ()
    """Every trial kept (projected, illegal, rejected) in the order tried."""
    best_execution: ExecutionSpec | None = None
    fastest: Trial | None = None
    """The fastest configuration projected (``best`` too, unless the recipe's own was kept on a tie)."""
    band: tuple[float, float] | None = None
    """The fastest's band (tok/s/GPU low, high): configurations projected inside it tie with it."""
    ties: tuple[Trial, ...] = ()
    """The ranked configurations inside ``band``, fastest first (the fastest included)."""
    kept_recipe: bool = False
    """The recipe's own configuration, a point of the space (the pins allow it), ties with the fastest: it is the
    ``best`` (``gain`` 0)."""
    same_figures: int = 0
    """Configurations left out of ``ranked``: they project exactly as one listed (closer to the recipe)."""


def pareto_front(trials: list[Trial]) -> tuple[Trial, ...]:
    """Trials not dominated in (tok/s/GPU up, headroom up), fastest first."""
    ranked = sorted((t for t in trials if t.headroom_bytes is not None),
                    key=lambda t: (-t.tokens_per_s_per_gpu, -(t.headroom_bytes or 0)))
    front: list[Trial] = []
    for t in ranked:
        if not front or (t.headroom_bytes or 0) > (front[-1].headroom_bytes or 0):
            if front and t.tokens_per_s_per_gpu == front[-1].tokens_per_s_per_gpu:
                front[-1] = t
            else:
                front.append(t)
    return tuple(front)


def distinct(trials: list[Trial], recipe: Trial | None) -> tuple[list[Trial], int]:
    """``trials`` fastest first, on equal throughput the one with fewer axes changed from ``recipe`` first; a
    configuration whose figures equal those of one before it is dropped. Returns (kept, dropped count)."""
    own = recipe.config if recipe is not None else {}

    def changes(t: Trial) -> int:
        return sum(t.config.get(axis) != value for axis, value in own.items())

    kept: list[Trial] = []
    seen: set[tuple[float, float, float, int | None]] = set()
    for t in sorted(trials, key=lambda t: (-t.tokens_per_s_per_gpu, changes(t))):
        if t.figures not in seen:
            seen.add(t.figures)
            kept.append(t)
    return kept, len(trials) - len(kept)


def sensitivity(ctx: SearchContext, best: Trial, known: Mapping[str, Trial] | None = None) -> tuple[Sensitivity, ...]:
    """Every one-axis change of ``best`` (projected outside the budget, through the cache; ``known``: trials of
    another context on the same oracle, e.g. the regret's exhaustive reference, read before projecting)."""
    out = []
    for axis, value, config in ctx.space.neighbours(best.config):
        trial = (known or {}).get(config_key(config)) or ctx.try_config(config, origin="sensitivity", counted=False)
        change = trial.tokens_per_s_per_gpu / best.tokens_per_s_per_gpu - 1 if trial.status == "projected" else None
        reason = "; ".join(str(p) for p in trial.problems[:2]) if trial.status == "illegal" else (
            "does not fit in memory" if trial.status == "oom" else "")
        out.append(Sensitivity(axis=axis, value=value, status=trial.status, change=change, reason=reason))
    return tuple(out)


def tune(ctx: SearchContext, strategy: str, *, baseline: ExecutionSpec | None = None,
         options: StrategyOptions | None = None, regret: bool = True, candidates: int | None = None,
         band: Callable[[ExecutionSpec], tuple[float, float] | None] | None = None,
         on_phase: Callable[[str], None] | None = None) -> TuneResult:
    """Run ``strategy`` on ``ctx``; then the baseline, the regret reference, ties, Pareto and sensitivity.
    ``band``: an execution's projected band as factors of its throughput (``(0.9, 1.1)``), for the ties;
    ``on_phase``: told each phase as it starts (the CLI's progress line)."""
    options = options or StrategyOptions()
    say = on_phase or (lambda _phase: None)
    say(f"searching ({strategy})")
    start = time.perf_counter()
    before = ctx.stats.projected
    base_trial = evaluate_execution(ctx, baseline, origin="recipe") if baseline is not None else None
    ctx.stats.projected = before  # the recipe's own projection is not a search trial
    if options.start is None and base_trial is not None and not ctx.space.membership(base_trial.config):
        options = dataclasses.replace(options, start=base_trial.config)
    notes: list[str] = []
    with contextlib.suppress(BudgetExhausted):
        notes += get_strategy(strategy)(ctx, options)
    ctx.stats.wall_s = time.perf_counter() - start
    ranked, same_figures = distinct([t for t in ctx.projected() if t.origin != "sensitivity"], base_trial)
    fastest = best = ranked[0] if ranked else None
    optimum, ex_stats, known = None, None, None
    if strategy == "exhaustive":
        optimum = fastest
    elif regret and candidates is not None and candidates <= ENUMERABLE_MAX:
        reference = SearchContext(space=ctx.space, oracle=ctx.oracle, prefilter=ctx.prefilter,
                                  budget=ctx.budget, detail=False,
                                  trials={k: t for k, t in ctx.trials.items() if t.status == "projected"})
        t0 = time.perf_counter()
        say("exhaustive reference for the regret")
        get_strategy("exhaustive")(reference, options)
        reference.stats.wall_s = time.perf_counter() - t0
        optimum, ex_stats, known = reference.best(), reference.stats, reference.trials
    elif regret:
        notes.append(f"regret not computed: {candidates or 'uncounted'} candidates (> {ENUMERABLE_MAX})")
    factors = band(ctx.space.to_execution(fastest.config)) if band is not None and fastest is not None else None
    interval, ties, kept_recipe = _ties(fastest, ranked, base_trial, factors)
    if kept_recipe:
        best = base_trial
    say("ties and sensitivity")
    before = ctx.stats.projected
    around = best if best is not None and not ctx.space.membership(best.config) else fastest
    sens = sensitivity(ctx, around, known) if around is not None else ()
    ctx.stats.sensitivity_projected = ctx.stats.projected - before
    ctx.stats.projected = before
    better = [s for s in sens if s.change is not None and around is not None and fastest is not None
              and around.tokens_per_s_per_gpu * (1 + s.change) > fastest.tokens_per_s_per_gpu]
    if better:
        top = max(better, key=lambda s: s.change or 0.0)
        notes.append(f"a one-axis change of the best ({label(top.axis)}={top.value}) projects "
                     f"{top.change * 100:+.2f} %: the budget ended before the local search converged (raise --budget)")
    gain = None
    if best is not None and base_trial is not None and base_trial.score is not None:
        gain = best.tokens_per_s_per_gpu / base_trial.tokens_per_s_per_gpu - 1
    if base_trial is not None and base_trial.status == "oom" and base_trial.memory is not None:
        m = base_trial.memory
        usable = m.capacity_bytes * (1 - ctx.prefilter.margin) / 2**30
        what = ("is over the HBM per the memory model" if m.peak_bytes > m.capacity_bytes else
                f"fits the HBM ({m.capacity_bytes / 2**30:.1f} GiB) but not the {ctx.prefilter.margin:.0%} margin")
        notes.append(f"the recipe's configuration {what} (peak {m.peak_bytes / 2**30:.1f} GiB > {usable:.1f} GiB "
                     "usable); the gain is against its projected throughput")
    elif base_trial is not None and base_trial.status == "illegal":
        notes.append("the recipe's configuration is illegal on this cluster: "
                     + "; ".join(str(p) for p in base_trial.problems[:3]))
    regret_value = None  # the search's: the fastest it found against the exhaustive optimum
    if fastest is not None and optimum is not None and optimum.tokens_per_s_per_gpu > 0:
        regret_value = max(0.0, 1 - fastest.tokens_per_s_per_gpu / optimum.tokens_per_s_per_gpu)
    if kept_recipe or best is None:
        best_execution = baseline if best is not None else None
    else:
        best_execution = ctx.space.to_execution(best.config)
    return TuneResult(
        strategy=strategy, ranked=tuple(ranked), best=best, baseline=base_trial, gain=gain, optimum=optimum,
        regret=regret_value, pareto=pareto_front(ranked), sensitivity=sens, stats=ctx.stats,
        exhaustive_stats=ex_stats, candidates=candidates, notes=tuple(notes),
        trials=tuple(t for t in ctx.trials.values() if t.origin != "sensitivity"),
        best_execution=best_execution, fastest=fastest, band=interval, ties=ties, kept_recipe=kept_recipe,
        same_figures=same_figures,
    )


def _ties(fastest: Trial | None, ranked: list[Trial], recipe: Trial | None, factors: tuple[float, float] | None,
          ) -> tuple[tuple[float, float] | None, tuple[Trial, ...], bool]:
    """(the fastest's band in tok/s/GPU, the configurations inside it, whether the recipe's own is among them);
    ``factors``: the fastest's band as factors of its throughput."""
    if fastest is None or factors is None:
        return None, (), False
    top = fastest.tokens_per_s_per_gpu
    low, high = top * factors[0], top * factors[1]
    ties = [t for t in ranked if t.tokens_per_s_per_gpu >= low]
    own = recipe is not None and any(t.key == recipe.key for t in ties)  # a point of the space: the pins allow it
    return (low, high), tuple(ties), own
