"""Per-stage idle time and the imbalance flag: the 70B-like case of issue 35 (the last stage also runs a
128k-vocabulary output layer) is flagged with the uneven-split fix; equal stages are not."""

from __future__ import annotations

import dataclasses

import pytest

from primus_ext.hardware import load_system
from primus_ext.projection import project
from primus_ext.projection.result import IMBALANCE_THRESHOLD, imbalance, stage_idle
from primus_ext.specs import ExecutionSpec, ModelSpec

MODEL = ModelSpec(name="dense", num_layers=16, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                  num_query_groups=8, kv_channels=128, vocab_size=128256)
EXECUTION = ExecutionSpec(tensor_model_parallel_size=1, pipeline_model_parallel_size=4, data_parallel_size=2,
                          micro_batch_size=1, global_batch_size=64, seq_length=4096, precision="bf16")


@pytest.fixture(scope="module")
def system():
    return load_system("h100", 1)


@pytest.fixture(scope="module")
def heavy_head(system):
    """4 layers a stage, and a 128k x 4k output layer (~2 layers' worth) on the last one."""
    return project(MODEL, EXECUTION, system, None)


@pytest.fixture(scope="module")
def light_head(system):
    """The same stages with a 1k vocabulary: the output layer is ~1 % of a layer."""
    return project(dataclasses.replace(MODEL, vocab_size=1024), EXECUTION, system, None)


def test_an_output_heavy_last_stage_is_flagged_with_the_uneven_split_fix(heavy_head):
    found = imbalance(heavy_head)
    assert found is not None and found.flagged and found.spread > IMBALANCE_THRESHOLD
    assert found.busiest_rank == 3                                   # the stage with the output layer
    assert "decoder_last_pipeline_num_layers" in found.fix and "split" in found.fix
    assert found.message.startswith("pipeline stages imbalanced") and "try" in found.message
    idle = stage_idle(heavy_head)
    assert found.spread == pytest.approx(max(s.idle_fraction for s in idle) - min(s.idle_fraction for s in idle))


def test_equal_stages_are_not_flagged(light_head):
    found = imbalance(light_head)
    assert found is not None and not found.flagged and found.spread < IMBALANCE_THRESHOLD
    assert "try" not in found.message


def test_moving_layers_off_the_last_stage_shrinks_the_spread(heavy_head, system):
    """Megatron's uneven split: 1 layer on the last stage, 15 over the 3 others (5 each)."""
    uneven = project(MODEL, dataclasses.replace(EXECUTION, decoder_last_pipeline_num_layers=1), system, None)
    assert [s.layers for s in uneven.stages] == [5, 5, 5, 1]
    assert imbalance(uneven).spread < imbalance(heavy_head).spread
    assert uneven.step_time_s < heavy_head.step_time_s
    found = imbalance(uneven)  # now the last stage waits for the others: the fix moves a layer back to it
    assert found.idlest_rank == 3
    assert found.flagged and found.fix.startswith("more layers on the last stage")


def test_one_stage_has_no_imbalance(system):
    single = project(MODEL, dataclasses.replace(EXECUTION, pipeline_model_parallel_size=1, data_parallel_size=8),
                     system, None)
    assert imbalance(single) is None and len(stage_idle(single)) == 1
