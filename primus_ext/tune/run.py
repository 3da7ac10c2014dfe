"""Run a search and assemble what it found: ranking, best, gain, regret, Pareto front, sensitivity.

    result = tune(ctx, "tpe", baseline=recipe.execution, options=StrategyOptions(seed=0))
    result.best.config, result.gain, result.regret, result.pareto, result.sensitivity
    tune_document(result)               # the ``tune`` document of ``primus-ext tune --json``: primus_ext.results.tune

Regret is measured against the exhaustive optimum when the space is enumerable (``ENUMERABLE_MAX``
candidates): the exhaustive search then runs on the same oracle and cache, so its projections are
free for configurations the strategy already tried, and its trials join the ranking: the best is never slower
than a configuration the run projected (``regret`` is then 0; ``search_regret`` says how far the strategy alone
was). ``choose_strategy`` is ``--strategy auto``: exhaustive when the space enumerates within
``EXHAUSTIVE_WITHIN_S``, else TPE.

Ties: ``band(execution)`` (the CLI passes the projection's sensitivity band, or a calibration record's) gives the
fastest configuration's band as factors of its throughput; every configuration projected inside it is a tie with
it (``TuneResult.ties``): the projection cannot order them. Among ties the recipe's own configuration is kept
(``kept_recipe``), else the fastest; with ``max_changes`` N, the fastest tie changing at most N settings of the
recipe. Configurations that project exactly alike (they differ only in settings the
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
from primus_ext.tune.config_keys import config_key
from primus_ext.tune.strategies import StrategyOptions, get_strategy

EXHAUSTIVE_RATE = 5_000
"""Candidates per second the exhaustive search gets through, the slowest measured and rounded down: Mixtral-8x22B on
4 x MI355X, 41 730 candidates in 5.9-7.1 s (5 900-7 100 /s); DeepSeek-V3 on 128 x H100, 62 384 in 6.5-7.7 s
(8 100-9 600 /s; benchmarks/tune_search.py, the shared 2-core machine); Llama-3.1-70B FP8 on 4 x MI300X, 19 144
in 1.2-2.5 s (issue 53)."""
EXHAUSTIVE_WITHIN_S = 15.0
"""``--strategy auto``'s time budget: exhaustive when the space enumerates within it at ``EXHAUSTIVE_RATE``
(75 000 candidates), else TPE."""
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
    """1 - fastest / optimum: 0 whenever the optimum was computed (the best is never slower than it, but on a tie)."""
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
    search_regret: float | None = None
    """1 - the strategy's own fastest / optimum: how far the search alone was (``regret`` is the best's: the
    exhaustive reference's trials join the ranking, so it is 0 whenever the reference ran)."""
    max_changes: int | None = None
    """Among ties, the best changes at most this many settings of the recipe when one does (None: today's rule)."""


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


def choose_strategy(candidates: int | None, within_s: float = EXHAUSTIVE_WITHIN_S) -> tuple[str, str]:
    """``auto``: (the strategy, why). Exhaustive when the space's ``candidates`` enumerate within ``within_s`` at
    ``EXHAUSTIVE_RATE``, else TPE (which the exhaustive reference still checks when the space is enumerable)."""
    if candidates is not None and candidates <= EXHAUSTIVE_RATE * within_s:
        return "exhaustive", (f"strategy auto: exhaustive ({candidates:,} candidates enumerate in ~"
                              f"{candidates / EXHAUSTIVE_RATE:.1f} s <= {within_s:g} s at {EXHAUSTIVE_RATE:,}/s)")
    count = "uncounted" if candidates is None else f"{candidates:,}"
    return "tpe", (f"strategy auto: tpe ({count} candidates: more than {within_s:g} s exhaustive at "
                   f"{EXHAUSTIVE_RATE:,}/s)")


def tune(ctx: SearchContext, strategy: str, *, baseline: ExecutionSpec | None = None,
         options: StrategyOptions | None = None, regret: bool = True, candidates: int | None = None,
         band: Callable[[ExecutionSpec], tuple[float, float] | None] | None = None,
         on_phase: Callable[[str], None] | None = None, max_changes: int | None = None,
         changes: Callable[[Trial], int] | None = None) -> TuneResult:
    """Run ``strategy`` on ``ctx``; then the baseline, the regret reference, ties, Pareto and sensitivity.
    ``band``: an execution's projected band as factors of its throughput (``(0.9, 1.1)``), for the ties;
    ``on_phase``: told each phase as it starts (the CLI's progress line); ``max_changes``: among the ties, prefer
    the fastest changing at most this many settings of the recipe (``changes``: a trial's count, by default the
    axes it changes from the recipe's configuration); None keeps the recipe on a tie, else the fastest.

    The best is never slower than a configuration the run projected: the exhaustive reference's trials join the
    ranking, and a one-axis change of the best that projects faster (the sensitivity pass) becomes the best."""
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
    searched = [t for t in ctx.projected() if t.origin != "sensitivity"]
    optimum, ex_stats, known = None, None, None
    if strategy == "exhaustive":
        optimum = searched[0] if searched else None
    elif regret and candidates is not None and candidates <= ENUMERABLE_MAX:
        say("exhaustive reference for the regret")
        optimum, ex_stats, known = _reference(ctx, options)
    elif regret:
        notes.append(f"regret not computed: {candidates or 'uncounted'} candidates (> {ENUMERABLE_MAX})")
    search_regret = _regret(searched[0] if searched else None, optimum)
    pool = {t.key: t for t in searched}
    pool.update((k, t) for k, t in (known or {}).items() if t.status == "projected" and t.origin != "sensitivity")
    if search_regret:
        notes.append(f"the {strategy} search's fastest projects {search_regret * 100:.1f} % below the exhaustive "
                     "reference's optimum: the best is chosen among both")
    say("ties and sensitivity")
    pick = _Pick(ctx=ctx, base=base_trial, band=band, max_changes=max_changes,
                 changes=changes or _axis_changes(base_trial), known=known)
    ranked, same_figures, best, fastest, interval, ties, kept_recipe, sens = pick.settle(pool, notes)
    gain = None
    if best is not None and base_trial is not None and base_trial.score is not None:
        gain = best.tokens_per_s_per_gpu / base_trial.tokens_per_s_per_gpu - 1
    notes += _recipe_notes(ctx, base_trial)
    if kept_recipe or best is None:
        best_execution = baseline if best is not None else None
    else:
        best_execution = ctx.space.to_execution(best.config)
    return TuneResult(
        strategy=strategy, ranked=tuple(ranked), best=best, baseline=base_trial, gain=gain, optimum=optimum,
        regret=_regret(fastest, optimum), search_regret=search_regret, pareto=pareto_front(ranked),
        sensitivity=sens, stats=ctx.stats, exhaustive_stats=ex_stats, candidates=candidates, notes=tuple(notes),
        trials=tuple(t for t in ctx.trials.values() if t.origin != "sensitivity"),
        best_execution=best_execution, fastest=fastest, band=interval, ties=ties, kept_recipe=kept_recipe,
        same_figures=same_figures, max_changes=max_changes,
    )


def _regret(found: Trial | None, optimum: Trial | None) -> float | None:
    """1 - found / optimum (0 when found is as fast), None without both."""
    if found is None or optimum is None or optimum.tokens_per_s_per_gpu <= 0:
        return None
    return max(0.0, 1 - found.tokens_per_s_per_gpu / optimum.tokens_per_s_per_gpu)


def _reference(ctx: SearchContext, options: StrategyOptions) -> tuple[Trial | None, SearchStats, dict[str, Trial]]:
    """The exhaustive search on ``ctx``'s oracle and cache: (its optimum, its stats, its trials)."""
    reference = SearchContext(space=ctx.space, oracle=ctx.oracle, prefilter=ctx.prefilter,
                              budget=ctx.budget, detail=False,
                              trials={k: t for k, t in ctx.trials.items() if t.status == "projected"})
    t0 = time.perf_counter()
    get_strategy("exhaustive")(reference, options)
    reference.stats.wall_s = time.perf_counter() - t0
    return reference.best(), reference.stats, reference.trials


def _axis_changes(recipe: Trial | None) -> Callable[[Trial], int]:
    own = recipe.config if recipe is not None else {}
    return lambda t: sum(t.config.get(axis) != value for axis, value in own.items())


@dataclass(kw_only=True)
class _Pick:
    """Chooses the best among the projected configurations: ties, ``max_changes``, and the sensitivity pass."""

    ctx: SearchContext
    base: Trial | None
    band: Callable[[ExecutionSpec], tuple[float, float] | None] | None
    max_changes: int | None
    changes: Callable[[Trial], int]
    known: Mapping[str, Trial] | None

    def settle(self, pool: dict[str, Trial], notes: list[str]) -> tuple[Any, ...]:
        """Rank ``pool``, choose; while a one-axis change of the choice projects faster than the fastest, it joins
        the pool and the choice is made again (a hill climb: it ends, the throughput rising each round)."""
        ctx, steps = self.ctx, 0
        before = ctx.stats.projected
        while True:
            ranked, same_figures = distinct(list(pool.values()), self.base)
            fastest = ranked[0] if ranked else None
            best, interval, ties, kept_recipe = self._choose(fastest, ranked, notes if not steps else [])
            around = best if best is not None and not ctx.space.membership(best.config) else fastest
            sens = sensitivity(ctx, around, self.known) if around is not None else ()
            faster = [t for axis, value, config in (ctx.space.neighbours(around.config) if around else ())
                      if (t := ctx.trials.get(config_key(config))) is not None and t.status == "projected"
                      and fastest is not None and t.tokens_per_s_per_gpu > fastest.tokens_per_s_per_gpu]
            if not faster:
                break
            steps += 1
            pool.update((t.key, t) for t in faster)
        ctx.stats.sensitivity_projected = ctx.stats.projected - before
        ctx.stats.projected = before
        if steps:
            notes.append(f"a one-axis change of the search's best projected faster: the sensitivity pass climbed "
                         f"{steps} step(s) to the best shown (the budget ended before the local search converged; "
                         "raise --budget)")
        return ranked, same_figures, best, fastest, interval, ties, kept_recipe, sens

    def _choose(self, fastest: Trial | None, ranked: list[Trial], notes: list[str]) -> tuple[Any, ...]:
        """(best, band, ties, kept_recipe): the recipe's own on a tie; else, with ``max_changes``, the fastest tie
        changing at most that many settings; else the fastest."""
        factors = (self.band(self.ctx.space.to_execution(fastest.config))
                   if self.band is not None and fastest is not None else None)
        interval, ties, kept_recipe = _ties(fastest, ranked, self.base, factors)
        if kept_recipe:
            return self.base, interval, ties, True
        if self.max_changes is not None and fastest is not None:
            near = [t for t in (ties or (fastest,)) if self.changes(t) <= self.max_changes]
            if near:
                return near[0], interval, ties, False
            notes.append(f"--max-changes {self.max_changes}: no configuration tied with the fastest changes that "
                         f"few settings of the recipe (the fastest changes {self.changes(fastest)}); it is the best")
        return fastest, interval, ties, False


def _recipe_notes(ctx: SearchContext, base_trial: Trial | None) -> list[str]:
    """What the report says of the recipe's own configuration when it does not run."""
    if base_trial is not None and base_trial.status == "oom" and base_trial.memory is not None:
        m = base_trial.memory
        usable = m.capacity_bytes * (1 - ctx.prefilter.margin) / 2**30
        what = ("is over the HBM per the memory model" if m.peak_bytes > m.capacity_bytes else
                f"fits the HBM ({m.capacity_bytes / 2**30:.1f} GiB) but not the {ctx.prefilter.margin:.0%} margin")
        return [f"the recipe's configuration {what} (peak {m.peak_bytes / 2**30:.1f} GiB > {usable:.1f} GiB "
                "usable); the gain is against its projected throughput"]
    if base_trial is not None and base_trial.status == "illegal":
        return ["the recipe's configuration is illegal on this cluster: "
                + "; ".join(str(p) for p in base_trial.problems[:3])]
    return []


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
