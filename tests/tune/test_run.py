"""``tune.run``: ties inside the fastest's band keep the recipe's own configuration; configurations that
project exactly alike are listed once (issue 43). Closed-form fakes (``tune_fakes``) on a small dense model."""

from __future__ import annotations

import dataclasses

import pytest
from tune_fakes import fake_filter, fake_oracle

from primus_ext.tune.agent import SearchContext, Trial
from primus_ext.tune.axes import DP_OVERLAP, TP
from primus_ext.tune.oracle import Score
from primus_ext.tune.run import distinct, tune
from primus_ext.tune.space import build_space


@pytest.fixture(scope="module")
def small(tiny):
    model, execution, system = tiny
    system = dataclasses.replace(system, gpu=dataclasses.replace(system.gpu, hbm_bytes=int(2.2e9)))
    return model, execution, system, build_space(model, execution, system)


def _tune(small, band):
    model, execution, system, space = small
    ctx = SearchContext(space=space, oracle=fake_oracle(model, system), prefilter=fake_filter(model, system),
                        budget=1000)
    return tune(ctx, "exhaustive", baseline=execution, band=band)


def test_inside_the_band_the_recipe_is_kept_and_said(small):
    plain = _tune(small, None)
    assert plain.band is None and plain.ties == () and not plain.kept_recipe
    fastest, recipe = plain.best.tokens_per_s_per_gpu, plain.baseline.tokens_per_s_per_gpu
    assert recipe < fastest  # the recipe is not the fastest here: a tie is what keeps it
    ahead = fastest / recipe  # a band just wide enough to hold the recipe, and one just too narrow
    wide = _tune(small, lambda e: (1 / ahead - 1e-6, 1 / ahead + 0.2))
    assert wide.kept_recipe and wide.best is wide.baseline and wide.gain == 0.0
    assert wide.best_execution == small[1] and wide.fastest.key == plain.best.key
    assert wide.band == pytest.approx((fastest / ahead, fastest * (1 / ahead + 0.2)), rel=1e-5)
    assert all(t.tokens_per_s_per_gpu >= wide.band[0] for t in wide.ties)
    assert {t.key for t in wide.ties} == {t.key for t in wide.ranked if t.tokens_per_s_per_gpu >= wide.band[0]}
    assert wide.regret == 0.0  # the search's regret is the fastest's, whatever is kept
    narrow = _tune(small, lambda e: (1 / ahead + 1e-6, 1.0))
    assert not narrow.kept_recipe and narrow.best.key == plain.best.key and narrow.gain == pytest.approx(ahead - 1)
    assert plain.baseline.key not in {t.key for t in narrow.ties}


def test_configurations_that_project_alike_are_listed_once_closest_to_the_recipe():
    score = Score(tokens_per_s_per_gpu=100.0, step_time_s=1.0, mfu=0.3, peak_bytes=10, capacity_bytes=20)
    other = dataclasses.replace(score, tokens_per_s_per_gpu=90.0)
    recipe = Trial(config={TP: 1, DP_OVERLAP: "grad"}, status="projected", origin="recipe", score=other)
    far = Trial(config={TP: 2, DP_OVERLAP: "grad+param"}, status="projected", origin="tpe", score=score)
    near = Trial(config={TP: 2, DP_OVERLAP: "grad"}, status="projected", origin="tpe", score=score)
    kept, dropped = distinct([far, recipe, near], recipe)
    assert [t.config for t in kept] == [near.config, recipe.config] and dropped == 1
