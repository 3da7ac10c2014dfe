"""The schedule seen by both projection paths: a layout's VPP when VPP is unset (megatron-core takes it from
the layout), and ZB-H1's pipeline p2p, exposed within [0, total] with a breakdown that adds up."""

from __future__ import annotations

from dataclasses import replace

import pytest
from projection_specs import LLAMA
from projection_specs import MOE8 as MOE

from primus_ext.errors import InfeasibleConfig
from primus_ext.hardware import load_system
from primus_ext.projection import evaluate
from primus_ext.projection.evaluate_batch import evaluate_many
from primus_ext.specs import ExecutionSpec


def test_layout_with_two_stages_per_rank_and_vpp_unset_runs_interleaved():
    system = load_system("h100", 2)
    ex = ExecutionSpec(pipeline_model_parallel_size=2, data_parallel_size=8, global_batch_size=64, seq_length=4096,
                       pipeline_model_parallel_layout="Et*4|t*4|t*4|t*4L")
    explicit = evaluate(LLAMA, replace(ex, virtual_pipeline_model_parallel_size=2), system)
    unset = evaluate(LLAMA, ex, system)
    assert unset.step_time_s == pytest.approx(explicit.step_time_s, rel=1e-12)
    assert unset.breakdown.bubble_s == pytest.approx(explicit.breakdown.bubble_s, rel=1e-12)
    batch = evaluate_many(LLAMA, [ex], system)
    assert batch.problems[0] is None
    assert batch.step_time_s[0] == pytest.approx(unset.step_time_s, rel=1e-12)
    # 3 micro-batches over PP=2: megatron refuses the interleaved schedule (last group shorter than PP)
    odd = replace(ex, global_batch_size=24)
    with pytest.raises(InfeasibleConfig):
        evaluate(LLAMA, odd, system)
    batch = evaluate_many(LLAMA, [odd, ex], system)
    assert isinstance(batch.problems[0], InfeasibleConfig) and batch.problems[1] is None


def test_pipeline_on_one_node_of_a_profile_without_nic():
    """The cpu profile has no scale-out link: PP within its one node prices its p2p on the scale-up link only
    (it raised 'no scale-out (NIC) bandwidth' when the across-node time was priced unconditionally)."""
    system = load_system("cpu", 1)
    small = replace(LLAMA, num_layers=4)
    ex = ExecutionSpec(pipeline_model_parallel_size=2, data_parallel_size=1, global_batch_size=4, seq_length=128)
    one = evaluate(small, ex, system)
    batch = evaluate_many(small, [ex], system)
    assert one.breakdown.bubble_s > 0 and batch.problems[0] is None
    assert batch.step_time_s[0] == pytest.approx(one.step_time_s, rel=1e-9)


@pytest.mark.parametrize("tp,pp,m", [(2, 4, 6), (2, 4, 8), (1, 8, 6), (4, 2, 4)])
def test_zero_bubble_pp_exposed_within_total_and_breakdown_adds_up(tp, pp, m):
    system = load_system("h100", 1)
    dp = 8 // (tp * pp)
    ex = ExecutionSpec(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, data_parallel_size=dp,
                       global_batch_size=m * dp, seq_length=4096, sequence_parallel=tp > 1, pipeline_schedule="zb-h1")
    p = evaluate(MOE, ex, system)
    c = p.breakdown.comm("pp")
    assert 0.0 <= c.exposed_s <= c.total_s
    assert p.breakdown.bubble_s >= 0.0
    assert p.breakdown.total_s == pytest.approx(p.step_time_s, rel=1e-9)
    one = evaluate(MOE, replace(ex, pipeline_schedule="1f1b"), system)
    assert p.step_time_s <= one.step_time_s
    batch = evaluate_many(MOE, [ex], system)
    assert batch.parts["exposed_pp_s"][0] == c.exposed_s and batch.step_time_s[0] == p.step_time_s
