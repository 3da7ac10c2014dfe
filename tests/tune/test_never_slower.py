"""``tune.run`` (issue 53): the best is never slower than a configuration the run projected, the exhaustive
reference's included; ``--strategy auto`` is exhaustive where the space enumerates in time; ``max_changes`` picks
the fastest tie that changes the recipe least. Closed-form fakes (``tune_fakes``) on a small dense model."""

from __future__ import annotations

import dataclasses

import pytest
from tune_fakes import fake_filter, fake_oracle

from primus_ext.tune.agent import SearchContext
from primus_ext.tune.run import EXHAUSTIVE_RATE, EXHAUSTIVE_WITHIN_S, choose_strategy, tune
from primus_ext.tune.space import build_space
from primus_ext.tune.strategies import StrategyOptions


@pytest.fixture(scope="module")
def small(tiny):
    model, execution, system = tiny
    system = dataclasses.replace(system, gpu=dataclasses.replace(system.gpu, hbm_bytes=int(2.2e9)))
    return model, execution, system, build_space(model, execution, system)


def _tune(small, strategy, budget=1000, **kwargs):
    model, execution, system, space = small
    ctx = SearchContext(space=space, oracle=fake_oracle(model, system), prefilter=fake_filter(model, system),
                        budget=budget)
    return tune(ctx, strategy, baseline=execution, candidates=space.size(), options=StrategyOptions(seed=0),
                **kwargs)


def test_a_short_search_applies_the_exhaustive_references_optimum(small):
    pytest.importorskip("optuna")
    short = _tune(small, "tpe", budget=3)  # three projections: far from the optimum
    assert short.search_regret is not None and short.search_regret > 0  # the search alone missed it
    assert short.regret == 0.0 and short.best.key == short.optimum.key == short.fastest.key
    assert short.best_execution == small[3].to_execution(short.optimum.config)
    computed = [*short.ranked, short.optimum, *(t for t in short.trials if t.status == "projected")]
    assert all(short.best.tokens_per_s_per_gpu >= t.tokens_per_s_per_gpu for t in computed)
    assert any("below the exhaustive reference's optimum" in n for n in short.notes)


def test_without_a_reference_a_faster_neighbour_becomes_the_best(small):
    pytest.importorskip("optuna")
    short = _tune(small, "tpe", budget=3, regret=False)
    assert short.optimum is None
    faster = [s for s in short.sensitivity if s.change is not None and s.change > 0]
    assert not faster  # the sensitivity pass climbed until no one-axis change of the best is faster
    assert all(short.best.tokens_per_s_per_gpu >= t.tokens_per_s_per_gpu for t in short.ranked)


def test_auto_is_exhaustive_when_the_space_enumerates_in_time():
    assert choose_strategy(19_144)[0] == "exhaustive"  # issue 53: Llama-3.1-70B FP8 on 4 x MI300X
    limit = int(EXHAUSTIVE_RATE * EXHAUSTIVE_WITHIN_S)
    assert choose_strategy(limit)[0] == "exhaustive" and choose_strategy(limit + 1)[0] == "tpe"
    assert choose_strategy(None)[0] == "tpe" and "auto" in choose_strategy(None)[1]


def test_max_changes_picks_the_fastest_tie_changing_the_recipe_least(small):
    plain = _tune(small, "exhaustive")
    recipe, fastest = plain.baseline, plain.best
    ahead = fastest.tokens_per_s_per_gpu / recipe.tokens_per_s_per_gpu
    band = lambda e: (1 / ahead + 1e-6, 1.0)  # noqa: E731  wide, but the recipe's own is just outside it
    default = _tune(small, "exhaustive", band=band)
    assert not default.kept_recipe and default.best.key == fastest.key and len(default.ties) > 1

    def changes(t):
        return sum(t.config.get(axis) != value for axis, value in recipe.config.items())

    fewest = min(changes(t) for t in default.ties)
    assert fewest < changes(fastest)  # a tie changes fewer settings than the fastest: the case to decide
    picked = _tune(small, "exhaustive", band=band, max_changes=fewest)
    assert changes(picked.best) <= fewest and picked.best.key != fastest.key
    assert picked.best.tokens_per_s_per_gpu == max(t.tokens_per_s_per_gpu for t in default.ties
                                                  if changes(t) <= fewest)
    assert picked.fastest.key == fastest.key and picked.regret == 0.0  # the fastest is still reported
    assert picked.best_execution == small[3].to_execution(picked.best.config)
    none = _tune(small, "exhaustive", band=band, max_changes=fewest - 1) if fewest else None
    if none is not None:
        assert none.best.key == fastest.key and any("--max-changes" in n for n in none.notes)
