"""The search space: candidates, pins, membership, neighbours, memoised domains."""

from __future__ import annotations

import dataclasses
import json

import pytest

from primus_ext.errors import RecipeError
from primus_ext.recipe.checks import check
from primus_ext.tune.axes import CP, DP_OVERLAP, EP, ETP, MBS, PP, RECOMPUTE, SHARDING, TP, TP_OVERLAP
from primus_ext.tune.config_keys import config_key
from primus_ext.tune.space import AXIS_ORDER, build_space, parse_pins


def test_recipe_execution_is_a_point_of_its_space(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    config = space.config_of(mixtral.execution)
    assert space.membership(config) == []
    assert space.to_execution(config) == mixtral.execution


def test_every_candidate_value_respects_world_divisibility(tiny):
    model, execution, system = tiny
    space = build_space(model, execution, system)
    configs = list(space.iter_configs())
    assert len(configs) == space.size() > 50
    assert len({config_key(c) for c in configs}) == len(configs)
    for c in configs:
        assert system.world_size % (c[TP] * c[PP] * c[CP]) == 0
        assert list(c) == list(AXIS_ORDER)


def test_pins_limit_axes_and_reject_empty_spaces(tiny):
    model, execution, system = tiny
    space = build_space(model, execution, system, parse_pins(["tp=1,2", "recompute=none,block25,full"]))
    values = {(c[TP], c[RECOMPUTE]) for c in space.iter_configs()}
    assert {t for t, _ in values} == {1, 2}
    assert {r for _, r in values} <= {"none", "block25", "full"} and "block25" in {r for _, r in values}
    assert space.membership({**next(space.iter_configs()), TP: 4})[0].path == TP
    with pytest.raises(RecipeError):
        build_space(model, execution, system, {TP: (3,)})
    with pytest.raises(RecipeError):
        parse_pins(["tensor_parallel=2"])


def test_neighbours_change_one_axis_and_stay_in_space(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    base = space.config_of(mixtral.execution)
    seen = set()
    for axis, value, config in space.neighbours(base):
        assert config[axis] == value and space.membership(config) == []
        later = AXIS_ORDER[AXIS_ORDER.index(axis) + 1:]
        assert all(config[k] == base[k] for k in AXIS_ORDER if k != axis and k not in later)
        seen.add(axis)
    assert {TP, PP, EP, MBS, RECOMPUTE, SHARDING} <= seen


def test_illegal_candidates_are_left_to_check(tiny):
    """The space proposes TP=8 although 12 heads forbid it: legality is check()'s job."""
    model, execution, system = tiny
    space = build_space(model, execution, system)
    config = next(c for c in space.iter_configs() if c[TP] == 8)
    assert any(p.path == "num_attention_heads" for p in check(model, space.to_execution(config), system))


def test_memoised_domains_and_fast_execution_equal_the_plain_computation(deepseek):
    """``domain`` is memoised on ``DOMAIN_DEPENDS`` and ``to_execution`` skips the dataclass
    ``__init__``: over the DeepSeek-V3 space both must equal the plain computation (an axis reading an
    undeclared earlier axis, or an ``ExecutionSpec`` that derives a field in ``__init__``, fails here)."""
    space = build_space(deepseek.model, deepseek.execution, deepseek.system)
    plain = build_space(deepseek.model, deepseek.execution, deepseek.system)
    for n, config in enumerate(space.iter_configs()):
        if n % 97:
            continue
        partial: dict = {}
        for name in AXIS_ORDER:
            assert space.domain(name, partial) == plain._domain(name, partial), (name, partial)
            partial[name] = config[name]
        fast = space.to_execution(config)
        e = plain.to_execution(config)
        reference = dataclasses.replace(e, **{f.name: getattr(e, f.name) for f in dataclasses.fields(e)})
        assert fast == reference and hash(fast) == hash(reference)
        assert dataclasses.asdict(fast) == dataclasses.asdict(reference)
    space.domain(TP_OVERLAP, {TP: 2})
    assert space.domain(TP_OVERLAP, {TP: 2.0}) == plain._domain(TP_OVERLAP, {TP: 2.0})
    for tp in (1, True, 1.0):  # a value is keyed with its type (True == 1, but not for a proposal)
        assert space.domain(ETP, {TP: tp}) == plain._domain(ETP, {TP: tp})
        assert [type(v) for v in space.domain(ETP, {TP: tp})] == [type(v) for v in plain._domain(ETP, {TP: tp})]


def test_config_key_is_sorted_compact_json():
    for config in ({TP: 2, ETP: None, TP_OVERLAP: True, RECOMPUTE: "block50", DP_OVERLAP: "grad+param"},
                   {"b": False, "a": 'quote"d', "c": 1.5}, {"é": [1, 2]}, {}):
        assert config_key(config) == json.dumps(config, sort_keys=True, separators=(",", ":"))


def test_torch_fsdp2_recipe_keeps_legal_fsdp_candidates(tiny):
    """A Primus recipe on torch FSDP2 (``use_torch_fsdp2``, overlap_grad_reduce on): ``sharding=fsdp`` offers
    the overlap FSDP2 accepts (Megatron refuses overlap_param_gather there), so the recipe is a point of its
    space and its FSDP candidates are legal, pinned or not (they were all illegal: issue 43)."""
    model, execution, system = tiny
    fsdp2 = dataclasses.replace(execution, tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                                data_parallel_size=8, sequence_parallel=False, use_distributed_optimizer=False,
                                fsdp="torch_fsdp2", overlap_grad_reduce=True,
                                launch=dataclasses.replace(execution.launch, framework="primus", env_patches=True,
                                                          gradient_accumulation_fusion=False))
    assert check(model, fsdp2, system) == []
    for pins in ({}, {SHARDING: ("fsdp",)}):
        space = build_space(model, fsdp2, system, pins)
        config = space.config_of(fsdp2)
        assert config[SHARDING] == "fsdp" and config[DP_OVERLAP] == "grad"
        assert space.membership(config) == [] and space.to_execution(config) == fsdp2
        fsdp = [c for c in space.iter_configs() if c[SHARDING] == "fsdp"]
        assert {c[DP_OVERLAP] for c in fsdp} == {"grad"}
        legal = [c for c in fsdp if not check(model, space.to_execution(c), system)]
        assert legal and all(space.to_execution(c).fsdp == "torch_fsdp2" for c in legal)
    pinned = build_space(model, fsdp2, system, {SHARDING: ("fsdp",), DP_OVERLAP: ("none", "grad", "grad+param")})
    assert {c[DP_OVERLAP] for c in pinned.iter_configs()} == {"none", "grad"}
