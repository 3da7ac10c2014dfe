"""Micro-batches in flight per model chunk under the interleaved schedule, against megatron-core 0.16.1's
own scheduling functions (``get_pp_rank_microbatches`` for the warm-up count, ``get_schedule_table`` for
the order in which chunk-micro-batches are issued), including EP all-to-all overlap's extra warm-up step.
Megatron's interleaved schedule needs M >= PP and M a multiple of PP (schedules.py raises otherwise), so
only such counts are compared."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from primus_ext.model.memory.schedule import chunk_in_flight
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
