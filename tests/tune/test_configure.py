"""Configuration <-> execution: derived fields, round trips, recompute and sharding, generated layouts."""

from __future__ import annotations

import dataclasses

import pytest

from primus_ext.model.stages import layout_problems, parse_layout, pipeline_plan
from primus_ext.recipe.validate import check
from primus_ext.tune.configure import balanced_layout, config_of, recompute_layers, to_execution
from primus_ext.tune.space import build_space, parse_pins


def test_to_execution_derives_dp_sp_schedule(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    config = {**space.config_of(mixtral.execution), "tp": 2, "etp": 1, "pp": 2, "vpp": 1}
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
    bf16 = space.to_execution({**config, "precision": "bf16"})
    assert not bf16.fp8_param_gather and check(mixtral.model, bf16, mixtral.system) == []


def test_fsdp_candidates_shard_even_when_the_recipe_runs_no_shard(mixtral):
    base = dataclasses.replace(mixtral.execution, fsdp="megatron_fsdp", data_parallel_sharding_strategy="no_shard",
                               use_distributed_optimizer=True)
    space = build_space(mixtral.model, base, mixtral.system)
    assert space.to_execution({**space.config_of(base), "sharding": "fsdp"}).data_parallel_sharding_strategy == \
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
    e = space.to_execution({**space.config_of(deepseek.execution), "pp": pp, "vpp": vpp})
    assert layout_problems(model, e) == []
    assert sum(len(s.layers) for s in pipeline_plan(model, e)) == model.num_layers


@pytest.mark.parametrize(("choice", "chunk", "layers"), [("block50", 8, 4), ("block25", 8, 2), ("block75", 4, 3),
                                                          ("block25", 2, None), ("block75", 1, None)])
def test_block_recompute_counts_layers_per_chunk(choice, chunk, layers):
    """A share that rounds to no layer or to the whole chunk is not a block choice (it is none / full)."""
    assert recompute_layers(choice, chunk) == layers


def test_block_recompute_round_trips_and_the_space_memo_changes_nothing(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    config = {**space.config_of(mixtral.execution), "pp": 1, "vpp": 1, "recompute": "block50"}
    e = to_execution(mixtral.model, mixtral.execution, mixtral.system.world_size, config)
    chunk = mixtral.model.num_layers
    assert (e.recompute_granularity, e.recompute_method, e.recompute_num_layers) == ("full", "block", chunk // 2)
    assert config_of(mixtral.model, e) == config
    assert space.to_execution(config) == e                    # memoised split == computed split
