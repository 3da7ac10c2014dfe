"""The ``split`` axis: legal uneven first/last stages, account_for flags and weighted layouts, picked by the
tuner when the projection says they are faster."""

from __future__ import annotations

import pytest

from primus_ext.model.stages import LAYOUT_FIELDS, layout_problems
from primus_ext.recipe import load_recipe
from primus_ext.specs import ExecutionSpec
from primus_ext.tune.agent import SearchContext
from primus_ext.tune.axes import CP, DP_OVERLAP, MBS, PP, PRECISION, RECOMPUTE, SHARDING, SPLIT, TP, TP_OVERLAP, VPP
from primus_ext.tune.oracle import projection_oracle
from primus_ext.tune.prefilter import MemoryFilter
from primus_ext.tune.run import tune
from primus_ext.tune.space import build_space
from primus_ext.tune.splits import DEFAULT, MAX_FEWER, MAX_UNEVEN, head_layers, split_fields, stage_loads

LLAMA8B = "recipes/llama3.1_8B-pretrain.yaml"
FIXED = {TP: (1,), PP: (4,), VPP: (1,), CP: (1,), MBS: (1,), RECOMPUTE: ("full",),
         SHARDING: ("distopt",), PRECISION: ("bf16",), DP_OVERLAP: ("grad+param",), TP_OVERLAP: (False,)}
"""Every axis but ``split`` pinned: a dense 8B at PP4 on one H100 node (32 layers, 8 per stage, the last
stage also runs the 128k-vocabulary output layer, ~2 layers' worth)."""


@pytest.fixture(scope="module")
def llama8b():
    return load_recipe(LLAMA8B, cluster="h100", nodes=1, validate=False)


def _search(recipe, pins):
    space = build_space(recipe.model, recipe.execution, recipe.system, pins)
    ctx = SearchContext(space=space, oracle=projection_oracle(recipe.model, recipe.system, None),
                        prefilter=MemoryFilter(recipe.model, recipe.system), budget=10**9, detail=False)
    return space, tune(ctx, "exhaustive", baseline=recipe.execution, regret=False)


@pytest.mark.parametrize("kinds", ["any", "first/last"])
def test_tuner_picks_a_legal_uneven_split_faster_than_the_even_one(llama8b, kinds):
    pins = dict(FIXED)
    if kinds == "first/last":
        space = build_space(llama8b.model, llama8b.execution, llama8b.system, FIXED)
        firsts = [s for s in space.domain(SPLIT, {PP: 4, VPP: 1}) if s.startswith(("first", "last"))]
        assert firsts, "the 8B at PP4 has legal uneven first/last candidates"
        pins[SPLIT] = (DEFAULT, *firsts)
    space, result = _search(llama8b, pins)
    best = result.best
    assert best.config[SPLIT] != DEFAULT
    assert kinds == "any" or best.config[SPLIT].startswith(("first", "last"))
    # the even split, projected here: branch and bound may skip it (its bound cannot beat the best)
    even = space.to_execution({**best.config, SPLIT: DEFAULT})
    even_score = projection_oracle(llama8b.model, llama8b.system, None)(even)
    assert best.tokens_per_s_per_gpu > even_score.tokens_per_s_per_gpu
    execution = space.to_execution(best.config)
    assert layout_problems(llama8b.model, execution) == []
    assert any(getattr(execution, f) != getattr(even, f) for f in LAYOUT_FIELDS)
    assert space.config_of(execution)[SPLIT] == best.config[SPLIT]  # round trip


@pytest.mark.parametrize("path, cluster, nodes", [
    (LLAMA8B, "h100", 2), ("recipes/llama3.1_70B-pretrain.yaml", "h100", 8),
    ("recipes/llama3.1_405B-pretrain.yaml", "h100", 16), ("recipes/mixtral_8x22B-pretrain.yaml", "mi355x", 4),
    ("recipes/deepseek_v3-pretrain.yaml", "h100", 16),
])
def test_space_holds_only_legal_uneven_candidates_that_unload_the_busiest_stage(path, cluster, nodes):
    recipe = load_recipe(path, cluster=cluster, nodes=nodes, validate=False)
    model = recipe.model
    space = build_space(model, recipe.execution, recipe.system)
    head = head_layers(model, recipe.execution.seq_length)
    seen_uneven = 0
    for structural in space.iter_configs(structural_only=True):
        pp, vpp, split = structural[PP], structural[VPP], structural[SPLIT]
        domain = space.domain(SPLIT, structural)
        assert domain[0] == DEFAULT and len(domain) <= 1 + MAX_UNEVEN and (pp > 1 or domain == (DEFAULT,))
        if split == DEFAULT:
            continue
        seen_uneven += 1
        execution = space.to_execution({**next(space.iter_configs()), **structural})
        assert layout_problems(model, execution) == []
        even = ExecutionSpec(pipeline_model_parallel_size=pp,
                             virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
                             **space.pipeline_split(pp, vpp))
        assert max(stage_loads(model, execution, head)) < max(stage_loads(model, even, head))
        for side in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"):
            n = getattr(execution, side)
            assert n is None or (n > 0 and -(-model.num_layers // pp) - n <= MAX_FEWER)
    assert seen_uneven or "deepseek" in path or "mixtral" in path


def test_split_fields_name_megatron_fields_and_refuse_unknown_names(llama8b):
    model = llama8b.model
    fields = split_fields(model, 4, 1, "first7-last7", 2.0)
    assert fields["decoder_first_pipeline_num_layers"] == 7 and fields["decoder_last_pipeline_num_layers"] == 7
    assert split_fields(model, 4, 1, "last5", 2.0)["decoder_first_pipeline_num_layers"] is None
    both = split_fields(model, 4, 1, "acc-both", 2.0)
    assert both["account_for_embedding_in_pipeline_split"] and both["account_for_loss_in_pipeline_split"]
    assert split_fields(model, 4, 1, "layout", 2.0)["pipeline_model_parallel_layout"].endswith("L")
    with pytest.raises(ValueError):
        split_fields(model, 4, 1, "middle3", 2.0)


def test_head_cost_follows_the_vocabulary(llama8b):
    """A 128k vocabulary on a 4k-hidden model costs ~2 decoder layers (the output GEMM alone is ~1.8)."""
    import dataclasses

    model = llama8b.model
    head = head_layers(model, 8192)
    assert 1.0 < head < 3.0
    assert head_layers(dataclasses.replace(model, vocab_size=model.vocab_size // 4), 8192) < head / 3
