"""Memory pre-filter against the memory model (the real one), margins, and memory pruning."""

from __future__ import annotations

import random

from tune_fakes import fake_oracle

from primus_ext.model.memory import estimate_memory
from primus_ext.recipe.checks import check
from primus_ext.tune.agent import SearchContext
from primus_ext.tune.legality import is_structural
from primus_ext.tune.prefilter import MemoryFilter
from primus_ext.tune.space import AXIS_ORDER, STRUCTURAL_AXES, build_space
from primus_ext.tune.strategies.exhaustive import _min_completions


def _legal_sample(space, n, seed):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        config = {}
        for name in AXIS_ORDER:
            config[name] = rng.choice(space.domain(name, config))
        if not check(space.model, space.to_execution(config), space.system):
            out.append(config)
    return out


def test_prefilter_rejects_exactly_what_the_memory_model_says_does_not_fit(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    ctx = SearchContext(space=space, oracle=fake_oracle(space.model, space.system),
                        prefilter=MemoryFilter(space.model, space.system), budget=1000)
    statuses = set()
    for config in _legal_sample(space, 60, seed=2):
        trial = ctx.try_config(config, origin="test")
        memory = estimate_memory(space.model, space.to_execution(config), space.system)
        assert (trial.status == "oom") == (not memory.fits), config
        if trial.status == "oom":
            assert trial.memory.peak_bytes == int(memory.peak_bytes) > trial.memory.capacity_bytes
        statuses.add(trial.status)
    assert statuses == {"oom", "projected"}
    assert len(fake_oracle(space.model, space.system).calls) == 0  # a fresh oracle; ctx's own was used


def test_margin_rejects_configurations_within_it(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    plain = MemoryFilter(space.model, space.system)
    capacity = plain.capacity_bytes
    fitting = [space.to_execution(c) for c in _legal_sample(space, 80, seed=3)]
    fitting = [e for e in fitting if plain.fits(e)]
    peaks = sorted(plain.peak(e) / capacity for e in fitting)
    margin = 1 - peaks[len(peaks) // 2]  # half of them use more than (1 - margin) of HBM
    strict = MemoryFilter(space.model, space.system, margin=margin)
    kept = [e for e in fitting if strict.fits(e)]
    assert 0 < len(kept) < len(fitting)
    assert all(plain.peak(e) <= capacity * (1 - margin) + 1 for e in kept)


def test_memory_pruning_is_sound(deepseek):
    """If the memory-minimal completion of a prefix does not fit, no sampled completion fits."""
    space = build_space(deepseek.model, deepseek.execution, deepseek.system)
    prefilter = MemoryFilter(space.model, space.system)
    rng = random.Random(4)
    checked = 0
    for prefix in space.iter_configs(structural_only=True):
        minimal = _min_completions(space, prefix, len(STRUCTURAL_AXES))[0]
        execution = space.to_execution(minimal)
        if is_structural(check(space.model, execution, space.system)) or prefilter.fits(execution):
            continue  # an illegal sharding of the minimal completion still bounds the memory of the others
        checked += 1
        for _ in range(4):
            config = dict(prefix)
            for name in AXIS_ORDER[len(prefix):]:
                config[name] = rng.choice(space.domain(name, config))
            e = space.to_execution(config)
            assert check(space.model, e, space.system) or not prefilter.fits(e), config
        if checked >= 40:
            break
    assert checked >= 20
