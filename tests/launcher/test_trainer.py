"""The built-in trainer on CPU: 2 gloo ranks for DP=2, TP=2 and PP=2 (real megatron-core schedules).

Independent checks: per-rank parameter counts against the hand-derived GPT count, and megatron's
own invariance - DP=2 and TP=2 over the same global batch give the same loss, step after step.
"""

from __future__ import annotations

import math

import pytest

from primus_ext.errors import RecipeError
from primus_ext.launcher.trainer import plan_run, run_training, tiny_model
from primus_ext.specs import ExecutionSpec

H, FFN, HEADS, GROUPS, KV, VOCAB, LAYERS = 128, 256, 4, 2, 32, 512, 2


def _params(tp: int) -> int:
    """Hand count for the local spec: per layer two RMSNorms + QKV + proj + gated fc1 + fc2 (TP-split),
    untied embedding and output (vocab-split), one final norm."""
    split = (H * (HEADS + 2 * GROUPS) * KV + HEADS * KV * H + H * 2 * FFN + FFN * H) // tp
    return LAYERS * (split + 2 * H) + 2 * VOCAB * H // tp + H


def _exe(**kw) -> ExecutionSpec:
    fields = dict(seq_length=32, micro_batch_size=1, global_batch_size=2, precision="fp32")
    return ExecutionSpec(**(fields | kw))


STEPS: list[tuple[int, int, float]] = []
"""The dp2 run's progress calls (done, iters, step seconds)."""


@pytest.fixture(scope="module")
def dp2():
    return run_training(tiny_model(), _exe(), world_size=2, iters=3, device="cpu", timeout_s=120,
                        progress=lambda *call: STEPS.append(call))


@pytest.fixture(scope="module")
def tp2():
    # with sequence parallelism: the final norm and layer norms run on sequence shards (CPU shim 4)
    return run_training(tiny_model(), _exe(tensor_model_parallel_size=2, sequence_parallel=True), world_size=2,
                        iters=3, device="cpu", timeout_s=120, time_collectives=True)


@pytest.mark.slow
def test_dp2_runs_and_counts_params(dp2):
    assert dp2.dp == 2 and dp2.tp == 1 and dp2.backend == "gloo"
    assert dp2.schedule == "forward_backward_no_pipelining"
    assert dp2.params_per_rank == (_params(1), _params(1))
    assert len(dp2.step_times_s) == 3 and all(t > 0 for t in dp2.step_times_s)
    assert dp2.median_step_time_s > 0 and dp2.spread >= 0
    # untrained model on uniform random tokens: cross entropy ~ ln(vocab)
    assert abs(dp2.losses[0] - math.log(VOCAB)) < 0.2


@pytest.mark.slow
def test_progress_is_called_once_per_iteration(dp2):
    # rank 0 reports each step to the parent as it ends: 3 calls, counting up, with that step's wall time
    assert [(done, iters) for done, iters, _ in STEPS] == [(1, 3), (2, 3), (3, 3)]
    assert all(0 < s <= t for (_, _, s), t in zip(STEPS, dp2.step_times_s, strict=True))  # max over ranks >= rank 0


@pytest.mark.slow
def test_tp2_halves_split_weights_and_matches_dp2_losses(dp2, tp2):
    assert tp2.tp == 2 and tp2.dp == 1 and tp2.num_microbatches == 2
    assert tp2.params_per_rank == (_params(2), _params(2))
    # same initial weights, same global batch: megatron's TP(+SP) and DP are exact re-partitionings
    for a, b in zip(dp2.losses, tp2.losses, strict=True):
        assert a == pytest.approx(b, rel=1e-5)


@pytest.mark.slow
def test_tp2_times_its_collectives_within_each_step(dp2, tp2):
    assert dp2.collective_s_by_rank == ()  # not asked for
    assert len(tp2.collective_s_by_rank) == 2 and all(len(r) == 3 for r in tp2.collective_s_by_rank)
    # every TP=2 step all-gathers / reduce-scatters activations: time inside them, less than the step
    for rank in tp2.collective_s_by_rank:
        assert all(0 < c < t for c, t in zip(rank, tp2.step_times_s, strict=True))
    assert len(tp2.median_collective_s) == 2 and tp2.as_dict()["collective_s_by_rank"]
    # waiting for the peer is part of the time inside collectives, per rank and step
    assert len(tp2.skew_s_by_rank) == 2 and len(tp2.median_skew_s) == 2
    for skew, inside in zip(tp2.skew_s_by_rank, tp2.collective_s_by_rank, strict=True):
        assert all(0 <= s <= c for s, c in zip(skew, inside, strict=True))
    assert any(s > 0 for rank in tp2.skew_s_by_rank for s in rank)


@pytest.mark.slow
def test_pp2_runs_megatron_1f1b_on_gloo():
    result = run_training(tiny_model(), _exe(pipeline_model_parallel_size=2, global_batch_size=4),
                          world_size=2, iters=3, device="cpu", timeout_s=120)
    assert result.pp == 2 and result.num_microbatches == 4
    assert result.schedule == "forward_backward_pipelining_without_interleaving"
    # stage 0: embedding + layer 0; stage 1: layer 1 + final norm + output layer
    layer = (H * (HEADS + 2 * GROUPS) * KV + HEADS * KV * H + H * 2 * FFN + FFN * H) + 2 * H
    assert result.params_per_rank == (VOCAB * H + layer, layer + H + VOCAB * H)
    assert all(math.isfinite(x) for x in result.losses)
    assert abs(result.losses[0] - math.log(VOCAB)) < 0.2


def test_plan_refuses_what_the_trainer_cannot_run():
    with pytest.raises(RecipeError) as err:
        plan_run(tiny_model(), _exe(tensor_model_parallel_size=4, global_batch_size=3), world_size=6, iters=2)
    paths = {p.path for p in err.value.problems}
    assert "world_size" in paths
    with pytest.raises(RecipeError) as err:
        plan_run(tiny_model(num_query_groups=1), _exe(tensor_model_parallel_size=2, global_batch_size=3),
                 world_size=4, iters=2)
    paths = {p.path for p in err.value.problems}
    assert {"num_query_groups", "global_batch_size"} <= paths
    with pytest.raises(RecipeError) as err:  # megatron-core 0.16 syncs tied PP embeddings with .cuda()
        plan_run(tiny_model(untie_embeddings_and_output_weights=False), _exe(pipeline_model_parallel_size=2),
                 world_size=2, iters=2, device="cpu")
    assert [p.path for p in err.value.problems] == ["untie_embeddings_and_output_weights"]


def test_plan_derives_dp_and_microbatches():
    plan = plan_run(tiny_model(), _exe(global_batch_size=8), world_size=2, iters=2, cores=2)
    assert plan.execution.dp == 2 and plan.num_microbatches == 4 and plan.threads_per_rank == 1
    # collectives are timed on host clocks: gloo only (an NCCL call returns once enqueued)
    assert plan_run(tiny_model(), _exe(), world_size=2, iters=2, time_collectives=True).time_collectives
    on_gpu = plan_run(tiny_model(), _exe(), world_size=2, iters=2, device="cuda", time_collectives=True)
    assert not on_gpu.time_collectives


def test_megatron_format_lines_parse_back_with_read_log():
    from datetime import datetime

    from primus_ext.launcher.trainer.megatron_log import iteration_line, training_log_lines
    from primus_ext.logs import read_log

    line = iteration_line(iteration=3, train_iters=10, consumed_samples=96, step_time_s=0.5071,
                          learning_rate=1e-4, global_batch_size=32, loss=10.5, when=datetime(2026, 1, 2, 3, 4, 5))
    # megatron-core 0.16.1 training_log's layout, field for field (megatron/training/training.py)
    assert line == (" [2026-01-02 03:04:05.000000] iteration        3/      10 | consumed samples:           96 |"
                    " elapsed time per iteration (ms): 507.1 | learning rate: 1.000000E-04 |"
                    " global batch size:    32 | lm loss: 1.050000E+01 | loss scale: 1.0 |"
                    " number of skipped iterations:   0 | number of nan iterations:   0 |")
    times = [2.0, 0.9, 0.50, 0.52, 0.48, 0.51]
    lines = training_log_lines(step_times_s=times, losses=[10.0] * 6, global_batch_size=8, learning_rate=1e-4,
                               memory_mb=(10.0, 20.0, 30.0, 1234.5))
    assert lines[2].startswith("[Rank 0] (after 2 iterations) memory (MB) | allocated: 10.00")
    log = read_log(lines)
    assert [it.index for it in log.iterations] == [1, 2, 3, 4, 5, 6]
    assert log.stats.median_s == pytest.approx(0.505) and log.stats.first == 3
    assert log.peak_reserved_bytes == round(1234.5 * 2**20) and log.global_batch_size == 8


def test_cpu_memory_line_carries_the_peak_rss():
    import resource

    from primus_ext.launcher.trainer.megatron_log import cpu_memory_mb

    mb = cpu_memory_mb()
    assert len(set(mb)) == 1
    assert mb[0] == pytest.approx(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, rel=0.05)


@pytest.mark.slow
def test_a_real_run_prints_lines_read_log_reads(dp2):
    from primus_ext.logs import read_log

    lines = dp2.log_lines()
    log = read_log(lines)
    assert [it.step_time_s for it in log.iterations] == pytest.approx(dp2.step_times_s, abs=1e-4)
    assert log.peak_reserved_bytes and log.peak_reserved_bytes > 50 * 2**20  # a torch process's RSS
    assert log.global_batch_size == 2
