"""The tuner's pipeline-schedule axis: candidates, the step floor that bounds costly schedules, exactness of the
branch and bound with them, and what the rewrite writes back."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from primus_ext.errors import RecipeError
from primus_ext.projection import evaluate
from primus_ext.projection.evaluate import step_floor
from primus_ext.recipe.checks import check
from primus_ext.recipe.rewrite import execution_changes
from primus_ext.tune.agent import SearchContext
from primus_ext.tune.axes import (
    CP,
    DP_OVERLAP,
    EP,
    EP_OVERLAP,
    ETP,
    MBS,
    PP,
    PRECISION,
    RECOMPUTE,
    SCHEDULE,
    SHARDING,
    SPLIT,
    TP,
    TP_OVERLAP,
    VPP,
)
from primus_ext.tune.configure import PRIMUS_SCHEDULES
from primus_ext.tune.oracle import projection_oracle
from primus_ext.tune.prefilter import MemoryFilter
from primus_ext.tune.run import tune
from primus_ext.tune.space import AXIS_ORDER, build_space
from primus_ext.tune.strategies import StrategyOptions

ALL = ("1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "dualpipe", "dualpipev")
PINS = {TP: (1, 2), PP: (2, 4), VPP: (1, 2), CP: (1,), EP: (4, 8), MBS: (1, 2),
        RECOMPUTE: ("none", "full"), SHARDING: ("distopt",)}


def test_candidates_follow_pp_and_vpp(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system, schedules=PRIMUS_SCHEDULES)
    assert space.domain(SCHEDULE, {TP: 1, ETP: 1, PP: 4, VPP: 2}) == ("interleaved", *PRIMUS_SCHEDULES)
    assert space.domain(SCHEDULE, {TP: 1, ETP: 1, PP: 4, VPP: 1}) == ("1f1b",)
    assert space.domain(SCHEDULE, {TP: 1, ETP: 1, PP: 1, VPP: 1}) == ("1f1b",)
    pinned = build_space(mixtral.model, mixtral.execution, mixtral.system, {SCHEDULE: ALL})
    assert pinned.domain(SCHEDULE, {TP: 1, ETP: 1, PP: 4, VPP: 1}) == ("1f1b", "zb-h1", "zb-h2",
                                                                                "dualpipe", "dualpipev")
    assert pinned.domain(SCHEDULE, {TP: 1, ETP: 1, PP: 4, VPP: 4}) == ("interleaved",)
    with pytest.raises(RecipeError, match="unknown pipeline schedule"):
        build_space(mixtral.model, mixtral.execution, mixtral.system, {SCHEDULE: ("zb-h3",)})


def test_step_floor_never_exceeds_the_projected_step(mixtral):
    """The floor the branch and bound uses for costly schedules is a true lower bound of ``evaluate``'s step."""
    space = build_space(mixtral.model, mixtral.execution, mixtral.system, {**PINS, SCHEDULE: ALL})
    rng = random.Random(3)
    seen: set[str] = set()
    for _ in range(400):
        config: dict = {}
        for name in AXIS_ORDER:
            config[name] = rng.choice(space.domain(name, config))
        e = space.to_execution(config)
        if check(space.model, e, space.system):
            continue
        seen.add(e.pipeline_schedule)
        assert step_floor(space.model, e, space.system)[0] <= evaluate(space.model, e, space.system).step_time_s
    assert {"zb-h1", "zb-v", "dualpipe", "dualpipev"} <= seen


def test_branch_and_bound_with_costly_schedules_finds_the_plain_optimum(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system,
                        {**PINS, SCHEDULE: ("interleaved", "1f1b", "v-half", "dualpipev")})
    oracle = projection_oracle(space.model, space.system, None)
    results = {}
    for bound in (False, True):
        ctx = SearchContext(space=space, oracle=oracle, prefilter=MemoryFilter(space.model, space.system),
                            budget=1, detail=False)
        results[bound] = tune(ctx, "exhaustive", options=StrategyOptions(bound=bound))
    plain, bnb = results[False], results[True]
    assert bnb.best.tokens_per_s_per_gpu == pytest.approx(plain.best.tokens_per_s_per_gpu, rel=1e-12)
    assert bnb.stats.projected < plain.stats.projected


def test_rewrite_writes_primus_zero_bubble_keys_and_refuses_what_ifs(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system, {SCHEDULE: ALL})
    config = {**space.config_of(mixtral.execution), PP: 4, VPP: 2, SCHEDULE: "v-min", SPLIT: "default"}
    changes = execution_changes(mixtral, space.to_execution(config))
    assert changes["patch_zero_bubble"] is True and changes["zero_bubble_v_schedule"] is True
    assert changes["zero_bubble_v_schedule_mem_setup"] == "min"
    assert changes.get("num_virtual_stages_per_pipeline_rank") is None  # Primus sets VPP = 2 for a V itself
    zb2 = execution_changes(mixtral, space.to_execution({**config, VPP: 1, SCHEDULE: "zb-h2"}))
    assert zb2["zero_bubble_max_pending_backward"] == 8 and "zero_bubble_v_schedule" not in zb2
    with pytest.raises(RecipeError, match="what-if"):
        execution_changes(mixtral, space.to_execution({**config, VPP: 1, SCHEDULE: "dualpipe"}))


def test_a_megatron_lm_recipe_gets_no_zero_bubble_keys(tmp_path: Path):
    from primus_ext.recipe import load_recipe

    flat = tmp_path / "flat.yaml"
    flat.write_text("num_layers: 16\nhidden_size: 1024\nffn_hidden_size: 4096\nnum_attention_heads: 16\n"
                    "seq_length: 4096\nmicro_batch_size: 1\nglobal_batch_size: 64\nbf16: true\nswiglu: true\n"
                    "vocab_size: 32000\npipeline_model_parallel_size: 2\n")
    recipe = load_recipe(flat, cluster="h100", nodes=1)
    space = build_space(recipe.model, recipe.execution, recipe.system, {SCHEDULE: ALL})
    assert space.domain(SCHEDULE, {TP: 1, ETP: None, PP: 2, VPP: 2})[0] == "interleaved"
    config = {**space.config_of(recipe.execution), SCHEDULE: "zb-h1"}
    with pytest.raises(RecipeError, match="only under Primus"):
        execution_changes(recipe, space.to_execution(config))


def test_primus_zero_bubble_rules(mixtral):
    """Primus zbpp_utils.py: zero bubble with the distributed optimizer refuses DP overlap; the V family takes the
    even split only; the tuner offers no overlap there."""
    from dataclasses import replace

    v = replace(mixtral.execution, pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=2,
                pipeline_schedule="zb-v", use_distributed_optimizer=True, overlap_grad_reduce=True,
                overlap_param_gather=True, pipeline_model_parallel_layout=None, decoder_last_pipeline_num_layers=4)
    paths = {p.path for p in check(mixtral.model, v, mixtral.system)}
    assert {"overlap_grad_reduce", "overlap_param_gather", "decoder_first_pipeline_num_layers"} <= paths
    space = build_space(mixtral.model, mixtral.execution, mixtral.system, schedules=PRIMUS_SCHEDULES)
    prefix = {TP: 1, ETP: 1, PP: 4, VPP: 2, SCHEDULE: "v-half", SHARDING: "distopt"}
    assert space.domain(DP_OVERLAP, prefix) == ("none",)
    assert space.domain(SPLIT, prefix) == ("default",)
    assert "grad+param" in space.domain(DP_OVERLAP, {**prefix, SCHEDULE: "interleaved"})


def test_rewrite_zero_bubble_spellings(mixtral):
    from dataclasses import replace

    from primus_ext.recipe.rewrite import schedule_keys

    base = replace(mixtral.execution, pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=None)
    assert schedule_keys(replace(base, pipeline_schedule="zb-h1"), {})["zero_bubble_max_pending_backward"] == 4
    assert schedule_keys(replace(base, pipeline_schedule="zb-h1"), {"patch_primus_pipeline": True}) == {
        "pp_algorithm": "zero-bubble"}
    with pytest.raises(RecipeError, match="no pp_algorithm"):
        schedule_keys(replace(base, pipeline_schedule="zb-h2"), {"patch_primus_pipeline": True})


def test_prefilter_peak_equals_the_estimate_for_every_schedule(mixtral):
    """The pre-filter's representatives cover every rank whose held counts do not fall with the rank (DualPipeV:
    its later ranks hold more deferred weight-gradients)."""
    from dataclasses import replace

    from primus_ext.model.memory import estimate_memory, peak_bytes

    for name in ALL:
        vpp = 2 if name in ("interleaved", "zb-v", "v-half", "v-min") else None
        e = replace(mixtral.execution, pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=vpp,
                    pipeline_schedule=name, pipeline_model_parallel_layout=None, data_parallel_size=8,
                    global_batch_size=256)
        full = estimate_memory(mixtral.model, e, mixtral.system).peak_bytes
        assert peak_bytes(mixtral.model, e, mixtral.system) == pytest.approx(full, rel=1e-9), name


def test_primus_v_schedules_need_an_even_layer_count_per_stage_and_no_layout(deepseek):
    """zbpp_utils.py validate_arguments: num_layers % PP == 0 and an even count per stage; Primus sets the two
    virtual stages itself, which Megatron-LM refuses beside a layout. DeepSeek-V3's 61 layers take neither."""
    from dataclasses import replace

    e = replace(deepseek.execution, pipeline_schedule="v-half", virtual_pipeline_model_parallel_size=2)
    problems = {p.path: p.message for p in check(deepseek.model, e, deepseek.system)}
    assert "even number of layers" in problems["pipeline_model_parallel_size"]
    assert "layout" in problems["pipeline_model_parallel_layout"]
    dualpipev = replace(e, pipeline_schedule="dualpipev", virtual_pipeline_model_parallel_size=None)
    assert "pipeline_model_parallel_size" not in {p.path for p in check(deepseek.model, dualpipev, deepseek.system)}


@pytest.mark.parametrize(("name", "stages"), [("dualpipe", 8), ("dualpipev", 16)])
def test_deepseek_schedules_get_splits_of_their_own_stage_count(deepseek, name, stages):
    """61 layers take no even split of DualPipe's PP stages or DualPipeV's 2*PP: the split axis generates layouts of
    the schedule's stage count (and, for DualPipe, Megatron's uneven first / last stages), every candidate legal."""
    from primus_ext.model.stages import layout_problems, parse_layout

    space = build_space(deepseek.model, deepseek.execution, deepseek.system, {PP: (8,), TP: (1,), CP: (1,)},
                        schedules=(name,))
    partial = {TP: 1, ETP: 1, PP: 8, VPP: 1, SCHEDULE: name}
    splits = space.domain(SPLIT, partial)
    assert splits[0] == "default"
    for split in splits:
        e = space.to_execution({**partial, SPLIT: split, CP: 1, EP: 8, MBS: 1, RECOMPUTE: "none",
                                SHARDING: "distopt", PRECISION: "bf16", TP_OVERLAP: False,
                                EP_OVERLAP: False, DP_OVERLAP: "grad+param"})
        assert e.pipeline_schedule == name and not layout_problems(deepseek.model, e), split
        if e.pipeline_model_parallel_layout:
            assert len(parse_layout(e.pipeline_model_parallel_layout)) == stages


def test_a_refusal_names_the_rules_that_excluded_the_candidates(deepseek):
    from primus_ext.errors import Problem
    from primus_ext.tune.legality import rule_of

    assert rule_of([Problem(path="num_layers", message="61 layers not divisible by PP*VPP=16*1")]) == \
        rule_of([Problem(path="num_layers", message="61 layers not divisible by PP*VPP=8*2")]) == \
        "num_layers: N layers not divisible by PP*VPP=N*N"
    space = build_space(deepseek.model, deepseek.execution, deepseek.system, {SCHEDULE: ("dualpipe",), TP: (1,)},
                        schedules=("dualpipe",))
    ctx = SearchContext(space=space, oracle=projection_oracle(deepseek.model, deepseek.system, None),
                        prefilter=MemoryFilter(deepseek.model, deepseek.system), budget=10**9, detail=False)
    tune(ctx, "exhaustive", baseline=deepseek.execution, regret=False)
    stats = ctx.stats
    assert sum(stats.excluded.values()) == stats.illegal + stats.pruned_illegal > 0
    assert any("dualpipe needs at least N*PP" in rule for rule in stats.excluded)
