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
* other: the device memory outside torch's allocator (runtime, collective buffers: the GPU profile's measured
  ``outside_allocator_gib``, else the CUDA estimate), GEMM workspaces, the recompute / backward working set, logits
  of the loss, MoE all-to-all buffers, FSDP gathered layers, allocator fragmentation (constants in ``memory.rank``);
  on the loss stage the loss's and output layer's backward and the last layer's recompute + backward are two
  phases, the first freeing its tensors before the second (``memory.rank.loss_overlap``).

One arithmetic (``memory.rank.rank_memory``) gives every number: ``estimate_memory`` runs it on every rank with
the named parts; ``fits`` / ``peak_bytes`` on one representative rank per distinct stage composition, their
per-rank profiles memoised on the fields they depend on (``_SHAPE_FIELDS``), the peak on those + the run fields
(``_RUN_FIELDS``); torch is never imported. ``tests/model/memory/test_memory_prefilter_fast.py`` checks the
representatives and the memo keys: the pre-filter equals ``estimate_memory`` on every configuration of three tuner
spaces, and no other field changes memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter

from primus_ext.model.memory.rank import OUTSIDE_ALLOCATOR_BYTES, StageMemory, rank_memory
from primus_ext.model.memory.stage import Measured, biggest_layer_params, rank_profile, stage_context
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

HBM_VISIBLE_BYTES_PER_DATASHEET_BYTE = 81559 * 2**20 / 80e9
"""Datasheet HBM "GB" are GiB: nvidia-smi shows 81 559 MiB (85.5e9 B) on an "80 GB" H100 and rocm-smi
205.8e9 B on a "192 GB" MI300X (1.072x). The hardware profiles store decimal GB, so the usable capacity
is ``hbm_bytes`` times this factor (1.069)."""


DEFAULT_MARGIN = 0.05
"""Share of each GPU's allocatable HBM the tuner keeps free by default and the gate and ``project`` warn inside.
What the memory model names is already in the projected peak (``memory.rank``: the device memory outside torch's
allocator - 10.15 GiB measured on ROCm, an estimated 1.1 GB (CUDA context + NCCL buffers) elsewhere -, GEMM workspaces
0.1 GB, caching-allocator fragmentation 3 % of activations and transients); the
margin is for what it cannot see: data-loader and checkpoint-save allocations, allocator state after long runs,
a library's workspace we do not list. An engineering allowance (not fitted: no GPU run of this project measured
it); the development set's published runs are projected conservatively (116 of 127 within HBM, the misses over
it), so it is not a correction of a known bias. ``--margin`` changes it."""


MEMORY_ERROR = 0.175
"""The memory model's demonstrated error on runs that ran, as a fraction: the largest over the evidence
(``validate.memory_error``; ``python benchmarks/memory_error.py`` prints it and derives this figure, rounded up to
half a percent; ``tests/validate/test_memory_error.py`` fails when the two differ). Measured device peaks: Primus's
Llama-3.2-1B FP8 run on 8 x MI355X -14.9 % (80.6 vs 94.7 GiB: its allocated part -0.6 %, the allocator's block for
its fp32 logits the rest, ``memory.rank.FRAGMENTATION_FRACTION``), DeepSeek-V2-Lite -6.6 %, issue 53's MI325X
Llama-2-70B FSDP2 run -7.1 % (196.1 vs 211 GiB). Runs that ran though projected over their GPU's capacity (a lower
bound of the over-projection): GPT-OSS-120B on 64 B200 (row 49 of ``../shared/validation``) +17.0 %, issue 53's
Nemotron-4-340B on 128 H100 +15.7 % (92.2 of 79.6 GiB), Llama-3.1-405B on GB200 +0.2 %. A peak over the capacity by
no more than this is not a verdict the model can give: ``within the model's error``, neither a fit nor out of memory
(the launch gate's exit 4, ``memory.gate``: said with the figures; not for an unattended launch; the tuner's
pre-filter still requires a fit)."""


def margin_verdict(peak: float, capacity: float, margin: float = DEFAULT_MARGIN) -> str:
    """``fits`` (peak within capacity less the margin), ``over the margin`` (inside capacity, inside the margin),
    ``within the model's error`` (over capacity by at most ``MEMORY_ERROR``: may or may not fit), ``out of memory``
    (over it by more): four verdicts, never one for another; ``memory.gate`` gives each its exit code."""
    if peak > capacity * (1.0 + MEMORY_ERROR):
        return "out of memory"
    if peak > capacity:
        return "within the model's error"
    return "over the margin" if peak > capacity * (1.0 - margin) else "fits"


def capacity_bytes(system: SystemSpec) -> float:
    """Bytes of HBM one GPU of ``system`` can allocate."""
    return system.gpu.hbm_bytes * HBM_VISIBLE_BYTES_PER_DATASHEET_BYTE


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


def estimate_memory(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec, *,
                    activation_bytes: Mapping[str, int] | None = None, measured_impl: str = "te",
                    measured_scale: float = 1.0, measured_sequence_split: bool | None = None,
                    margin: float = 0.0) -> Memory:
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
    ranks = [(rank, rank_profile(ctx, rank)) for rank in range(execution.pp)]
    peak, stages = rank_memory(model, execution, system.gpu.fp8_any_layout, biggest_layer_params(ctx), ranks,
                               detail=True, outside_allocator=outside_allocator_bytes(system))
    capacity = capacity_bytes(system)
    usable = capacity * (1.0 - margin)
    return Memory(stages=tuple(stages), peak_bytes=peak, capacity_bytes=capacity, fits=peak <= usable,
                  headroom_bytes=usable - peak, source=ctx.source, margin=margin)


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
"""(id(model), shape fields) -> (model, ``(rank, RankProfile)`` of one rank per distinct stage composition, the
largest layer's parameters): ``rank_memory``'s inputs. An entry is used only for the same model object (it keeps the
model alive)."""
_PEAKS: dict[tuple, tuple[ModelSpec, float]] = {}
"""(id(model), shape + run fields) -> (model, peak bytes)."""
_MEMO_LIMIT = 200_000


def _compile(model: ModelSpec, e: ExecutionSpec) -> tuple:
    ctx = stage_context(model, e, None)
    return model, tuple((rank, rank_profile(ctx, rank)) for rank in ctx.representatives), biggest_layer_params(ctx)


def outside_allocator_bytes(system: SystemSpec | None) -> float:
    """Device bytes outside torch's allocator on ``system``'s GPU: its profile's measured figure, else the CUDA
    estimate (``rank.OUTSIDE_ALLOCATOR_BYTES``)."""
    measured = system.gpu.outside_allocator_bytes if system is not None else 0.0
    return measured or OUTSIDE_ALLOCATOR_BYTES


def _peak(model: ModelSpec, e: ExecutionSpec, any_layout: bool, outside: float = OUTSIDE_ALLOCATOR_BYTES) -> float:
    """The peak over the pipeline ranks: ``rank.rank_memory`` on one rank per distinct stage composition, their
    profiles memoised on the shape fields, the peak on the remaining fields it depends on (configurations
    differing only in overlap flags, dispatcher, ... share it)."""
    key = (id(model), _peak_fields(e), any_layout, outside)
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
    peak, _ = rank_memory(model, e, any_layout, biggest, reps, outside_allocator=outside)
    if len(_PEAKS) >= _MEMO_LIMIT:
        _PEAKS.clear()
    _PEAKS[key] = (model, peak)
    return peak


def peak_bytes(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec | None = None) -> float:
    """Peak per-GPU bytes over the pipeline ranks (the pre-filter's quantity), torch-free. ``system`` gives
    the GPU's FP8 operand layouts (``GPUSpec.fp8_any_layout``); without it the conservative (Hopper) answer."""
    return _peak(model, execution, system is not None and system.gpu.fp8_any_layout, outside_allocator_bytes(system))


def fits(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec, *, margin: float = 0.0) -> bool:
    """The tuner's fast pre-filter: True when the analytic peak fits ``capacity * (1 - margin)``."""
    usable = system.gpu.hbm_bytes * HBM_VISIBLE_BYTES_PER_DATASHEET_BYTE * (1.0 - margin)
    return _peak(model, execution, system.gpu.fp8_any_layout, outside_allocator_bytes(system)) <= usable
