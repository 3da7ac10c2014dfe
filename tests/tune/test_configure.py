"""Configuration <-> execution: derived fields, round trips, recompute and sharding, generated layouts."""

from __future__ import annotations

import dataclasses

import pytest

from primus_ext.model.stages import layout_problems, parse_layout, pipeline_plan
from primus_ext.recipe.checks import check
from primus_ext.tune.axes import ETP, PP, PRECISION, RECOMPUTE, SCHEDULE, SHARDING, TP, VPP
from primus_ext.tune.configure import config_of, recompute_layers, to_execution
from primus_ext.tune.space import build_space, parse_pins
from primus_ext.tune.splits import balanced_layout


def test_to_execution_derives_dp_sp_schedule(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    config = {**space.config_of(mixtral.execution), TP: 2, ETP: 1, PP: 2, VPP: 1, SCHEDULE: "1f1b"}
    assert space.to_execution({**config, SCHEDULE: "interleaved"}).pipeline_schedule == "1f1b"  # as it runs
    e = space.to_execution(config)
    assert e.data_parallel_size == 32 // (2 * 2 * 1)          # world 4 nodes x 8
    assert e.sequence_parallel and e.pipeline_schedule == "1f1b"
    assert e.virtual_pipeline_model_parallel_size is None and e.pipeline_model_parallel_layout is None
    assert e.global_batch_size == mixtral.execution.global_batch_size  # fixed
    assert space.config_of(e) == config                      # round trip


def test_bf16_candidates_drop_fp8_parameters(mixtral):
    """megatron-core refuses fp8_param without fp8: a bf16 candidate of an fp8 recipe must not keep it."""
    base = dataclasses.replace(mixtral.execution, precision="fp8", fp8_param_gather=True)
    space = build_space(mixtral.model, base, mixtral.system, parse_pins(["precision=bf16,fp8"]))
    config = space.config_of(base)
    assert space.to_execution(config).fp8_param_gather
    bf16 = space.to_execution({**config, PRECISION: "bf16"})
    assert not bf16.fp8_param_gather and check(mixtral.model, bf16, mixtral.system) == []


def test_fsdp_candidates_shard_even_when_the_recipe_runs_no_shard(mixtral):
    base = dataclasses.replace(mixtral.execution, fsdp="megatron_fsdp", data_parallel_sharding_strategy="no_shard",
                               use_distributed_optimizer=True)
    space = build_space(mixtral.model, base, mixtral.system)
    assert space.to_execution({**space.config_of(base), SHARDING: "fsdp"}).data_parallel_sharding_strategy == \
        "optim_grads_params"


@pytest.mark.parametrize(("pp", "vpp"), [(8, 4), (16, 1), (4, 3), (2, 8)])
def test_balanced_layout_is_legal_for_deepseek(deepseek, pp, vpp):
    model = deepseek.model
    layout = balanced_layout(model, pp, vpp)
    stages = parse_layout(layout)
    assert len(stages) == pp * vpp
    sizes = [s.count("decoder") + (s.count("loss") + 2 * s.count("mtp")) for s in stages]
    assert max(sizes) - min(sizes) <= 1                       # balanced in layer-equivalents
    space = build_space(model, deepseek.execution, deepseek.system)
    e = space.to_execution({**space.config_of(deepseek.execution), PP: pp, VPP: vpp})
    assert layout_problems(model, e) == []
    assert sum(len(s.layers) for s in pipeline_plan(model, e)) == model.num_layers


@pytest.mark.parametrize(("choice", "chunk", "layers"), [("block50", 8, 4), ("block25", 8, 2), ("block75", 4, 3),
                                                          ("block25", 2, None), ("block75", 1, None)])
def test_block_recompute_counts_layers_per_chunk(choice, chunk, layers):
    """A share that rounds to no layer or to the whole chunk is not a block choice (it is none / full)."""
    assert recompute_layers(choice, chunk) == layers


def test_block_recompute_round_trips_and_the_space_memo_changes_nothing(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    config = {**space.config_of(mixtral.execution), PP: 1, VPP: 1, SCHEDULE: "1f1b", RECOMPUTE: "block50"}
    e = to_execution(mixtral.model, mixtral.execution, mixtral.system.world_size, config)
    chunk = mixtral.model.num_layers
    assert (e.recompute_granularity, e.recompute_method, e.recompute_num_layers) == ("full", "block", chunk // 2)
    assert config_of(mixtral.model, e) == config
    assert space.to_execution(config) == e                    # memoised split == computed split


def test_primus_recompute_layer_ids_are_kept_at_their_choice_and_dropped_elsewhere(tmp_path):
    """A recipe with Primus's recompute_layer_ids: its own choice keeps the ids (legal, priced as listed), every
    other recompute choice drops them (Primus refuses ids beside a recompute_method)."""
    import yaml

    from primus_ext.cli import main
    from primus_ext.recipe import load_recipe

    flat = {"num_layers": 16, "hidden_size": 1024, "ffn_hidden_size": 4096, "num_attention_heads": 16,
            "seq_length": 4096, "micro_batch_size": 1, "global_batch_size": 64, "bf16": True, "swiglu": True,
            "normalization": "RMSNorm", "position_embedding_type": "rope", "vocab_size": 32000,
            "pipeline_model_parallel_size": 2, "recompute_granularity": "full", "recompute_layer_ids": [0, 1, 8, 9],
            "use_distributed_optimizer": True}
    path = tmp_path / "ids.yaml"
    path.write_text(yaml.safe_dump(flat))
    recipe = load_recipe(path, cluster="h100", nodes=1)
    space = build_space(recipe.model, recipe.execution, recipe.system)
    own = config_of(recipe.model, recipe.execution)
    assert own[RECOMPUTE] == "block25"  # 2 of the 8 layers of a stage
    kept = space.to_execution(own)
    assert kept.recompute_layer_ids == (0, 1, 8, 9) and kept.recompute_method is None
    assert check(recipe.model, kept, space.system) == []
    for choice in ("none", "selective", "block50", "full"):
        moved = space.to_execution({**own, RECOMPUTE: choice})
        assert moved.recompute_layer_ids == () and check(recipe.model, moved, space.system) == [], choice
    out = tmp_path / "tuned.yaml"
    assert main(["tune", str(path), "--cluster", "h100", "--nodes", "1", "--strategy", "exhaustive",
                 "--pin", "pp=2", "--pin", "tp=1", "--no-regret", "--analytic", "--out", str(out)]) == 0
    tuned = load_recipe(out, cluster="h100", nodes=1)  # whatever was chosen, Primus's rules hold
    assert not (tuned.execution.recompute_layer_ids and tuned.execution.recompute_method)
