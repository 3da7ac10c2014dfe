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
* gradients: Megatron DDP's main-grad buffer, fp32 (bf16 with ``grad_reduce_in_bf16``);
* optimizer: Adam m, v + fp32 master weights (12 B/param), sharded by the distributed optimizer over
  the data-parallel group with CP (dense) and the expert-data-parallel group (experts);
  FSDP shards parameters, gradients and optimizer state (torch_fsdp2: all; megatron_fsdp: by
  ``data_parallel_sharding_strategy``) and adds the gathered layers;
* activations: ``memory_activations`` per layer and micro-batch (or measured saved bytes), times the
  micro-batches in flight: 1F1B ``min(PP - rank, M)``; interleaved Megatron's warm-up rule
  ``min((PP - rank - 1) * 2 + (VPP - 1) * PP, M * VPP) + 1`` chunk-micro-batches spread over the
  chunks; ZB-H1 adds, on rank ``i``, up to ``i`` deferred weight-gradient passes holding the GEMM
  inputs (Qi et al. 2023, section 3.1: peak stays at PP micro-batches);
* other: CUDA context, NCCL and GEMM workspaces, the recompute / backward working set, logits of the
  loss, MoE all-to-all buffers, FSDP gathered layers, allocator fragmentation (constants below).

``fits`` evaluates the same arithmetic on one representative rank per distinct stage composition,
with per-rank terms memoised; ``tests/model/test_memory.py`` checks it agrees with ``estimate_memory``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from primus_ext.model.memory_stage import (
    Measured,
    StageContext,
    peak_representatives,
    stage_context,
    stage_memory,
)
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

HBM_VISIBLE_BYTES_PER_DATASHEET_BYTE = 81559 * 2**20 / 80e9
"""Datasheet HBM "GB" are GiB: nvidia-smi shows 81 559 MiB (85.5e9 B) on an "80 GB" H100 and rocm-smi
205.8e9 B on a "192 GB" MI300X (1.072x). The hardware profiles store decimal GB, so the usable capacity
is ``hbm_bytes`` times this factor (1.069)."""


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
    margin: float = 0.0,
) -> Memory:
    """Per-stage peak memory of one GPU for ``model`` run as ``execution`` on ``system``.

    ``activation_bytes``: measured bytes saved for backward per layer kind (``dense``, ``moe``,
    ``output``) for one micro-batch at the configured recompute, taken by ``measured_impl`` (``te`` on a
    GPU, ``local`` = megatron-core's local spec on CPU) on the shape ``RankShape.scaled(measured_scale)``.
    Each kind's measured / formula ratio at that shape and implementation rescales the TE formula at the
    target shape. ``margin``: fraction of HBM kept free (fits only when peak <= capacity*(1-margin)).
    Raises ``RecipeError`` when the layer split is illegal.
    """
    measured = None
    if activation_bytes:
        measured = Measured(saved_bytes=dict(activation_bytes), impl=measured_impl, scale=measured_scale)
    ctx = stage_context(model, execution, measured)
    stages = []
    for rank in range(execution.pp):
        parts, totals, in_flight = stage_memory(ctx, execution, rank, detail=True)
        stages.append(StageMemory(rank=rank, params_bytes=totals[0], grads_bytes=totals[1],
                                  optimizer_bytes=totals[2], activations_bytes=totals[3],
                                  other_bytes=totals[4], total_bytes=sum(totals),
                                  microbatches_in_flight=in_flight, detail=parts))
    return _result(ctx, stages, system, margin)


class _PeakKey:
    """(model identity, execution) with the execution's hash computed once per call."""

    __slots__ = ("execution", "hash", "model_id")

    def __init__(self, model: ModelSpec, execution: ExecutionSpec) -> None:
        self.model_id, self.execution = id(model), execution
        self.hash = hash((self.model_id, execution))

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _PeakKey) and self.model_id == other.model_id
                and self.execution == other.execution)


_PEAKS: dict[_PeakKey, tuple[ModelSpec, float]] = {}
_PEAK_MEMO_LIMIT = 200_000


def peak_bytes(model: ModelSpec, execution: ExecutionSpec) -> float:
    """Peak per-GPU bytes over the pipeline ranks (the pre-filter's quantity), memoised."""
    key = _PeakKey(model, execution)
    entry = _PEAKS.get(key)
    if entry is not None and entry[0] is model:
        return entry[1]
    ctx = stage_context(model, execution, None)
    peak = max(sum(stage_memory(ctx, execution, rank, detail=False)[1]) for rank in peak_representatives(ctx))
    if len(_PEAKS) >= _PEAK_MEMO_LIMIT:
        _PEAKS.clear()
    _PEAKS[key] = (model, peak)
    return peak


def fits(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec, *, margin: float = 0.0) -> bool:
    """The tuner's fast pre-filter: True when the analytic peak fits ``capacity * (1 - margin)``."""
    return peak_bytes(model, execution) <= capacity_bytes(system) * (1.0 - margin)


def with_capacity(memory: Memory, capacity_bytes: float) -> Memory:
    """The same projection judged against another capacity (e.g. a reserved-memory cap)."""
    usable = capacity_bytes * (1.0 - memory.margin)
    return replace(memory, capacity_bytes=capacity_bytes, fits=memory.peak_bytes <= usable,
                   headroom_bytes=usable - memory.peak_bytes)
