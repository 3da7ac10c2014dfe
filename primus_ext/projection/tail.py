"""The step around the pipeline, for both projection engines: send/recv per stage boundary, each rank's step tail
(DP gradient reduction, parameter gather, optimizer) and the figures a step gives.

    p2p = boundary_p2p(nbytes, execution, system)            # seconds per virtual-stage boundary, one direction
    grad, param, share, opt = rank_tail(memo, dense, experts, execution, system)   # one rank's tail, seconds
    flops, world, peak, tokens = step_constants(memo, model, system, execution)      # tok/s, TFLOP/s, MFU inputs

``evaluate`` (one configuration) and ``evaluate_batch`` (arrays) call the same functions; how much of the tail the
pipeline's compute hides is ``projection.comm``'s ``aligned_dp_windows`` / ``overlapped_exposed`` (one formula,
with an element-wise form for arrays). The memos live in the cost table (``table.CostTable.tails``), so both
engines share them.
"""

from __future__ import annotations

from operator import attrgetter

from primus_ext.model.collectives import p2p_time
from primus_ext.model.flops import model_flops_per_step
from primus_ext.model.pipeline.registry import resolve_schedule
from primus_ext.model.placement import group_placements
from primus_ext.model.stages import virtual_stages
from primus_ext.projection.comm import bucket_fraction, dp_times, optimizer_seconds
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

DP_FIELDS = attrgetter("fsdp", "data_parallel_sharding_strategy", "grad_reduce_in_bf16", "use_distributed_optimizer",
                       "tensor_model_parallel_size", "context_parallel_size", "data_parallel_size",
                       "pipeline_model_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size",
                       "precision", "fp8_recipe", "use_precision_aware_optimizer", "main_params_dtype",
                       "exp_avg_dtype", "exp_avg_sq_dtype", "store_param_remainders")
"""What ``dp_times``, ``bucket_fraction`` and ``optimizer_seconds`` read of an execution (with the group placement
these sizes decide): the step-tail memo's key with the rank's parameters."""

TAIL_LIMIT = 1 << 16
"""Step-tail entries memoised per cost table before the memo starts over: a bound on memory (each entry is a key
of 12 small values and 4 floats, ~0.5 KB with the dict slot: ~30 MB at the limit), far above the ~3 distinct
ranks x configurations of one tuner space."""


def boundary_p2p(nbytes: float, ex: ExecutionSpec, system: SystemSpec) -> tuple[float, ...]:
    """Send/recv seconds of one micro-batch's activation over each of the schedule's p2p slots (slot ``s`` joins
    model stages ``s`` and ``s + 1``; ``Schedule.p2p_links`` says on which ranks): within a scale-up domain, or
    across when the group placement says that boundary crosses one; a hand-over on one rank costs nothing."""
    pp, vpp = ex.pp, virtual_stages(ex)
    pl = group_placements(ex, system)
    crosses = (*pl.pp_boundary_crosses, pl.pp.crosses)  # link r joins ranks r and r+1 (PP-1: back to 0)
    within = p2p_time(nbytes, False, system)  # across nodes only priced when a boundary crosses (a one-node
    across = p2p_time(nbytes, True, system) if any(crosses) else within  # profile may have no NIC: cpu)
    links = resolve_schedule(ex.pipeline_schedule, pp, ex.virtual_pipeline_model_parallel_size).p2p_links(pp, vpp)
    return tuple(0.0 if a == b else across if crosses[a if b == a + 1 else b if a == b + 1 else pp - 1] else within
                 for a, b in links)  # the forward link a -> a+1, the wrap PP-1 -> 0, a V's way back b+1 -> b


def rank_tail(memo: dict, dense: int, experts: int, ex: ExecutionSpec, system: SystemSpec) -> tuple[float, ...]:
    """(gradient reduction, parameter gather, last-bucket share, optimizer) seconds of a rank training ``dense``
    and ``experts`` parameters, memoised in ``memo`` on them and ``DP_FIELDS``."""
    key = (dense, experts, DP_FIELDS(ex))
    found = memo.get(key)
    if found is None:
        if len(memo) >= TAIL_LIMIT:
            memo.clear()
        pl = group_placements(ex, system)
        grad, param = dp_times(dense, experts, ex, pl, system)
        found = memo[key] = (grad, param, bucket_fraction(dense + experts, ex),
                             optimizer_seconds(dense, experts, ex, pl, system))
    return found


def step_constants(memo: dict, model: ModelSpec, system: SystemSpec,
                   ex: ExecutionSpec) -> tuple[float, int, float, int]:
    """(model FLOPs per step, world size, peak TFLOP/s, tokens per step) of ``ex``: with the step time they give
    tok/s/GPU = tokens / (step * world), TFLOP/s/GPU = flops / step / world / 1e12 and MFU = TFLOP/s / peak."""
    key = (ex.seq_length, ex.global_batch_size, ex.precision, ex.lora_rank)
    found = memo.get(key)
    if found is None:
        found = memo[key] = (model_flops_per_step(model, ex.seq_length, ex.global_batch_size,
                                                  frozen_weights=bool(ex.lora_rank)),
                             system.gpu.peak_tflops(ex.precision), ex.global_batch_size * ex.seq_length)
    return found[0], ex.world_size, found[1], found[2]


__all__ = ["DP_FIELDS", "TAIL_LIMIT", "boundary_p2p", "rank_tail", "step_constants"]
