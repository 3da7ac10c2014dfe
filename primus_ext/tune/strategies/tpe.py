"""TPE (optuna's Tree-structured Parzen Estimator) over the outer axes, then local search over all.

TPE samples the outer axes (TP, ETP, PP, VPP, CP, EP, MBS, sharding, precision) in order; an axis whose
candidates depend on earlier axes (ETP on TP, VPP on PP, MBS on DP, ...) is sampled under a parameter
name that carries its candidate list, so each distribution stays fixed (optuna's define-by-run idiom
for conditional spaces). The inner axes (``INNER``: recompute, overlap flags) are completed greedily
for each sample (``_greedy_inner``: overlaps on, least recompute that fits), so TPE scores layouts,
not OOMs. Illegal and rejected configurations score 0 tok/s and cost no budget. ``TPE_SHARE`` of the
budget goes to TPE; the rest to first-improvement hill climbing over every axis from the best
configuration (one-axis changes, each also with the least recompute that fits, then coupled pairs);
when it converges, TPE resumes on part of what is left, and so on until the budget is spent.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from primus_ext.errors import Problem, RecipeError
from primus_ext.tune.legality import problems_of
from primus_ext.tune.space import AXIS_ORDER, Config, Space
from primus_ext.tune.strategies.exhaustive import LEAST_COMPUTE

TPE_SHARE = 0.4
"""Fraction of the budget spent on TPE sampling before the local search starts."""
STARTUP_TRIALS = 10
"""Random trials before TPE models the objective (optuna's default)."""
SAMPLES_PER_PROJECTION = 10
"""A TPE phase ends after this many samples per projection it was given (TPE re-proposes tried and
rejected configurations once it concentrates; every optuna sample costs O(trials))."""
CLIMB_STARTS = 3
"""Local searches start from the best trial not yet climbed from among this many best ones."""
RESTART_PARTS = 3
"""After a local search converges, TPE samples 1/RESTART_PARTS of the remaining budget before the next one."""
COUPLED = (("tp", "pp"), ("pp", "vpp"), ("pp", "mbs"), ("tp", "ep"), ("ep", "etp"), ("mbs", "recompute"),
           ("sharding", "recompute"))
"""Axis pairs that trade against each other (memory, bubble, communication): the local search tries
changing both at once when no single change helps."""


def _param_name(space: Space, name: str, allowed: tuple[Any, ...], universe: tuple[Any, ...]) -> str:
    return name if tuple(allowed) == tuple(universe) else f"{name}|{','.join(map(str, allowed))}"


def _params_of(space: Space, config: Config, universes: dict[str, tuple[Any, ...]]) -> dict[str, Any]:
    params, partial = {}, {}
    for name in AXIS_ORDER:
        allowed = space.domain(name, partial)
        if len(allowed) > 1:
            params[_param_name(space, name, allowed, universes[name])] = config[name]
        partial[name] = config[name]
    return params


INNER = ("recompute", "tp_comm_overlap", "ep_overlap", "dp_overlap")
"""Axes TPE does not sample: ``_greedy_inner`` sets them for each outer choice (the local search then
explores them one by one)."""


def _least_recompute(ctx: Any, config: Config) -> Config:
    """``config`` with the least recompute that is legal and fits (itself when none does): a move that
    frees or takes memory (TP, PP, EP, MBS, sharding) is tried with the recompute it allows."""
    space: Space = ctx.space
    for choice in LEAST_COMPUTE:
        candidate = space.repair({**config, "recompute": choice})
        if candidate["recompute"] != choice or problems_of(space, candidate):
            continue
        try:
            if ctx.prefilter.fits(space.to_execution(candidate)):
                return candidate
        except RecipeError:
            continue
    return config


def _greedy_inner(ctx: Any, config: Config) -> Config:
    """Complete TPE's outer choice: every overlap on where the space offers it, and the least recompute
    that is legal and fits (EP overlap dropped if only recompute it forbids fits)."""
    space: Space = ctx.space
    for ep_overlap in (True, False):
        on: Config = {}
        for name in AXIS_ORDER:
            allowed = space.domain(name, on)
            if name in ("tp_comm_overlap", "ep_overlap"):
                want = ep_overlap if name == "ep_overlap" else True
                on[name] = want if want in allowed else allowed[0]
            elif name == "dp_overlap":
                on[name] = allowed[-1]
            else:
                on[name] = config[name] if config[name] in allowed else allowed[0]
        fitted = _least_recompute(ctx, on)
        if fitted is not on:
            return fitted
    return config


def _moves(ctx: Any, config: Config, pairs: bool) -> Any:
    space: Space = ctx.space
    if not pairs:
        for axis, _, moved in space.neighbours(config):
            yield moved
            if axis != "recompute":
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


def local_search(ctx: Any, origin: str, on_trial: Callable[[Any], None] | None = None,
                 start: Any = None) -> bool:
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


def run(ctx: Any, options: Any) -> list[str]:
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
    universes = {axis.name: axis.universe for axis in space.axes()}
    with warnings.catch_warnings():  # multivariate / group are marked experimental by optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=options.seed, multivariate=True, group=True,
                                             n_startup_trials=STARTUP_TRIALS)
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def tell_known(config: Config, value: float) -> None:
        params, partial, dists = {}, {}, {}
        for name in AXIS_ORDER:
            allowed = space.domain(name, partial)
            if len(allowed) > 1 and config.get(name) in allowed:
                key = _param_name(space, name, allowed, universes[name])
                params[key], dists[key] = config[name], CategoricalDistribution(list(allowed))
            partial[name] = config.get(name)
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=value))

    for trial in list(ctx.trials.values()):  # resumed or seeded trials inform the model
        if not space.membership(trial.config):
            tell_known(trial.config, trial.tokens_per_s_per_gpu)
    if options.start is not None and not space.membership(options.start):
        study.enqueue_trial(_params_of(space, options.start, universes))

    def sample() -> None:
        asked = study.ask()
        config: Config = {}
        for name in AXIS_ORDER:
            allowed = space.domain(name, config)
            if name in INNER or len(allowed) == 1:
                config[name] = allowed[0]
            else:
                config[name] = asked.suggest_categorical(_param_name(space, name, allowed, universes[name]),
                                                         list(allowed))
        trial = ctx.try_config(_greedy_inner(ctx, config), origin="tpe")
        study.tell(asked, trial.tokens_per_s_per_gpu)

    def learn(trial: Any) -> None:
        if trial.origin == "tpe-local" and trial.key not in told:
            told.add(trial.key)
            tell_known(trial.config, trial.tokens_per_s_per_gpu)

    told: set[str] = set()
    climbed: set[str] = set()
    stop_at = ctx.spent + max(1, int(ctx.remaining * TPE_SHARE))
    try:
        while True:  # ends with BudgetExhausted (budget or attempt cap)
            samples = SAMPLES_PER_PROJECTION * (stop_at - ctx.spent)
            while ctx.spent < stop_at and samples > 0:
                sample()
                samples -= 1
            start = next((t for t in ctx.projected()[:CLIMB_STARTS] if t.key not in climbed), None)
            if start is not None:
                climbed.add(start.key)
                if not local_search(ctx, "tpe-local", learn, start=start):
                    break
                climbed.add(ctx.best().key)  # not None: a start existed
            stop_at = ctx.spent + max(1, ctx.remaining // RESTART_PARTS)
    except BudgetExhausted:
        pass
    return []
