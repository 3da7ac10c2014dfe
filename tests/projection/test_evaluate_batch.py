"""The batch path (``evaluate_many``) gives ``evaluate``'s numbers for every configuration: over a real
tuner space, with MTP, the zero-bubble schedule, and configurations that cannot be projected."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import numpy as np
import pytest
from projection_specs import BASE, MOE

from primus_ext.errors import InfeasibleConfig, PrimusExtError
from primus_ext.hardware import load_system
from primus_ext.model.costs import CostOrigin, LayerCost
from primus_ext.projection import evaluate
from primus_ext.projection.comm import hide, overlapped_exposed
from primus_ext.projection.evaluate import clear_cost_cache, forget_projections
from primus_ext.projection.evaluate_batch import PARTS, evaluate_many
from primus_ext.recipe import load_recipe
from primus_ext.recipe.checks import check
from primus_ext.tune.oracle import batch_scores, projection_oracle, score_of
from primus_ext.tune.prefilter import MemoryFilter
from primus_ext.tune.space import build_space


@pytest.fixture(scope="module")
def mixtral():
    return load_recipe("recipes/mixtral_8x22B-pretrain.yaml", cluster="mi355x", nodes=4, validate=False)


def _expected(p) -> dict[str, float]:
    b = p.breakdown
    out = dict.fromkeys(PARTS, 0.0)
    out.update(compute_s=b.compute_s, bubble_s=b.bubble_s, optimizer_s=b.optimizer_s, recompute_s=b.recompute_s,
               overhead_s=b.overhead_s, step=p.step_time_s, tok=p.tokens_per_s_per_gpu,
               tflops=p.model_tflops_per_gpu, mfu=p.mfu)
    for c in b.comms:
        out[f"exposed_{c.kind}_s"], out[f"total_{c.kind}_s"] = c.exposed_s, c.total_s
    return out


def _assert_same(model, executions, system, costs=None) -> int:
    """Every configuration: the same numbers as ``evaluate`` (or the same kind of error) and the same
    breakdown keys as the tuner's ``score_of``; the count projected."""
    batch = evaluate_many(model, executions, system, costs)
    scores = batch_scores(batch)
    projected = 0
    for i, ex in enumerate(executions):
        try:
            want = evaluate(model, ex, system, costs)
        except PrimusExtError as err:
            assert type(batch.problems[i]) is type(err), (i, err)
            assert math.isnan(batch.step_time_s[i])
            continue
        assert batch.problems[i] is None, batch.problems[i]
        got = dict(batch.breakdown(i), step=batch.step_time_s[i], tok=batch.tokens_per_s_per_gpu[i],
                   tflops=batch.model_tflops_per_gpu[i], mfu=batch.mfu[i])
        for key, value in _expected(want).items():
            assert got.get(key, 0.0) == pytest.approx(value, rel=1e-9, abs=1e-12 + 1e-9 * want.step_time_s), (i, key)
        assert batch.sources[i] == want.sources
        assert scores[i].breakdown.keys() == score_of(want).breakdown.keys(), i
        projected += 1
    return projected


def test_equals_evaluate_over_a_tuner_space(mixtral):
    space = build_space(mixtral.model, mixtral.execution, mixtral.system)
    fits = MemoryFilter(mixtral.model, mixtral.system).fits
    configs = [ex for ex in map(space.to_execution, space.iter_configs())
               if not check(mixtral.model, ex, mixtral.system) and fits(ex)]
    sample = random.Random(3).sample(configs, min(600, len(configs)))
    assert _assert_same(mixtral.model, sample, mixtral.system) == len(sample)


def test_equals_evaluate_with_mtp_zero_bubble_and_refusals():
    system = load_system("h100", 8)
    executions = []
    for pp, vpp, flags in itertools.product((1, 2, 4), (None, 3), range(8)):
        if pp == 1 and vpp:
            continue
        executions.append(replace(
            BASE, pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp,
            data_parallel_size=32 // pp, global_batch_size=64 * 32 // pp, overlap_grad_reduce=bool(flags & 1),
            overlap_param_gather=bool(flags & 2), tp_comm_overlap=bool(flags & 4),
            overlap_moe_expert_parallel_comm=bool(flags & 4) and (vpp is not None or pp == 1),
            use_distributed_optimizer=flags != 1, grad_reduce_in_bf16=flags == 5,
            recompute_granularity="full" if flags == 3 else None,
            recompute_method="block" if flags == 3 else None, recompute_num_layers=1 if flags == 3 else None))
    executions.append(replace(BASE, pipeline_schedule="zb-h1", data_parallel_size=8))  # one by one
    executions.append(replace(BASE, global_batch_size=100))  # not a multiple of MBS*DP
    executions.append(replace(BASE, virtual_pipeline_model_parallel_size=3, global_batch_size=8 * 6))  # 6 % 4
    assert _assert_same(MOE, executions, system) == len(executions) - 2
    batch = evaluate_many(MOE, executions, system)
    assert all(isinstance(p, InfeasibleConfig) for p in batch.problems[-2:])
    assert batch.projection(0).step_time_s == pytest.approx(batch.step_time_s[0], rel=1e-9)


def test_same_numbers_after_forgetting_projections(mixtral):
    ex = mixtral.execution
    first = evaluate_many(mixtral.model, [ex], mixtral.system)
    forget_projections()
    again = evaluate_many(mixtral.model, [ex], mixtral.system)
    assert again.step_time_s[0] == first.step_time_s[0]
    assert again.breakdown(0) == first.breakdown(0)


def test_oracle_many_gives_the_oracle_scores(mixtral):
    oracle = projection_oracle(mixtral.model, mixtral.system, None)
    executions = [mixtral.execution, replace(mixtral.execution, global_batch_size=7)]
    scores = oracle.many(executions)
    want = oracle(executions[0])
    assert want == score_of(evaluate(mixtral.model, executions[0], mixtral.system))
    for got in (scores[0], batch_scores(evaluate_many(mixtral.model, executions, mixtral.system))[0]):
        assert (got.tokens_per_s_per_gpu, got.step_time_s, got.mfu) == pytest.approx(
            (want.tokens_per_s_per_gpu, want.step_time_s, want.mfu), rel=1e-12)
        assert got.breakdown.keys() == want.breakdown.keys()  # the same kinds, overhead not listed
        for key, value in want.breakdown.items():
            assert got.breakdown[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
        assert got.sources == want.sources
    assert isinstance(scores[1], InfeasibleConfig)


def test_overlap_is_hide_past_the_first_or_last_bucket():
    rng = np.random.default_rng(0)
    total, window, share = rng.uniform(0, 2, 50), rng.uniform(0, 2, 50), rng.uniform(0, 1, 50)
    got = overlapped_exposed(total, window, share, 0.8)
    for k in range(50):
        bucket = total[k] * share[k]
        assert got[k] == pytest.approx(bucket + hide(total[k] - bucket, window[k], 0.8), rel=1e-12)
    assert overlapped_exposed(np.array([1.0]), np.array([5.0]), np.array([0.0]), 1.0)[0] == 0.0


class _HalfStore:
    """A provider that prices dense layers only (the rest falls through to the roofline), like a timing
    store with some shapes measured."""

    def cost(self, shape):
        if shape.kind != "dense":
            return None
        return LayerCost(fwd_ms=1.0 + shape.tp, bwd_ms=2.0 + shape.tp, wgrad_ms=0.5,
                         origin=CostOrigin(producer="store", device="h100"))


def _grid():
    sharding = (("none", "no_shard", False), ("none", "no_shard", True), ("megatron_fsdp", "optim_grads_params", True),
                ("megatron_fsdp", "optim_grads", True), ("torch_fsdp2", "optim_grads_params", False),
                ("none", "optim_grads_params", False))  # the strategy without FSDP: only ``fsdp`` tells them apart
    for dp in (1, 2, 4, 8):  # one rank layout on 8 to 64 of the cluster's GPUs: other PP boundaries cross domains
        yield replace(BASE, tensor_model_parallel_size=1, sequence_parallel=False, expert_model_parallel_size=1,
                      data_parallel_size=dp, global_batch_size=8 * dp, virtual_pipeline_model_parallel_size=3)
    for tp, etp, (fsdp, strategy, distopt), (pp, vpp), bf16 in itertools.product(
            (1, 2), (None, 1, 4), sharding, ((1, None), (1, 2), (2, None), (4, 3)), (False, True)):
        yield replace(BASE, tensor_model_parallel_size=tp, expert_tensor_parallel_size=etp, fsdp=fsdp,
                      data_parallel_sharding_strategy=strategy, use_distributed_optimizer=distopt,
                      sequence_parallel=tp > 1, pipeline_model_parallel_size=pp,
                      virtual_pipeline_model_parallel_size=vpp, data_parallel_size=64 // (tp * pp),
                      global_batch_size=4 * 64 // (tp * pp) * 8, grad_reduce_in_bf16=bf16,
                      overlap_grad_reduce=bf16, overlap_param_gather=bf16 and distopt)


@pytest.mark.parametrize("costs", [None, _HalfStore(), [_HalfStore()]], ids=("analytic", "store", "chain"))
def test_equals_evaluate_over_layouts_sharding_and_providers(costs):
    """TP / ETP, every sharding kind, PP=1 with VPP (megatron refuses it; both paths project it), bf16
    gradient reduction, a timing-store-like provider alone and in a chain."""
    executions = list(_grid())
    assert _assert_same(MOE, executions, load_system("h100", 8), costs) > len(executions) // 2


def test_equals_evaluate_across_memo_resets(monkeypatch):
    """The layer memo starts over every few layer sets (its ids restart): the batch's arrays keyed by
    layer id must start over with it."""
    from primus_ext.projection import engine, table, tail

    monkeypatch.setattr(table, "STAGES_LIMIT", 3)
    monkeypatch.setattr(tail, "TAIL_LIMIT", 2)
    monkeypatch.setattr(engine, "TAIL_LIMIT", 2)
    clear_cost_cache()
    executions = [ex for k, ex in enumerate(_grid()) if k % 7 == 0]
    system = load_system("h100", 8)
    for start in range(0, len(executions), 9):  # batches and one-by-one calls interleaved
        assert _assert_same(MOE, executions[start:start + 9], system) >= 0
    clear_cost_cache()


def test_equals_evaluate_with_mixed_cuda_graph_modes_in_one_batch():
    """Graph modes change the fixed per-layer costs and the reported launch overhead, configuration by
    configuration, inside one schedule group."""
    system = load_system("h100", 8)
    executions = [replace(BASE, cuda_graph=mode, micro_batch_size=mbs)
                  for mode in ("none", "layers", "full_iteration") for mbs in (1, 2)]
    assert _assert_same(MOE, executions, system) == len(executions)
    steps = {ex.cuda_graph: evaluate(MOE, ex, system).step_time_s for ex in executions if ex.micro_batch_size == 1}
    assert steps["full_iteration"] < steps["layers"] < steps["none"]
    overhead = {ex.cuda_graph: evaluate(MOE, ex, system).breakdown.overhead_s for ex in executions
                if ex.micro_batch_size == 1}
    assert overhead["none"] > overhead["layers"] > overhead["full_iteration"] == 0.0  # layers: edges still launch
