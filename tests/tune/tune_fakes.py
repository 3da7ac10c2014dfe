"""Small stand-ins for the memory model and the projection, for tests of the search machinery.

They are deliberately simple closed forms with the right monotonicity (more sharding / recompute /
smaller micro-batches use less memory; recompute costs time; the pipeline bubble is (p-1)/(v*m)), so
the tests can derive expected winners by hand. Real-model tests live next to these.
"""

from __future__ import annotations

from dataclasses import dataclass

from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec
from primus_ext.tune.oracle import Score
from primus_ext.tune.prefilter import MemoryFilter

GIB = 1 << 30


@dataclass(frozen=True)
class FakeMemory:
    fits: bool
    peak_bytes: int
    capacity_bytes: int
    stages: tuple = ()


def fake_peak(model: ModelSpec, e: ExecutionSpec, system: SystemSpec) -> int:
    params = 12 * model.hidden_size**2 * model.num_layers * (model.num_experts or 1)
    shard = e.tp * e.pp * (e.ep if model.is_moe else 1)
    state = 18 if e.fsdp == "none" and not e.use_distributed_optimizer else 6 if e.fsdp == "none" else 2
    weights = params * state / shard
    recompute = {None: 1.0, "selective": 0.6}.get(e.recompute_granularity, 0.15)
    acts = 34 * e.seq_length * e.micro_batch_size * model.hidden_size * model.num_layers / e.pp / e.tp / e.cp
    return int(weights + acts * recompute * min(e.pp, e.num_microbatches))


def fake_estimate(model: ModelSpec, e: ExecutionSpec, system: SystemSpec, **_: object) -> FakeMemory:
    peak = fake_peak(model, e, system)
    return FakeMemory(fits=peak <= system.gpu.hbm_bytes, peak_bytes=peak, capacity_bytes=system.gpu.hbm_bytes)


def fake_fits(model: ModelSpec, e: ExecutionSpec, system: SystemSpec, *, margin: float = 0.0) -> bool:
    return fake_peak(model, e, system) <= system.gpu.hbm_bytes * (1 - margin)


def fake_filter(model: ModelSpec, system: SystemSpec, margin: float = 0.0) -> MemoryFilter:
    return MemoryFilter(model, system, margin=margin, fits_fn=fake_fits, estimate_fn=fake_estimate)


def fake_oracle(model: ModelSpec, system: SystemSpec):
    """Step time = per-micro-batch work * (m + bubble) + exposed comm; a known shape of optimum."""
    calls = []

    def oracle(e: ExecutionSpec) -> Score:
        calls.append(e)
        m = e.num_microbatches
        tokens = e.micro_batch_size * e.seq_length
        eff = min(1.0, 0.5 + 0.1 * e.micro_batch_size) / (1 + 0.05 * (e.tp - 1))
        per_mb = tokens * model.hidden_size**2 * model.num_layers * 24 / (e.tp * e.pp * e.cp) / 1e15 / eff
        recompute = {None: 0.0, "selective": 0.05}.get(e.recompute_granularity, 0.33)
        per_mb *= 1 + recompute
        bubble = (e.pp - 1) / e.vpp * per_mb
        tp_comm = 0.02 * per_mb * (e.tp - 1) * (0.3 if e.tp_comm_overlap else 1.0)
        dp = 0.001 * e.dp * (0.2 if e.overlap_grad_reduce else 1.0)
        step = per_mb * m + bubble + tp_comm * m + dp
        tps = e.global_batch_size * e.seq_length / step / system.world_size
        peak = fake_peak(model, e, system)
        return Score(tokens_per_s_per_gpu=tps, step_time_s=step, mfu=0.4,
                     breakdown={"compute_s": per_mb * m, "bubble_s": bubble, "exposed_tp_s": tp_comm * m,
                                "exposed_dp_grad_s": dp},
                     peak_bytes=peak, capacity_bytes=system.gpu.hbm_bytes, sources={"dense": "fake"})

    oracle.calls = calls  # type: ignore[attr-defined]
    return oracle
