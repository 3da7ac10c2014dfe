"""The search loop: cache, budget, log/resume, exhaustive optimum, TPE regret, Pareto, sensitivity.

Uses the closed-form fakes of ``tune_fakes`` (independent of the projection) on a small dense model
whose HBM is shrunk so that part of the space does not fit.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from tune_fakes import fake_estimate, fake_filter, fake_fits, fake_oracle, fake_peak

from primus_ext.errors import RecipeError
from primus_ext.recipe.checks import check
from primus_ext.tune.agent import SearchContext, TrialLog, read_log
from primus_ext.tune.axes import RECOMPUTE
from primus_ext.tune.config_keys import config_key
from primus_ext.tune.prefilter import MemoryFilter
from primus_ext.tune.run import pareto_front, tune
from primus_ext.tune.space import build_space
from primus_ext.tune.strategies import StrategyOptions


@pytest.fixture(scope="module")
def small(tiny):
    model, execution, system = tiny
    system = dataclasses.replace(system, gpu=dataclasses.replace(system.gpu, hbm_bytes=int(2.2e9)))
    return model, execution, system, build_space(model, execution, system)


def _ctx(small, budget=40, log=None):
    model, _, system, space = small
    return SearchContext(space=space, oracle=fake_oracle(model, system), prefilter=fake_filter(model, system),
                         budget=budget, log=log)


def _brute_force(small):
    """The optimum by projecting every legal, fitting candidate (no pruning, no cache)."""
    model, _, system, space = small
    oracle, best, statuses = fake_oracle(model, system), None, set()
    for config in space.iter_configs():
        e = space.to_execution(config)
        if check(model, e, system):
            continue
        if fake_peak(model, e, system) > system.gpu.hbm_bytes:
            statuses.add("oom")
            continue
        statuses.add("fit")
        tps = oracle(e).tokens_per_s_per_gpu
        best = tps if best is None or tps > best else best
    assert statuses == {"oom", "fit"}
    return best


def test_exhaustive_finds_the_brute_force_optimum(small):
    ctx = _ctx(small)
    result = tune(ctx, "exhaustive", baseline=small[1])
    assert result.best.tokens_per_s_per_gpu == pytest.approx(_brute_force(small))
    assert result.regret == 0.0 and result.optimum is result.best
    calls = ctx.oracle.calls
    assert len(calls) == len(set(calls))  # never projected twice
    assert ctx.stats.pruned_by_prefilter > 0


def test_tpe_reaches_zero_regret_within_budget_without_reprojecting(small):
    pytest.importorskip("optuna")
    ctx = _ctx(small, budget=60)
    result = tune(ctx, "tpe", baseline=small[1], options=StrategyOptions(seed=3), candidates=small[3].size())
    assert ctx.spent <= 60 and result.stats.projected <= 60
    assert result.regret == pytest.approx(0.0, abs=1e-9)
    assert result.best.tokens_per_s_per_gpu == pytest.approx(_brute_force(small))
    assert len(ctx.oracle.calls) == len(set(ctx.oracle.calls))
    assert result.gain == pytest.approx(result.best.tokens_per_s_per_gpu / result.baseline.tokens_per_s_per_gpu - 1)


def test_pareto_front_and_sensitivity(small):
    pytest.importorskip("optuna")
    ctx = _ctx(small, budget=30)
    result = tune(ctx, "tpe", baseline=small[1], regret=False)
    ranked = list(result.ranked)

    def dominates(f, t):
        return (f.tokens_per_s_per_gpu >= t.tokens_per_s_per_gpu and f.headroom_bytes >= t.headroom_bytes
                and (f.tokens_per_s_per_gpu, f.headroom_bytes) != (t.tokens_per_s_per_gpu, t.headroom_bytes))

    for t in ranked:
        if t in result.pareto:
            assert not any(dominates(f, t) for f in ranked)
        else:  # dominated, or tied with the member that represents its point
            assert any(dominates(f, t) or (f.tokens_per_s_per_gpu, f.headroom_bytes)
                       == (t.tokens_per_s_per_gpu, t.headroom_bytes) for f in result.pareto)
    assert pareto_front(ranked) == result.pareto
    model, _, system, space = small
    oracle = fake_oracle(model, system)
    best = result.best
    for item in result.sensitivity:
        if item.status == "projected":
            config = next(c for a, v, c in space.neighbours(best.config) if (a, v) == (item.axis, item.value))
            expected = oracle(space.to_execution(config)).tokens_per_s_per_gpu / best.tokens_per_s_per_gpu - 1
            assert item.change == pytest.approx(expected)
    assert {s.status for s in result.sensitivity} >= {"projected"}


def test_log_and_resume_continue_without_proposing_again(small, tmp_path):
    pytest.importorskip("optuna")
    path = tmp_path / "trials.jsonl"
    header = {"recipe": "tiny", "nodes": 1}
    first = _ctx(small, budget=15, log=TrialLog(path, header))
    tune(first, "tpe", regret=False)
    first.log.close()
    done = {k for k, t in first.trials.items() if t.status == "projected"}
    with path.open("a") as fh:
        fh.write('{"trial": {"config": {"tp"')  # an interrupted append
    trials = read_log(path, expect=header)
    assert {t.key for t in trials if t.status == "projected"} == done
    second = _ctx(small, budget=30, log=TrialLog(path, header))
    second.seed(trials)
    assert second.spent == len(done)
    checked = len(second.oracle.calls)  # the logged trials are projected again once (issue 57: re-checked)
    assert {config_key(small[3].config_of(e)) for e in second.oracle.calls} == done
    tune(second, "tpe", regret=False)
    again = {config_key(small[3].config_of(e)) for e in second.oracle.calls[checked:]}
    assert not again & done and second.spent <= 30
    with pytest.raises(RecipeError):
        read_log(path, expect={"recipe": "other", "nodes": 1})
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["header"] == header


def test_budget_bounds_any_proposer(small):
    pytest.importorskip("optuna")
    ctx = _ctx(small, budget=5)
    result = tune(ctx, "tpe", regret=False)
    assert ctx.spent == 5 and result.stats.projected == 5


def test_incumbent_includes_seeded_trials(small):
    """A context created with trials (the regret reference, --resume) ranks new ones against them."""
    first = _ctx(small, budget=20)
    tune(first, "tpe", regret=False)
    best = first.best()
    model, _, system, space = small
    second = SearchContext(space=space, oracle=fake_oracle(model, system), prefilter=fake_filter(model, system),
                           budget=5, trials={k: t for k, t in first.trials.items() if t.status == "projected"})
    worse = min(first.projected(), key=lambda t: t.tokens_per_s_per_gpu)
    second.trials.pop(worse.key)
    second.try_config(worse.config, origin="test")
    assert second.best().tokens_per_s_per_gpu == best.tokens_per_s_per_gpu


def test_tpe_projects_when_only_full_recompute_fits(small):
    """Its first phase tells TPE 0 for layouts that need full recompute; when nothing else fits, those layouts
    are projected afterwards (the search had ended with 0 projected: issue 43, Llama-3.1-70B FP8 on 8 MI300X)."""
    pytest.importorskip("optuna")
    model, _, system, space = small

    def only_full(m, e, s, *, margin=0.0):
        return e.recompute_granularity == "full" and e.recompute_method == "uniform" and fake_fits(m, e, s)

    prefilter = MemoryFilter(model, system, fits_fn=only_full, estimate_fn=fake_estimate)
    ctx = SearchContext(space=space, oracle=fake_oracle(model, system), prefilter=prefilter, budget=100)
    result = tune(ctx, "tpe", options=StrategyOptions(seed=0), candidates=space.size())
    assert result.stats.projected > 0 and result.best is not None
    assert result.best.config[RECOMPUTE] == "full"
    assert result.regret == pytest.approx(0.0, abs=1e-9)
