"""Legality: one check for every proposer, strict reading of outside proposals, sound pruning."""

from __future__ import annotations

import random

from primus_ext.recipe.checks import check
from primus_ext.tune.axes import LABELS, MBS, PP, PRECISION, TP
from primus_ext.tune.legality import is_structural, normalise, problems_of
from primus_ext.tune.space import AXIS_ORDER, STRUCTURAL_AXES, build_space
from primus_ext.tune.strategies.exhaustive import _min_completions


def _random_completion(space, partial, rng):
    config = dict(partial)
    for name in AXIS_ORDER[len(partial):]:
        config[name] = rng.choice(space.domain(name, config))
    return config


def test_problems_of_is_check_for_space_points(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    rng = random.Random(0)
    for _ in range(200):
        config = _random_completion(space, {}, rng)
        assert problems_of(space, config) == check(space.model, space.to_execution(config), space.system)


def test_normalise_reads_only_known_axes_and_candidates(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    base = space.config_of(mixtral.execution)
    config, problems = normalise(space, dict(base))
    assert config == base and problems == []
    single = {k: v for k, v in base.items() if k != PRECISION}  # one candidate: may be left out
    assert normalise(space, single)[0] == base
    for bad, path in [({**base, "rm -rf /": 1}, "rm -rf /"), ({**base, TP: "2"}, TP), ({**base, TP: 3}, TP),
                      ({**base, TP: True}, TP), ({**base, MBS: [1]}, MBS),
                      ({k: v for k, v in base.items() if k != PP}, PP)]:
        config, problems = normalise(space, bad)
        assert config is None and problems and problems[0].path == path, bad
    assert normalise(space, [TP, 2])[0] is None


def test_normalise_reads_short_labels_as_the_axes_they_label(mixtral):
    """An LLM may answer in the labels it reads (tp, mbs, ...): the same configuration; a value is still judged."""
    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    base = space.config_of(mixtral.execution)
    labelled = {LABELS[k]: v for k, v in base.items()}
    assert "mbs" in labelled and normalise(space, labelled) == (base, [])
    config, problems = normalise(space, {**labelled, "tp": 3})
    assert config is None and problems[0].path == TP
    config, problems = normalise(space, {**labelled, TP: base[TP]})  # one axis given both ways: refused, not merged
    assert config is None and problems[0].path == "tp" and problems[0].message == "unknown axis"


def test_structural_pruning_is_sound(tiny):
    """A structural prefix whose first completion has a structural problem has no legal completion."""
    model, execution, system = tiny
    space = build_space(model, execution, system)
    rng = random.Random(1)
    pruned = 0
    for prefix in space.iter_configs(structural_only=True):
        first = _min_completions(space, prefix, len(STRUCTURAL_AXES))[0]
        if not is_structural(check(space.model, space.to_execution(first), space.system)):
            continue
        pruned += 1
        for _ in range(5):
            config = _random_completion(space, prefix, rng)
            assert check(space.model, space.to_execution(config), space.system), config
    assert pruned >= 1  # TP=8 with 12 heads
