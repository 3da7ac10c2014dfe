"""The step tail follows what megatron-core shards: Megatron-FSDP's strategy decides, not use_distributed_optimizer
(``DistributedOptimizer.__init__`` returns early under Megatron-FSDP; ``no_shard`` keeps the optimizer whole)."""

from __future__ import annotations

from dataclasses import replace

from projection_specs import BASE

from primus_ext.hardware import load_system
from primus_ext.model.placement import group_placements
from primus_ext.projection.comm import dp_times, optimizer_seconds

SYSTEM = load_system("h100", 8)


def test_megatron_fsdp_no_shard_all_reduces_and_steps_the_whole_optimizer():
    distopt = replace(BASE, pipeline_model_parallel_size=1, expert_model_parallel_size=1, data_parallel_size=32)
    no_shard = replace(distopt, fsdp="megatron_fsdp", data_parallel_sharding_strategy="no_shard")
    optim = replace(no_shard, data_parallel_sharding_strategy="optim")
    pl = group_placements(distopt, SYSTEM)
    dense = 10**9
    assert dp_times(dense, 0, no_shard, pl, SYSTEM)[1] == 0.0  # all-reduce: no parameter all-gather
    assert dp_times(dense, 0, optim, pl, SYSTEM) == dp_times(dense, 0, distopt, pl, SYSTEM)
    assert optimizer_seconds(dense, 0, no_shard, pl, SYSTEM) == 32 * optimizer_seconds(dense, 0, optim, pl, SYSTEM)


def test_one_rank_sequence_parallel_measurement_is_scaled_against_the_unsplit_formula():
    """A TP=2 + SP layer measured in a one-rank world ran its norms on the whole sequence (``;sp-unsplit``)."""
    from projection_specs import MOE

    from primus_ext.model.costs import SP_UNSPLIT_TAG, CostOrigin, LayerCost
    from primus_ext.model.memory import estimate_memory
    from primus_ext.projection.project import _memory

    class Fake:
        def __init__(self, source: str) -> None:
            self.source = source

        def cost(self, shape):
            return LayerCost(fwd_ms=1.0, bwd_ms=2.0, saved_bytes=10**8, origin=CostOrigin.parse(self.source))

    ex, system = BASE, load_system("h100", 4)
    split, _ = _memory(MOE, ex, system, (Fake("measured:cpu"),))
    unsplit, _ = _memory(MOE, ex, system, (Fake("measured:cpu" + SP_UNSPLIT_TAG),))
    measured = {k: 10**8 for k in ("dense", "moe", "embedding", "output", "mtp")}
    direct = estimate_memory(MOE, ex, system, activation_bytes=measured, measured_impl="local",
                             measured_sequence_split=False)
    assert unsplit.stages[0].activations_bytes < split.stages[0].activations_bytes
    assert unsplit.stages[0].activations_bytes == direct.stages[0].activations_bytes
