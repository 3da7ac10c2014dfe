"""Per-GPU memory of every pipeline stage, and the tuner's out-of-memory pre-filter.

Usage::

    from primus_ext.model.memory import estimate_memory, fits
    mem = estimate_memory(model, execution, system)         # Memory: per stage + peak + fits
    mem.peak_stage.detail                                    # named parts, bytes
    fits(model, execution, system, margin=0.05)              # bool, no I/O, no torch

Per stage (``pipeline_plan``: first / middle / last, uneven splits, layouts, VPP chunks):

* parameters: bf16 weights (the MoE router in fp32), the embedding on the first stage, the final norm
  + output layer on the last (with tied embeddings and PP > 1 Megatron keeps a copy of the word
  embeddings there), MTP layers + their embedding copy; fp8 adds TE's cached fp8 weight copies;
* gradients: Megatron DDP's main-grad buffer, fp32 (bf16 with ``grad_reduce_in_bf16``); torch FSDP2's
  sharded gradients in the parameter dtype (``memory.state``);
* optimizer: Adam m, v + fp32 master weights (12 B/param; less with megatron's precision-aware optimizer:
  ``optimizer_state``), sharded by the distributed optimizer over
  the data-parallel group with CP (dense) and the expert-data-parallel group (experts);
  FSDP shards parameters, gradients and optimizer state (torch_fsdp2: all; megatron_fsdp: by
  ``data_parallel_sharding_strategy``) and adds the gathered layers; the optimizer step's own peak
  (torch FSDP2: fp32 copies of the gradients, no activations) counts where it is the higher one;
* activations: ``memory.activations`` per layer and micro-batch (or measured saved bytes; the first
  ``cpu_offloading_num_layers`` layers offloaded to the host but one in transit; the loss's fp32 or
  bf16 logits per ``cross_entropy_fusion_impl``; torchtitan's op-level selective checkpointing), times the
  micro-batches in flight: 1F1B ``min(PP - rank, M)``; interleaved Megatron's warm-up rule
  ``min((PP - rank - 1) * 2 + (VPP - 1) * PP + 1, M * VPP)`` chunk-micro-batches (one more with EP
  all-to-all overlap; megatron-core 0.16.1 schedules.py) spread over the chunks; ZB-H1 adds, on rank
  ``i``, up to ``i`` deferred weight-gradient passes holding the GEMM inputs (Qi et al. 2023, section
  3.1: peak stays at PP micro-batches);
* other: CUDA context, NCCL and GEMM workspaces, the recompute / backward working set, logits of the
  loss, MoE all-to-all buffers, FSDP gathered layers, allocator fragmentation (constants below); on the
  loss stage the loss's and output layer's backward and the last layer's recompute + backward are two
  phases, the first freeing its tensors before the second (``memory.stage.loss_overlap``).

``fits`` / ``peak_bytes`` evaluate the same arithmetic on one representative rank per distinct stage
composition, from per-rank constants memoised on the fields they depend on (``_SHAPE_FIELDS``), and
memoise the peak on those + the run fields (``_RUN_FIELDS``); no dataclass is built on that path and torch
is never imported. ``tests/model/memory/test_memory_prefilter_fast.py`` checks it equals ``estimate_memory`` on
every configuration of two tuner spaces and that no other field changes memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from operator import attrgetter

from primus_ext.model.fp8 import layer_weight_bytes
from primus_ext.model.memory.schedule import held_activations, megatron_held, prefix_sums
from primus_ext.model.memory.stage import (
    CUDA_CONTEXT_BYTES,
    FIXED_OTHER_BYTES,
    FRAGMENTATION_FRACTION,
    GEMM_WORKSPACE_BYTES,
    NCCL_BUFFER_BYTES,
    Measured,
    StageContext,
    biggest_layer_params,
    loss_overlap,
    peak_representatives,
    rank_profile,
    stage_context,
    stage_memory,
    transient_terms,
)
from primus_ext.model.memory.state import optimizer_step_excess, sharding_bytes, state_bytes
from primus_ext.model.pipeline.registry import resolve_schedule
from primus_ext.model.pipeline.zbv import wgrad_share
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

HBM_VISIBLE_BYTES_PER_DATASHEET_BYTE = 81559 * 2**20 / 80e9
"""Datasheet HBM "GB" are GiB: nvidia-smi shows 81 559 MiB (85.5e9 B) on an "80 GB" H100 and rocm-smi
205.8e9 B on a "192 GB" MI300X (1.072x). The hardware profiles store decimal GB, so the usable capacity
is ``hbm_bytes`` times this factor (1.069)."""


DEFAULT_MARGIN = 0.05
"""Share of each GPU's allocatable HBM the tuner keeps free by default and the gate and ``project`` warn inside.
What the memory model names is already in the projected peak (``memory.stage``: CUDA/HIP context 0.6 GB, NCCL/RCCL
buffers 0.5 GB, GEMM workspaces 0.1 GB, caching-allocator fragmentation 3 % of activations and transients); the
margin is for what it cannot see: data-loader and checkpoint-save allocations, allocator state after long runs,
a library's workspace we do not list. An engineering allowance (not fitted: no GPU run of this project measured
it); the development set's published runs are projected conservatively (116 of 127 within HBM, the misses over
it), so it is not a correction of a known bias. ``--margin`` changes it."""


MEMORY_ERROR = 0.155
"""The memory model's demonstrated error on runs that ran, as a fraction of the peak: the largest measured against
a real run's memory, the 15.5 % by which it under-projects the max reserved of Primus's Llama-3.2-1B FP8 run on 8 x
MI355X (71.4 vs 84.6 GiB; its allocated peak within 3.3 %; DeepSeek-V2-Lite's reserved -3.4 %:
``../shared/validation/logs``, benchmarks/RESULTS.md "MI355X: before and after calibration"); on the other side, the
published runs that ran and that it projects over their HBM exceed it by at most 17 % (GPT-OSS-120B on B200,
``benchmarks/memory_prefilter.py``). A peak over the capacity by no more than this is not a verdict the model can
give: ``within the model's error``, a warning with the reason, not out of memory (the tuner's pre-filter still
requires a fit; ``benchmarks/RESULTS.md`` documents the error per component)."""


def margin_verdict(peak: float, capacity: float, margin: float = DEFAULT_MARGIN) -> str:
    """``fits`` (peak within capacity less the margin), ``over the margin`` (inside capacity, inside the margin),
    ``within the model's error`` (over capacity by at most ``MEMORY_ERROR``: may run), ``out of memory`` (over it by
    more): four verdicts, never one for another."""
    if peak > capacity * (1.0 + MEMORY_ERROR):
        return "out of memory"
    if peak > capacity:
        return "within the model's error"
    return "over the margin" if peak > capacity * (1.0 - margin) else "fits"


def capacity_bytes(system: SystemSpec) -> float:
    """Bytes of HBM one GPU of ``system`` can allocate."""
    return system.gpu.hbm_bytes * HBM_VISIBLE_BYTES_PER_DATASHEET_BYTE


@dataclass(frozen=True, kw_only=True)
class StageMemory:
    """Peak bytes on one GPU of one pipeline rank."""

    rank: int
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    other_bytes: float
    total_bytes: float
    microbatches_in_flight: float
    """Micro-batches whose activations are held at the peak (chunk-weighted under VPP)."""
    detail: Mapping[str, float]
    """Named parts (bytes) behind the five totals."""

    @property
    def peak_bytes(self) -> float:
        """Alias of ``total_bytes`` (the stage's peak), for readers of per-stage peaks."""
        return self.total_bytes


@dataclass(frozen=True, kw_only=True)
class Memory:
    """The memory projection of one configuration."""

    stages: tuple[StageMemory, ...]
    peak_bytes: float
    capacity_bytes: float
    fits: bool
    headroom_bytes: float
    """capacity * (1 - margin) - peak; negative when it does not fit."""
    source: str
    """``analytic`` or ``measured saved-bytes`` (activations from the timing store)."""
    margin: float = 0.0

    @property
    def peak_stage(self) -> StageMemory:
        return max(self.stages, key=lambda s: s.total_bytes)


def _result(ctx: StageContext, stages: list[StageMemory], system: SystemSpec, margin: float) -> Memory:
    capacity = capacity_bytes(system)
    peak = max(s.total_bytes for s in stages)
    usable = capacity * (1.0 - margin)
    return Memory(stages=tuple(stages), peak_bytes=peak, capacity_bytes=capacity, fits=peak <= usable,
                  headroom_bytes=usable - peak, source=ctx.source, margin=margin)


def estimate_memory(
    model: ModelSpec,
    execution: ExecutionSpec,
    system: SystemSpec,
    *,
    activation_bytes: Mapping[str, int] | None = None,
    measured_impl: str = "te",
    measured_scale: float = 1.0,
    measured_sequence_split: bool | None = None,
    margin: float = 0.0,
) -> Memory:
    """Per-stage peak memory of one GPU for ``model`` run as ``execution`` on ``system``.

    ``activation_bytes``: measured bytes saved for backward per layer kind (``dense``, ``moe``,
    ``output``) for one micro-batch at the configured recompute, taken by ``measured_impl`` (``te`` on a
    GPU, ``local`` = megatron-core's local spec on CPU) on the shape ``RankShape.scaled(measured_scale)``.
    Each kind's measured / formula ratio at that shape and implementation rescales the TE formula at the
    target shape. ``measured_sequence_split``: whether the measured modules ran sequence parallelism's split
    (real TP ranks; ``False`` for a one-rank world, the ``;sp-unsplit`` of ``measure.single.measured_origin``);
    ``None``: split unless CP > 1 (``memory.activations.as_measured``). ``margin``: fraction of HBM kept
    free (fits only when peak <= capacity*(1-margin)).
    Raises ``RecipeError`` when the layer split is illegal.
    """
    measured = None
    if activation_bytes:
        measured = Measured(saved_bytes=dict(activation_bytes), impl=measured_impl, scale=measured_scale,
                            sequence_split=measured_sequence_split)
    ctx = stage_context(model, execution, measured)
    stages = []
    for rank in range(execution.pp):
        parts, totals, in_flight = stage_memory(ctx, execution, rank, detail=True,
                                                fp8_any_layout=system.gpu.fp8_any_layout)
        stages.append(StageMemory(rank=rank, params_bytes=totals[0], grads_bytes=totals[1],
                                  optimizer_bytes=totals[2], activations_bytes=totals[3],
                                  other_bytes=totals[4], total_bytes=sum(totals),
                                  microbatches_in_flight=in_flight, detail=parts))
    return _result(ctx, stages, system, margin)


_SHAPE_FIELDS = (
    "tensor_model_parallel_size", "context_parallel_size", "expert_model_parallel_size",
    "expert_tensor_parallel_size", "sequence_parallel", "micro_batch_size", "seq_length", "precision",
    "recompute_granularity", "recompute_modules", "recompute_method", "recompute_num_layers",
    "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size", "pipeline_model_parallel_layout",
    "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split", "cpu_offloading",
    "cpu_offloading_num_layers", "cpu_offloading_activations", "cross_entropy_fusion_impl", "selective_ac_option",
    "lora_rank", "lora_targets", "recompute_layer_ids", "pipeline_schedule", "fp4_recipe",
    "activation_func_fp8_input_store",
)
"""Every ExecutionSpec field the per-rank constants depend on (per-rank shapes, split and the schedule's placement
of it, recompute, offload)."""
_RUN_FIELDS = (
    "data_parallel_size", "use_distributed_optimizer", "fsdp", "data_parallel_sharding_strategy",
    "grad_reduce_in_bf16", "global_batch_size", "overlap_moe_expert_parallel_comm",
    "fp8_param_gather", "fp8_recipe", "fp4_recipe", "fp4_param", "use_precision_aware_optimizer", "main_params_dtype",
    "exp_avg_dtype", "exp_avg_sq_dtype", "store_param_remainders",
)
"""The other fields the peak depends on (sharding, micro-batch count, schedule, grad precision); the rest of
an ExecutionSpec (overlap flags, dispatcher, ...) does not change memory."""
_N_SHAPE = len(_SHAPE_FIELDS)
_peak_fields = attrgetter(*_SHAPE_FIELDS, *_RUN_FIELDS)

_COMPILED: dict[tuple, tuple] = {}
"""(id(model), shape fields) -> per-rank constants: for each distinct stage composition the parameter
counts, saved bytes per chunk and the shape-only transients. An entry is used only for the same model
object (it keeps the model alive)."""
_PEAKS: dict[tuple, tuple[ModelSpec, float]] = {}
"""(id(model), shape + run fields) -> (model, peak bytes)."""
_MEMO_LIMIT = 200_000


def _compile(model: ModelSpec, e: ExecutionSpec) -> tuple:
    ctx = stage_context(model, e, None)
    reps = []
    for rank in peak_representatives(ctx):
        prof = rank_profile(ctx, rank)
        backward_ws, logits, a2a = transient_terms(model, e, prof)
        static = prof.working + backward_ws + logits + a2a
        reps.append((rank, prof.total_params, prof.expert_params, prof.router_params, prof.edge_params,
                     prof.chunk_saved, prefix_sums(prof.chunk_saved), sum(prof.chunk_saved), prof.wgrad_fraction,
                     static, prof.loss_saved + logits if prof.loss_saved else 0.0, prof.working + backward_ws,
                     prof.output_params, prof.trainable))
    return (model, tuple(reps), biggest_layer_params(ctx))


def _peak(model: ModelSpec, e: ExecutionSpec, any_layout: bool) -> float:
    """The peak over the pipeline ranks: the arithmetic of ``memory.stage.stage_memory`` (checked equal on
    whole tuner spaces by tests/model/memory/test_memory_prefilter_fast.py) on memoised per-rank constants, then
    memoised on the remaining fields the peak depends on (configurations differing only in overlap flags,
    dispatcher, ... share it)."""
    key = (id(model), _peak_fields(e), any_layout)
    hit = _PEAKS.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    shape_key = (key[0], key[1][:_N_SHAPE])
    entry = _COMPILED.get(shape_key)
    if entry is None or entry[0] is not model:
        if len(_COMPILED) >= _MEMO_LIMIT:
            _COMPILED.clear()
        entry = _COMPILED[shape_key] = _compile(model, e)
    _, reps, biggest = entry
    sharding = sharding_bytes(e)
    weight = layer_weight_bytes(e, any_layout, param_bytes=sharding[0])
    pp = e.pipeline_model_parallel_size
    m = max(1, e.global_batch_size // (e.micro_batch_size * e.data_parallel_size))
    vpp = e.virtual_pipeline_model_parallel_size or 1
    schedule = resolve_schedule(e.pipeline_schedule, pp, e.virtual_pipeline_model_parallel_size)
    zb = schedule.splits_wgrad
    extra = 1 if e.overlap_moe_expert_parallel_comm else 0
    share = 0.0 if schedule.batch_kernel is not None else wgrad_share(model.hidden_size, model.num_attention_heads,
                                                                       e.seq_length)
    peak = 0.0
    megatron = schedule.batch_kernel is not None  # 1F1B / interleaved: their counts in closed form
    for (rank, total_params, expert, router, edge, saved, prefix, per_mb, wgrad, static, loss, layer, output,
         trainable) in reps:
        params, grads, opt_dense, opt_expert, fsdp_layer, fsdp_loss = state_bytes(
            e, sharding, total_params, expert, router, edge, biggest, weight, output, trainable)
        fsdp_gather = max(fsdp_layer, fsdp_loss)
        opt = opt_dense + opt_expert
        if megatron:
            activations = megatron_held(pp, vpp, m, rank, extra, saved, prefix, per_mb)
        else:
            w_bytes = per_mb * wgrad if zb else 0.0
            activations = max(held_activations(f, saved) + w * w_bytes
                              for f, w in schedule.held_states(rank, pp, vpp, m, extra, share))
        transient = static - loss_overlap(loss, layer, fsdp_layer, fsdp_loss, zb) + fsdp_gather
        other = (transient + FRAGMENTATION_FRACTION * (activations + transient) + CUDA_CONTEXT_BYTES
                 + NCCL_BUFFER_BYTES + GEMM_WORKSPACE_BYTES)
        other += optimizer_step_excess(e, sharding, params, grads, opt, params + grads + opt + activations + other,
                                       FIXED_OTHER_BYTES)
        total = params + grads + opt + activations + other
        if total > peak:
            peak = total
    if len(_PEAKS) >= _MEMO_LIMIT:
        _PEAKS.clear()
    _PEAKS[key] = (model, peak)
    return peak


def peak_bytes(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec | None = None) -> float:
    """Peak per-GPU bytes over the pipeline ranks (the pre-filter's quantity), torch-free. ``system`` gives
    the GPU's FP8 operand layouts (``GPUSpec.fp8_any_layout``); without it the conservative (Hopper) answer."""
    return _peak(model, execution, system is not None and system.gpu.fp8_any_layout)


def fits(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec, *, margin: float = 0.0) -> bool:
    """The tuner's fast pre-filter: True when the analytic peak fits ``capacity * (1 - margin)``."""
    usable = system.gpu.hbm_bytes * HBM_VISIBLE_BYTES_PER_DATASHEET_BYTE * (1.0 - margin)
    return _peak(model, execution, system.gpu.fp8_any_layout) <= usable


def with_capacity(memory: Memory, capacity_bytes: float) -> Memory:
    """The same projection judged against another capacity (e.g. a reserved-memory cap)."""
    usable = capacity_bytes * (1.0 - memory.margin)
    return replace(memory, capacity_bytes=capacity_bytes, fits=memory.peak_bytes <= usable,
                   headroom_bytes=usable - memory.peak_bytes)
