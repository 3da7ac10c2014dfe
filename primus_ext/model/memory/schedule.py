"""Micro-batches whose activations a pipeline rank holds at its peak, per model chunk (torch-free).

Usage::

    from primus_ext.model.memory.schedule import chunk_in_flight, held_activations
    chunk_in_flight(execution, rank)           # (micro-batches held by chunk 0, chunk 1, ...)
    held_activations(chunk_in_flight(execution, rank), saved)   # bytes held at the peak

1F1B holds ``min(PP - rank, M)`` micro-batches; Megatron's interleaved schedule holds its warm-up
chunk-micro-batches plus the first steady-state forward (megatron-core 0.16.1 schedules.py
``get_pp_rank_microbatches`` / ``get_schedule_table``; checked in tests/model/memory/test_memory_schedule.py).
"""

from __future__ import annotations

from primus_ext.model.pipeline.registry import resolve
from primus_ext.specs import ExecutionSpec


def chunk_in_flight(execution: ExecutionSpec, rank: int) -> tuple[float, ...]:
    """Micro-batches whose activations each model chunk of ``rank`` holds at the peak."""
    extra = 1 if execution.overlap_moe_expert_parallel_comm else 0
    return resolve(execution).chunk_in_flight(rank, execution.pp, execution.vpp,
                                              max(1, execution.num_microbatches), extra)


def held_activations(flights: tuple[float, ...], saved: tuple[float, ...]) -> float:
    """Bytes held at the peak: ``sum(chunk_in_flight * saved)`` over the rank's chunks (any schedule's counts)."""
    return sum(f * b for f, b in zip(flights, saved, strict=True))
