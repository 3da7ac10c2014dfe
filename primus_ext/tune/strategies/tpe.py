"""TPE (optuna's Tree-structured Parzen Estimator) over the space, then a one-axis local search.

Axes are sampled in order; an axis whose candidates depend on earlier axes (ETP on TP, VPP on PP,
MBS on DP, ...) is sampled under a parameter name that carries its candidate list, so each
distribution stays fixed (optuna's define-by-run idiom for conditional spaces). Illegal and rejected
configurations score 0 tok/s (TPE learns to avoid them) and cost no budget. ``TPE_SHARE`` of the
budget goes to TPE; the rest to first-improvement hill climbing over one-axis changes of the best
configuration so far (``Space.neighbours``), which removes TPE's last-mile regret.
"""

from __future__ import annotations

import warnings
from typing import Any

from primus_ext.errors import Problem, RecipeError
from primus_ext.tune.space import AXIS_ORDER, Config, Space

TPE_SHARE = 0.6
"""Fraction of the budget spent on TPE sampling before the local search starts."""
STARTUP_TRIALS = 10
"""Random trials before TPE models the objective (optuna's default)."""


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


def local_search(ctx: Any, origin: str) -> None:
    """First-improvement hill climbing over one-axis changes from the best trial (until budget ends)."""
    from primus_ext.tune.agent import BudgetExhausted

    current = ctx.best()
    if current is None:
        return
    improved = True
    while improved:
        improved = False
        for _, _, config in ctx.space.neighbours(current.config):
            try:
                trial = ctx.try_config(config, origin=origin)
            except BudgetExhausted:
                return
            if trial.status == "projected" and trial.tokens_per_s_per_gpu > current.tokens_per_s_per_gpu:
                current, improved = trial, True
                break


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

    stop_at = ctx.spent + max(1, int(ctx.remaining * TPE_SHARE))
    try:
        while ctx.spent < stop_at:
            asked = study.ask()
            config: Config = {}
            for name in AXIS_ORDER:
                allowed = space.domain(name, config)
                config[name] = allowed[0] if len(allowed) == 1 else asked.suggest_categorical(
                    _param_name(space, name, allowed, universes[name]), list(allowed))
            trial = ctx.try_config(config, origin="tpe")
            study.tell(asked, trial.tokens_per_s_per_gpu)
    except BudgetExhausted:
        return []
    local_search(ctx, "tpe-local")
    return []
