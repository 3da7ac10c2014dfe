"""Exhaustive search's branch and bound against the real projection: premises and exactness."""

from __future__ import annotations

import random

import pytest

from primus_ext.projection import evaluate
from primus_ext.recipe.checks import check
from primus_ext.tune.agent import SearchContext
from primus_ext.tune.axes import CP, EP, MBS, PP, RECOMPUTE, TP
from primus_ext.tune.oracle import projection_oracle
from primus_ext.tune.prefilter import MemoryFilter
from primus_ext.tune.run import tune
from primus_ext.tune.space import AXIS_ORDER, build_space
from primus_ext.tune.strategies import StrategyOptions
from primus_ext.tune.strategies.exhaustive import BOUND_AFTER, LEAST_COMPUTE

PINS = {TP: (1, 2), PP: (2, 4), CP: (1,), EP: (4, 8), MBS: (1, 2)}


def _completions(space, seed: int, wanted: int):
    """``wanted`` legal (leaf, representative) pairs: a random configuration and the least-recompute completion of
    its prefix up to ``BOUND_AFTER`` (``exhaustive._upper_bound``'s representative), both as executions."""
    depth = AXIS_ORDER.index(BOUND_AFTER) + 1
    rng = random.Random(seed)
    found = 0
    while found < wanted:
        config = {}
        for name in AXIS_ORDER:
            config[name] = rng.choice(space.domain(name, config))
        e = space.to_execution(config)
        if check(space.model, e, space.system):
            continue
        rep = {k: config[k] for k in AXIS_ORDER[:depth]}
        for name in AXIS_ORDER[depth:]:
            allowed = space.domain(name, rep)
            rep[name] = min(allowed, key=LEAST_COMPUTE.index) if name == RECOMPUTE else allowed[0]
        r = space.to_execution(rep)
        if check(space.model, r, space.system):
            continue
        found += 1
        yield e, r


def test_bound_premises_hold_on_the_projection(mixtral):
    """No completion of a prefix steps faster than the compute of its least-recompute representative
    (the chain: step >= every rank's busy time >= its compute >= the representative's, per rank)."""
    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    for e, r in _completions(space, 7, 150):
        leaf, low = evaluate(space.model, e, space.system), evaluate(space.model, r, space.system)
        assert leaf.step_time_s >= leaf.breakdown.compute_s
        assert leaf.step_time_s >= low.breakdown.compute_s * (1 - 1e-9), (e, r)


def test_branch_and_bound_finds_the_plain_optimum(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system, PINS)
    oracle = projection_oracle(space.model, space.system, None)
    results = {}
    for bound in (False, True):
        ctx = SearchContext(space=space, oracle=oracle, prefilter=MemoryFilter(space.model, space.system),
                            budget=1, detail=False)
        results[bound] = tune(ctx, "exhaustive", options=StrategyOptions(bound=bound))
    plain, bnb = results[False], results[True]
    assert bnb.best.tokens_per_s_per_gpu == pytest.approx(plain.best.tokens_per_s_per_gpu, rel=1e-12)
    assert bnb.stats.projected + bnb.stats.bound_projections < plain.stats.projected
    assert bnb.stats.pruned_by_bound > 0


@pytest.mark.parametrize("after", [0, 40])
def test_batched_projection_changes_nothing(mixtral, monkeypatch, after):
    """Past ``BATCH_AFTER`` projections the exhaustive search projects each prefix's leaves as one batch
    (``oracle.many``); an oracle without ``many`` (one call per configuration) gives the same trials,
    counts and optimum."""
    from primus_ext.tune.strategies import exhaustive

    monkeypatch.setattr(exhaustive, "BATCH_AFTER", after)
    space = build_space(mixtral.model, mixtral.execution, mixtral.system, PINS)
    oracle = projection_oracle(space.model, space.system, None)
    batched = []

    class Counting:
        def __call__(self, ex):
            return oracle(ex)

        def many(self, executions):
            batched.append(len(executions))
            return oracle.many(executions)

    results, trials = {}, {}
    for name, scorer in (("batch", Counting()), ("one by one", lambda ex: oracle(ex))):
        ctx = SearchContext(space=space, oracle=scorer, prefilter=MemoryFilter(space.model, space.system),
                            budget=1, detail=False)
        results[name] = tune(ctx, "exhaustive")
        trials[name] = {k: (t.status, t.score.step_time_s if t.score else None) for k, t in ctx.trials.items()}
    assert sum(batched) > 0.5 * results["batch"].stats.projected  # most leaves went through batches
    batch, single = results["batch"], results["one by one"]
    assert batch.best.config == single.best.config
    assert (batch.stats.projected, batch.stats.illegal, batch.stats.rejected_by_prefilter) == (
        single.stats.projected, single.stats.illegal, single.stats.rejected_by_prefilter)
    assert trials["batch"].keys() == trials["one by one"].keys()
    for key, (status, step) in trials["one by one"].items():
        assert trials["batch"][key][0] == status
        if step is not None:
            assert trials["batch"][key][1] == pytest.approx(step, rel=1e-9)


def test_a_prefix_whose_micro_batch_count_breaks_a_schedule_rule_has_no_legal_completion(deepseek):
    """``exhaustive.BATCH_PATHS``: the global-batch and schedule-count rules depend on the axes up to the micro-batch
    only; every sampled completion of a prefix the search prunes for one is illegal too."""
    from primus_ext.tune.configure import PRIMUS_SCHEDULES
    from primus_ext.tune.strategies.exhaustive import BATCH_PATHS, _batch_problems

    space = build_space(deepseek.model, deepseek.execution, deepseek.system, schedules=PRIMUS_SCHEDULES)
    depth = AXIS_ORDER.index(BOUND_AFTER) + 1
    rng = random.Random(3)
    pruned = 0
    for _ in range(400):
        prefix = {}
        for name in AXIS_ORDER[:depth]:
            allowed = space.domain(name, prefix)
            if not allowed:
                break
            prefix[name] = rng.choice(allowed)
        else:
            if not _batch_problems(space, prefix, depth):
                continue
            pruned += 1
            for _ in range(5):
                config = dict(prefix)
                for name in AXIS_ORDER[depth:]:
                    config[name] = rng.choice(space.domain(name, config))
                problems = check(space.model, space.to_execution(config), space.system)
                assert any(p.path in BATCH_PATHS for p in problems), config
    assert pruned > 10


def test_compute_floor_bounds_every_completion(mixtral):
    """The bound's floor (``evaluate.compute_floor``: the busiest rank's compute, no schedule simulated) is at most
    the step of every completion of the prefix, and at least the representative's ``compute_s``."""
    from primus_ext.projection.evaluate import compute_floor

    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    for e, r in _completions(space, 11, 120):
        floor = compute_floor(space.model, r, space.system)[0]
        assert evaluate(space.model, e, space.system).step_time_s >= floor * (1 - 1e-9), (e, r)
        assert floor >= evaluate(space.model, r, space.system).breakdown.compute_s * (1 - 1e-9)


@pytest.mark.parametrize("keep", [2, 21, 28])
def test_the_bound_keeps_the_ranking_exact_to_the_kth_distinct_row(keep):
    """``StrategyOptions.keep`` (``--verify-top K``): the bounded search ranks the first K rows as the unbounded one
    does. Configurations with equal figures are one row (``tune.run.distinct``); when the bound counted them apart,
    K = 28 here (K = 21 through the CLI) left out a distinct configuration faster than the K-th row (a reviewer's
    reproducer)."""
    from primus_ext.recipe import load_recipe
    from primus_ext.tune.strategies.exhaustive import _kth_distinct

    r = load_recipe("recipes/llama3.1_8B-pretrain.yaml", cluster="h100", nodes=1, validate=False)
    space = build_space(r.model, r.execution, r.system)
    oracle = projection_oracle(space.model, space.system, None)

    def run(bound: bool):
        ctx = SearchContext(space=space, oracle=oracle, prefilter=MemoryFilter(space.model, space.system), budget=1,
                            detail=False)
        return ctx, tune(ctx, "exhaustive", baseline=r.execution, options=StrategyOptions(keep=keep, bound=bound))

    ctx, plain = run(False)
    assert plain.same_figures > 0  # the space has rows with equal figures: the case the bound must count once
    assert _kth_distinct(ctx.projected(), keep).figures == plain.ranked[keep - 1].figures
    _, bounded = run(True)
    assert bounded.stats.pruned_by_bound > 0
    # the same rows: one-by-one and batched projections of one configuration agree to ~1e-16, not bit for bit
    assert [t.headroom_bytes for t in bounded.ranked[:keep]] == [t.headroom_bytes for t in plain.ranked[:keep]]
    assert [t.tokens_per_s_per_gpu for t in bounded.ranked[:keep]] == pytest.approx(
        [t.tokens_per_s_per_gpu for t in plain.ranked[:keep]], rel=1e-12)
