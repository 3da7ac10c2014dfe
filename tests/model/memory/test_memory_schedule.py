"""Micro-batches in flight per model chunk under the interleaved schedule, against megatron-core 0.16.1's
own scheduling functions (``get_pp_rank_microbatches`` for the warm-up count, ``get_schedule_table`` for
the order in which chunk-micro-batches are issued), including EP all-to-all overlap's extra warm-up step.
Megatron's interleaved schedule needs M >= PP and M a multiple of PP (schedules.py raises otherwise), so
only such counts are compared."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from primus_ext.model.memory.schedule import chunk_in_flight, held_activations, megatron_held, prefix_sums
from primus_ext.specs import ExecutionSpec


def _megatron_in_flight(pp: int, rank: int, vpp: int, m: int, overlap: bool) -> tuple[float, ...]:
    from megatron.core.pipeline_parallel.schedules import get_pp_rank_microbatches, get_schedule_table

    comm = SimpleNamespace(pp_group=SimpleNamespace(size=lambda: pp, rank=lambda: rank),
                           virtual_pipeline_model_parallel_size=vpp)
    total, all_warmup, warmup, _ = get_pp_rank_microbatches(m, vpp, pp, overlap_moe_expert_parallel_comm=overlap,
                                                            p2p_communicator=comm)
    held = total if all_warmup else warmup + 1  # the steady state's first forward before any backward
    chunks = Counter(chunk for _, chunk in get_schedule_table(m, vpp, pp)[:held])
    return tuple(float(chunks[c]) for c in range(vpp))


@pytest.mark.parametrize(("pp", "vpp", "m"), [(4, 2, 8), (4, 3, 16), (8, 4, 64), (16, 4, 384), (4, 2, 4), (2, 24, 32)])
@pytest.mark.parametrize("overlap", [False, True])
def test_interleaved_in_flight_matches_megatron_schedule(pp, vpp, m, overlap):
    e = ExecutionSpec(pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp,
                      pipeline_schedule="interleaved", micro_batch_size=1, global_batch_size=m, data_parallel_size=1,
                      overlap_moe_expert_parallel_comm=overlap)
    for rank in range(pp):
        assert chunk_in_flight(e, rank) == _megatron_in_flight(pp, rank, vpp, m, overlap), rank


@pytest.mark.parametrize(("pp", "vpp"), [(1, 1), (4, 1), (8, 1), (4, 2), (4, 3), (8, 4), (16, 4), (2, 24)])
@pytest.mark.parametrize("m", [1, 3, 8, 64, 384])
@pytest.mark.parametrize("overlap", [False, True])
def test_closed_form_holds_what_the_chunk_counts_hold(pp, vpp, m, overlap):
    """``megatron_held``, what ``memory.rank.rank_memory`` evaluates under 1F1B / interleaved, is ``held_activations``
    of the per-chunk counts (checked above against megatron-core's schedule), to the last bit on whole bytes."""
    e = ExecutionSpec(pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
                      pipeline_schedule="interleaved" if vpp > 1 else "1f1b", micro_batch_size=1, global_batch_size=m,
                      data_parallel_size=1, overlap_moe_expert_parallel_comm=overlap)
    saved = tuple(float(1_000_003 * (c + 1) + 7 * c * c) for c in range(vpp))  # a different size per chunk
    fractional = tuple(b / 3 for b in saved)  # measured sizes, rescaled: equal within rounding
    for rank in range(pp):
        counts = chunk_in_flight(e, rank)
        held = megatron_held(pp, vpp, m, rank, int(overlap), saved, prefix_sums(saved), sum(saved))
        assert held == held_activations(counts, saved), rank
        held = megatron_held(pp, vpp, m, rank, int(overlap), fractional, prefix_sums(fractional), sum(fractional))
        assert held == pytest.approx(held_activations(counts, fractional), rel=1e-14), rank
