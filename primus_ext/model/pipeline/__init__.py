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
  on first use of ``simulate_many`` / ``simulated_ops``, so importing this package stays numba-free;
* ``registry``: every schedule as one ``Schedule`` object; ``resolve_schedule`` / ``spec_schedule`` are the only
  places that choose one. Outside this package no code compares schedule names (tests/model/pipeline/
  test_schedule_registry.py greps for it): ask the object (``splits_wgrad``, ``label``, ``batch_kernel``, ...).

Adding a schedule (e.g. ZB-H2, ZB-V, V-half, V-min, DualPipe, DualPipeV)::

    from primus_ext.model.pipeline.registry import Schedule, register

    @register
    class ZBV(Schedule):
        name = "zb-v"                    # the ExecutionSpec.pipeline_schedule value
        label = "ZB-V"                   # reports
        primus_names = ("zbv-formatted", "zero_bubble_v_schedule")   # pp_algorithm values / recipe flags
        splits_wgrad = True              # W as separate ops (wgrad_held_microbatches says how many wait)
        chunk_placement = "v"            # chunk 0 on ranks 0..P-1, chunk 1 back on P-1..0 (stage_of)
        fixed_chunks = 2                 # chunks per rank whatever VPP says; resolve() then keeps it
        kept_over_vpp = True             # a flag selects it: the spec keeps it even with VPP set
        model_copies = 1                 # DualPipe: 2 (memory.state scales params/grads/optimizer by it)
        batch_kernel = None              # no numba structure: simulated one configuration at a time

        def legality(self, pp, vpp, num_microbatches): ...          # what it requires ([] = runs)
        def chunk_in_flight(self, rank, pp, vpp, m, extra=0): ...   # micro-batches held per chunk (memory)
        def wgrad_held_microbatches(self, rank, pp, m): ...          # W inputs held (ZB-H2 holds more)
        def rank_order(self, rank, pp, vpp, m, group=None, extra_warmup=0): ...  # its op order
        def simulate(self, times, num_microbatches, p2p=(), **kwargs): ...     # its simulator

Import the new module from this ``__init__`` (below) so that registering happens on package import (``zb2``,
``zbv`` and ``dualpipe`` are).
"""

from primus_ext.model.pipeline import dualpipe, zb2, zbv  # noqa: F401  (they register their schedules)
from primus_ext.model.pipeline.long import MAX_SIMULATED_OPS, pricing_problem, simulated_directly
from primus_ext.model.pipeline.ops import BWD, FWD, WGRAD, ChunkTimes, Event, ScheduleResult
from primus_ext.model.pipeline.registry import (
    SCHEDULES,
    Schedule,
    get_schedule,
    register,
    resolve,
    resolve_schedule,
    spec_schedule,
)
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


__all__ = ["BWD", "FWD", "MAX_SIMULATED_OPS", "SCHEDULES", "WGRAD", "ChunkTimes", "Event", "Schedule", "ScheduleResult",
           "clear_schedule_cache", "get_schedule", "interleaving_problem", "pricing_problem", "rank_order", "register",
           "resolve", "resolve_schedule", "schedule_table", "simulate", "simulate_many", "simulated_directly",
           "simulated_ops", "spec_schedule", "uniform_times", "unpaired_counts", "unpaired_ops", "unpaired_passes",
           "unpaired_seconds"]
