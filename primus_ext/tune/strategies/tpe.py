"""TPE (optuna's Tree-structured Parzen Estimator) over the outer axes, then best-first local search.

The outer axes (``OUTER``: TP, ETP, PP, VPP, CP, EP, MBS, sharding, precision) are what TPE and the
local search choose; the inner axes (``INNER``: recompute, overlap flags) are completed greedily for
each outer choice (``_OuterSearch.complete``: every overlap on, the least recompute that is legal and
fits), so every projection scores a layout, never an OOM. Legality and the memory pre-filter are free:
an outer choice without a fitting completion costs no projection (TPE is told 0 for it). Nothing
case-specific is used: the space, the legality check, the pre-filter, the recipe's configuration and
the projections of the strategy's own trials.

  1. TPE (multivariate, each axis over its full universe; combinations outside the space are marked
     failed, not scored, so TPE does not learn the space's shape as "slow") spends ``TPE_SHARE`` of the
     budget, the recipe's own layout first. Layouts whose completion needs full recompute are told 0
     unprojected in this phase (full recompute costs about a third of the compute).
  2. Best-first local search over the outer axes: the best projected layout whose neighbourhood is not
     yet exhausted is expanded, its neighbours projected one by one until one beats it (which is then
     expanded next); an exhausted layout is a local optimum and the search goes on from the next best,
     so a climb that left a layout early resumes there later (two peaks a few moves apart both get
     climbed). Neighbours: every other value of one axis, then coupled two-axis steps to adjacent
     candidates (``COUPLED``: axes that trade memory or bubble against each other, e.g. TP and MBS),
     in order of the recompute their completion needs relative to the layout's.
  3. When ``POLISH_RESERVE`` projections are left, the best configuration's inner axes are polished
     (one-axis changes of recompute and the overlap flags, first improvement); then 2. continues.
When every layout is exhausted TPE samples again (full recompute allowed). Regret per seed:
``benchmarks/tune_search.py`` (0 % on seeds 0-9 for both of its cases when measured; the search is a
heuristic: a seed can still end in a distant local optimum, ~3-10 % of seeds on DeepSeek-V3)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from primus_ext.errors import Problem, RecipeError
from primus_ext.tune import axes
from primus_ext.tune.axes import label
from primus_ext.tune.legality import problems_of
from primus_ext.tune.space import AXIS_ORDER, Config, Space
from primus_ext.tune.strategies.exhaustive import LEAST_COMPUTE

if TYPE_CHECKING:
    from primus_ext.tune.agent import SearchContext, Trial
    from primus_ext.tune.strategies import StrategyOptions

TPE_SHARE = 0.2
"""Fraction of the budget spent on TPE sampling (the recipe's layout included) before the local search."""
STARTUP_TRIALS = 15
"""Random samples before TPE models the objective (optuna's default is 10; out-of-space and skipped
samples count too)."""
SAMPLES_PER_PROJECTION = 20
"""A TPE phase ends after this many samples per projection it was given (TPE re-proposes tried and
out-of-space configurations once it concentrates; every optuna sample costs O(trials))."""
POLISH_RESERVE = 8
"""Projections kept for the inner-axes polish of the best configuration (recompute choices, the
three overlap flags: at most ~6 one-axis changes)."""
COUPLED = ((axes.TP, axes.PP), (axes.PP, axes.VPP), (axes.PP, axes.MBS), (axes.TP, axes.EP), (axes.EP, axes.ETP),
           (axes.TP, axes.MBS), (axes.CP, axes.MBS), (axes.PP, axes.EP), (axes.MBS, axes.RECOMPUTE),
           (axes.SHARDING, axes.RECOMPUTE))
"""Axis pairs that trade against each other (memory, bubble, communication): TP and CP split the
activations that MBS multiplies, PP and EP both shard the experts, PP*VPP sets the chunk count. The
local searches try changing both at once (the outer search uses the pairs of outer axes)."""


INNER = (axes.RECOMPUTE, axes.TP_OVERLAP, axes.EP_OVERLAP, axes.DP_OVERLAP)
"""Axes TPE does not sample: ``_greedy_inner`` sets them for each outer choice (the local search then
explores them one by one)."""
OUTER = tuple(name for name in AXIS_ORDER if name not in INNER)
"""Axes TPE samples and the outer local search moves (each one's candidates depend on earlier outer
axes only)."""


def _least_recompute(ctx: SearchContext, config: Config) -> Config:
    """``config`` with the least recompute that is legal and fits (itself when none does): a move that
    frees or takes memory (TP, PP, EP, MBS, sharding) is tried with the recompute it allows."""
    space: Space = ctx.space
    for choice in LEAST_COMPUTE:
        candidate = space.repair({**config, axes.RECOMPUTE: choice})
        if candidate is None or candidate[axes.RECOMPUTE] != choice or problems_of(space, candidate):
            continue
        try:
            if ctx.prefilter.fits(space.to_execution(candidate)):
                return candidate
        except RecipeError:
            continue
    return config


def _greedy_inner(ctx: SearchContext, config: Config) -> Config:
    """Complete TPE's outer choice: every overlap on where the space offers it, and the least recompute
    that is legal and fits (EP overlap dropped if only recompute it forbids fits)."""
    space: Space = ctx.space
    for ep_overlap in (True, False):
        on: Config = {}
        for name in AXIS_ORDER:
            allowed = space.domain(name, on)
            if name in (axes.TP_OVERLAP, axes.EP_OVERLAP):
                want = ep_overlap if name == axes.EP_OVERLAP else True
                on[name] = want if want in allowed else allowed[0]
            elif name == axes.DP_OVERLAP:
                on[name] = allowed[-1]
            else:
                on[name] = config[name] if config[name] in allowed else allowed[0]
        fitted = _least_recompute(ctx, on)
        if fitted is not on:
            return fitted
    return config


def _moves(ctx: SearchContext, config: Config, pairs: bool) -> Any:
    space: Space = ctx.space
    if not pairs:
        for axis, _, moved in space.neighbours(config):
            yield moved
            if axis != axes.RECOMPUTE:
                fitted = _least_recompute(ctx, moved)
                if fitted != moved:
                    yield fitted
        return
    for first, second in COUPLED:
        for a, _, moved in space.neighbours(config):
            if a != first:
                continue
            for b, _, both in space.neighbours(moved):
                if b == second:
                    yield both


def local_search(ctx: SearchContext, origin: str, on_trial: Callable[[Trial], None] | None = None,
                 start: Trial | None = None) -> bool:
    """First-improvement hill climbing from ``start`` (default: the best trial): one-axis changes, then
    coupled two-axis changes (``COUPLED``) once no single change helps. False when the budget ran out."""
    from primus_ext.tune.agent import BudgetExhausted

    current = start if start is not None else ctx.best()
    if current is None:
        return True
    improved, pairs = True, False
    while improved or not pairs:
        if not improved:
            pairs = True
        improved = False
        for config in _moves(ctx, current.config, pairs):
            try:
                trial = ctx.try_config(config, origin=origin)
            except BudgetExhausted:
                return False
            if on_trial is not None:
                on_trial(trial)
            if trial.status == "projected" and trial.tokens_per_s_per_gpu > current.tokens_per_s_per_gpu:
                current, improved, pairs = trial, True, False
                break
    return True


def _ordered(values: tuple[Any, ...]) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


class _OuterSearch:
    """The state of one run: outer layouts tried, their best projected value, TPE's study."""

    def __init__(self, ctx: SearchContext, study: Any, distributions: dict[str, Any]) -> None:
        self.ctx, self.space, self.study, self.distributions = ctx, ctx.space, study, distributions
        self.fixed = {axis.name: axis.universe[0] for axis in self.space.axes()
                      if label(axis.name) not in distributions}
        self.values: dict[tuple[Any, ...], float] = {}
        """Outer layout -> best tok/s/GPU projected with it."""
        self.completions: dict[tuple[Any, ...], Config | None] = {}
        self.tried: set[tuple[Any, ...]] = set()
        """Outer layouts whose completion was tried (projected, or found to have none)."""
        self.expanded: set[tuple[Any, ...]] = set()
        self.polished: set[str] = set()
        self.told: set[tuple[Any, ...]] = set()
        self.skipped: dict[tuple[Any, ...], None] = {}
        """Layouts the first phase told 0 unprojected (their completion needs full recompute), in the order
        sampled: ordinary candidates afterwards (a re-sample or ``expand`` projects them)."""

    # --- outer layouts ------------------------------------------------------------------------
    def repaired(self, outer: dict[str, Any]) -> tuple[Any, ...] | None:
        """``outer`` with each axis that left its candidates moved to the nearest (None if one has none)."""
        partial: Config = {}
        for name in OUTER:
            allowed = self.space.domain(name, partial)
            if not allowed:
                return None
            value = outer[name]
            if not any(value == a and type(value) is type(a) for a in allowed):
                value = min(allowed, key=lambda a: (abs(a - value), a)) if _ordered(allowed) and _ordered(
                    (value,)) else allowed[0]
            partial[name] = value
        return tuple(partial[name] for name in OUTER)

    def member(self, key: tuple[Any, ...]) -> bool:
        partial: Config = {}
        for name, value in zip(OUTER, key, strict=True):
            if not any(value == a and type(value) is type(a) for a in self.space.domain(name, partial)):
                return False
            partial[name] = value
        return True

    def complete(self, key: tuple[Any, ...]) -> Config | None:
        """The greedy completion of an outer layout (overlaps on, least recompute that fits), or None
        when no completion is legal and fits (free: legality and the pre-filter are not projections)."""
        if key not in self.completions:
            config = None
            if self.member(key):
                outer = dict(zip(OUTER, key, strict=True))
                on: Config = {}
                for name in AXIS_ORDER:
                    on[name] = outer[name] if name in outer else self.space.domain(name, on)[0]
                fitted = _greedy_inner(self.ctx, on)
                config = fitted if fitted is not on else None  # ``on`` itself back: nothing fits
            self.completions[key] = config
        return self.completions[key]

    def evaluate(self, key: tuple[Any, ...]) -> float | None:
        """Project the greedy completion of ``key`` (once); None when it has none. Tells TPE."""
        config = self.complete(key)
        self.tried.add(key)
        value = None
        if config is not None:
            trial = self.ctx.try_config(config, origin="tpe")
            if trial.status == "projected":
                value = trial.tokens_per_s_per_gpu
                self.values[key] = max(value, self.values.get(key, 0.0))
        self.tell(key, value or 0.0)
        return value

    def tell(self, key: tuple[Any, ...], value: float) -> None:
        import optuna

        if key in self.told:
            return
        self.told.add(key)
        params = {label(n): v for n, v in zip(OUTER, key, strict=True) if label(n) in self.distributions}
        if all(v in self.distributions[n].choices for n, v in params.items()):
            self.study.add_trial(optuna.trial.create_trial(params=params, distributions=self.distributions,
                                                           value=value))

    def learn(self, trial: Trial) -> None:
        """A trial from elsewhere (resume, the recipe, the polish) informs the model and the search."""
        key = tuple(trial.config.get(n) for n in OUTER)
        if trial.status == "projected":
            self.values[key] = max(trial.tokens_per_s_per_gpu, self.values.get(key, 0.0))

    # --- phases -------------------------------------------------------------------------------
    def sample(self, projections: int, *, skip_full: bool = False) -> None:
        """TPE proposals until ``projections`` more were spent (or the sample allowance ran out).
        ``skip_full``: layouts whose completion needs full recompute are told 0 unprojected (the first
        phase looks where recompute does not cost a third of the compute; the local search and later
        phases still reach them)."""
        import optuna

        stop_at = self.ctx.spent + projections
        for _ in range(SAMPLES_PER_PROJECTION * projections):
            if self.ctx.spent >= stop_at:
                return
            asked = self.study.ask(self.distributions)
            key = tuple(asked.params[label(n)] if label(n) in asked.params else self.fixed[n] for n in OUTER)
            if key in self.skipped and not skip_full:  # told 0 unprojected in the first phase: project it now
                del self.skipped[key]
                self.study.tell(asked, self.evaluate(key) or 0.0)
                continue
            if key in self.told or key in self.tried:
                self.study.tell(asked, self.values.get(key, 0.0))
                continue
            if not self.member(key):  # outside the space: no lesson (a 0 would teach TPE the space's shape)
                self.study.tell(asked, state=optuna.trial.TrialState.FAIL)
                continue
            self.told.add(key)  # told below, through ``asked``
            config = self.complete(key)  # None when nothing fits: 0
            skip = skip_full and config is not None and config[axes.RECOMPUTE] == LEAST_COMPUTE[-1]
            if skip:
                self.skipped[key] = None
            value = None if skip else self.evaluate(key)
            self.study.tell(asked, value or 0.0)

    def neighbours(self, key: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """One-axis changes (every other candidate), then coupled two-axis steps of the outer axes
        (``COUPLED``; ordered axes to their adjacent candidates), each repaired into the space."""
        outer = dict(zip(OUTER, key, strict=True))

        def steps(config: dict[str, Any], name: str, single: bool = False) -> list[Any]:
            partial = {n: config[n] for n in OUTER[: OUTER.index(name)]}
            allowed = self.space.domain(name, partial)
            if config[name] not in allowed:
                return []
            if single or not _ordered(allowed) or len(allowed) <= 2:
                return [v for v in allowed if v != config[name]]
            i = sorted(allowed).index(config[name])
            return [v for j, v in enumerate(sorted(allowed)) if abs(i - j) == 1]

        out: list[tuple[Any, ...]] = []
        for name in OUTER:
            out += [self.repaired({**outer, name: v}) for v in steps(outer, name, single=True)]
        for first, second in COUPLED:
            if first not in OUTER or second not in OUTER:
                continue
            for v in steps(outer, first):
                moved = self.repaired({**outer, first: v})
                if moved is None:
                    continue
                moved_outer = dict(zip(OUTER, moved, strict=True))
                out += [self.repaired({**moved_outer, second: w}) for w in steps(moved_outer, second)]
        seen: set[tuple[Any, ...]] = {key}
        unique = []
        for n in out:
            if n is not None and n not in seen:
                seen.add(n)
                unique.append(n)
        return unique

    def expand(self) -> bool:
        """One best-first step: project neighbours of the best unexpanded layout until one beats it.
        Neighbours go in order of the recompute their completion needs relative to the layout's (a
        move that must recompute more rarely wins; one that frees recompute often does). False when
        every projected layout is exhausted (and none the first phase skipped is left)."""
        open_ = [(v, k) for k, v in self.values.items() if k not in self.expanded]
        if not open_:
            while self.skipped:  # every layout that fits needs full recompute: climb from those skipped first
                key = next(iter(self.skipped))
                del self.skipped[key]
                if key not in self.tried:
                    self.evaluate(key)
                    return True
            return False
        value, node = max(open_, key=lambda vk: vk[0])
        level = self._recompute_level(node)
        fresh = [n for n in self.neighbours(node) if n not in self.tried and self.complete(n) is not None]
        fresh.sort(key=lambda n: self._recompute_level(n) - level)
        for neighbour in fresh:
            found = self.evaluate(neighbour)
            if found is not None and found > value:
                return True
        self.expanded.add(node)
        return True

    def _recompute_level(self, key: tuple[Any, ...]) -> int:
        config = self.complete(key)
        return LEAST_COMPUTE.index(config[axes.RECOMPUTE]) if config is not None else 0

    def polish(self) -> None:
        """First-improvement one-axis changes of the best configuration's inner axes."""
        current = self.ctx.best()
        while current is not None and current.key not in self.polished:
            self.polished.add(current.key)
            for axis, _, config in self.space.neighbours(current.config):
                if axis not in INNER:
                    continue
                trial = self.ctx.try_config(config, origin="tpe-local")
                self.learn(trial)
                if trial.status == "projected" and trial.tokens_per_s_per_gpu > current.tokens_per_s_per_gpu:
                    current = trial
                    break


def run(ctx: SearchContext, options: StrategyOptions) -> list[str]:
    try:
        import optuna
        from optuna.distributions import CategoricalDistribution
    except ImportError:
        missing = Problem(path="--strategy", value="tpe", message="optuna is not installed",
                          fix="pip install 'primus-ext[agent]' (or use --strategy exhaustive)")
        raise RecipeError(problems=[missing]) from None

    from primus_ext.tune.agent import BudgetExhausted

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space: Space = ctx.space
    # optuna's parameters are named by the axes' short labels: its multivariate TPE orders them by name, so the
    # labels keep a seed's samples those it drew before the axes took the recipe's names
    distributions = {label(axis.name): CategoricalDistribution(list(axis.universe)) for axis in space.axes()
                     if axis.name in OUTER and len(axis.universe) > 1}
    with warnings.catch_warnings():  # multivariate is marked experimental by optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=options.seed, multivariate=True, n_startup_trials=STARTUP_TRIALS)
    search = _OuterSearch(ctx, optuna.create_study(direction="maximize", sampler=sampler), distributions)
    for trial in list(ctx.trials.values()):  # resumed trials and the recipe's own inform the model
        search.learn(trial)
        search.tell(tuple(trial.config.get(n) for n in OUTER), trial.tokens_per_s_per_gpu)
    try:
        if options.start is not None and not space.membership(options.start):
            search.evaluate(tuple(options.start[n] for n in OUTER))
        search.sample(max(1, int(ctx.remaining * TPE_SHARE)), skip_full=True)
        while True:  # ends with BudgetExhausted, or when nothing new is left to try
            if ctx.remaining <= POLISH_RESERVE:
                search.polish()
            if search.expand():
                continue
            before = ctx.spent
            search.sample(max(1, ctx.remaining // 4))
            if ctx.spent == before:
                search.polish()
                if ctx.spent == before:
                    break
    except BudgetExhausted:
        pass
    return []
