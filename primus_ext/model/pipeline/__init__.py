"""Pipeline schedules: 1F1B, interleaved 1F1B (VPP) and zero-bubble ZB-H1, simulated per rank and micro-batch.

Usage::

    from primus_ext.model.pipeline import ChunkTimes, simulate
    times = ((ChunkTimes(fwd=1.0, bwd=2.0),),) * 4             # [rank][chunk], seconds
    r = simulate("1f1b", times, num_microbatches=8)            # r.makespan, r.bubble_fraction

The rooms behind it (other packages import from here, not from them):

* ``schedules``: the op orders (megatron-core's schedule table), ``simulate`` and the unpaired-pass counts;
* ``ops``: the op and result types and ``replay``, the core every schedule runs on;
* ``periodic``: 1F1B / interleaved fast path: the transient simulated, the periodic steady state extrapolated;
* ``long``: long steps (any micro-batch count) in closed form from four short ones;
* ``zb``: the ZB-H1 order (Qi et al. 2023);
* ``batch``: many schedules of one structure at once, compiled with numba (the tuner's batch path); loaded
  on first use of ``simulate_many`` / ``simulated_ops``, so importing this package stays numba-free.
"""

from primus_ext.model.pipeline.long import MAX_SIMULATED_OPS, pricing_problem, simulated_directly
from primus_ext.model.pipeline.ops import BWD, FWD, WGRAD, ChunkTimes, Event, ScheduleResult
from primus_ext.model.pipeline.schedules import (
    clear_schedule_cache,
    interleaving_problem,
    rank_order,
    schedule_table,
    simulate,
    uniform_times,
    unpaired_counts,
    unpaired_ops,
    unpaired_passes,
    unpaired_seconds,
)

_COMPILED = ("simulate_many", "simulated_ops")


def __getattr__(name: str) -> object:
    if name in _COMPILED:  # numba only for the batch path
        from primus_ext.model.pipeline import batch

        return getattr(batch, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BWD",
    "FWD",
    "MAX_SIMULATED_OPS",
    "WGRAD",
    "ChunkTimes",
    "Event",
    "ScheduleResult",
    "clear_schedule_cache",
    "interleaving_problem",
    "pricing_problem",
    "rank_order",
    "schedule_table",
    "simulate",
    "simulate_many",
    "simulated_directly",
    "simulated_ops",
    "uniform_times",
    "unpaired_counts",
    "unpaired_ops",
    "unpaired_passes",
    "unpaired_seconds",
]
