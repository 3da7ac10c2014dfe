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


def prefix_sums(saved: tuple[float, ...]) -> tuple[float, ...]:
    """``(0, s0, s0 + s1, ...)``: saved bytes of the first k chunks (``megatron_held``'s table)."""
    out, acc = [0.0], 0.0
    for s in saved:
        acc += s
        out.append(acc)
    return tuple(out)


def megatron_held(pp: int, vpp: int, m: int, rank: int, extra: int, saved: tuple[float, ...],
                  prefix: tuple[float, ...], per_mb: float) -> float:
    """``held_activations`` of Megatron's 1F1B / interleaved counts (``Interleaved.chunk_in_flight``) in closed form:
    whole cycles hold PP micro-batches per chunk, then the first ``q`` chunks PP more and chunk ``q`` the remainder.
    What ``memory.rank.rank_memory`` evaluates for these schedules (``estimate_memory`` and the pre-filter): no tuple
    of counts built per configuration (89k -> 134k distinct configurations per CPU-s on Mixtral-8x22B, ``python
    benchmarks/memory_prefilter.py --skip-recipes``). The same bits as ``held_activations`` on whole-byte sizes; on
    fractional (measured, rescaled) sizes the sums are grouped differently, so the last bits may differ."""
    if vpp == 1:
        return float(min(pp - rank, m)) * saved[0]
    in_flight = min((pp - rank - 1) * 2 + (vpp - 1) * pp + 1 + extra, m * vpp)
    cycles, rem = divmod(in_flight, pp * vpp)
    q, r = divmod(rem, pp)
    return cycles * pp * per_mb + pp * prefix[q] + r * saved[q]
