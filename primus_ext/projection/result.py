"""The ``Projection`` result object: what the tuner reads and the CLI prints.

Every time is seconds per optimizer step unless the name says otherwise. The breakdown adds up to the
step time exactly::

    step = compute + sum(exposed layer comm: tp, cp, ep, fsdp) + bubble + exposed pp
           + exposed dp_grad + optimizer + exposed dp_param

where compute / layer comm are those of the busiest pipeline rank (the one that sets the steady
state), ``bubble`` is the schedule's idle time without p2p, ``pp`` what send/recv adds on top, and the
DP terms what the step tail adds beyond the pipeline's makespan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from primus_ext.model.pipeline import Event
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

if TYPE_CHECKING:
    from primus_ext.model.memory import Memory

COMM_KINDS = ("tp", "cp", "ep", "fsdp", "pp", "dp_grad", "dp_param")
"""tp: tensor-parallel AR / AG+RS; cp: context-parallel KV ring or a2a; ep: MoE dispatch + combine;
fsdp: per-layer param gather / grad scatter; pp: stage send/recv; dp_grad: gradient reduce(-scatter);
dp_param: distributed-optimizer parameter all-gather."""


@dataclass(frozen=True, kw_only=True)
class CommTime:
    """One communication kind over one step: what it costs and what of it the step sees."""

    kind: str
    total_s: float
    exposed_s: float
    group: str = ""
    """Where it runs, e.g. ``"8 ranks, 1 domain"`` or ``"64 ranks over 8 domains"``."""

    @property
    def exposed_fraction(self) -> float:
        return self.exposed_s / self.total_s if self.total_s > 0 else 0.0


@dataclass(frozen=True, kw_only=True)
class Breakdown:
    """Step time split into named parts (see the module docstring)."""

    compute_s: float
    comms: tuple[CommTime, ...]
    bubble_s: float
    optimizer_s: float
    overhead_s: float = 0.0
    """Kernel-launch / framework overhead included in ``compute_s`` (analytic layers whose kernels are not
    replayed by CUDA graphs)."""
    recompute_s: float = 0.0
    """Activation recompute included in ``compute_s``."""

    def comm(self, kind: str) -> CommTime:
        for item in self.comms:
            if item.kind == kind:
                return item
        return CommTime(kind=kind, total_s=0.0, exposed_s=0.0)

    @property
    def exposed_comm_s(self) -> float:
        return sum(c.exposed_s for c in self.comms)

    @property
    def total_s(self) -> float:
        return self.compute_s + self.exposed_comm_s + self.bubble_s + self.optimizer_s


@dataclass(frozen=True, kw_only=True)
class StageTime:
    """One pipeline rank: per-micro-batch chunk times and its share of the step."""

    rank: int
    layers: int
    """Decoder layers on this rank (all chunks)."""
    fwd_s: tuple[float, ...]
    """Per chunk, one micro-batch's forward incl. exposed layer comm."""
    bwd_s: tuple[float, ...]
    """Per chunk, one micro-batch's backward incl. recompute and exposed layer comm."""
    busy_s: float
    """Compute + exposed layer comm over all micro-batches (incl. the EP all-to-all the passes without a
    partner micro-batch leave exposed under EP overlap: more than M x the per-chunk times then)."""
    finish_s: float
    """End of this rank's last backward in the simulated schedule."""
    embedding: bool = False
    output: bool = False
    dense_params: int = 0
    """Trained parameters of this rank outside / inside the expert-parallel groups (all of them, but under LoRA
    only the adapters): what the gradient reduction and the optimizer handle."""
    expert_params: int = 0


@dataclass(frozen=True, kw_only=True)
class CalibrationApplied:
    """A calibration record from real runs applied to this projection (``primus_ext.calibration``)."""

    match: str
    """``exact`` (the record's own workload) or ``nearby`` (same model, precision and GPU type; wider band)."""
    kernel_factor: float
    """Kernel time (compute, bubble, optimizer) x this; with ``scope`` ``step`` the whole step."""
    overhead_s: float
    """Fixed seconds per step added (in ``breakdown.compute_s`` and ``overhead_s``)."""
    scope: str
    memory_factor: float | None
    """Peak memory x this (measured / projected peak), or ``None``: memory uncalibrated."""
    band: float
    """Relative band of the calibrated throughput (the runs' spread; + ``NEARBY_SPREAD`` when nearby)."""
    uncalibrated_step_s: float
    uncalibrated_peak_bytes: float | None
    record: str
    """Which runs: ``CalibrationRecord.describe()``."""

    def to_dict(self) -> dict[str, object]:
        return {"match": self.match, "kernel_factor": self.kernel_factor, "overhead_s": self.overhead_s,
                "scope": self.scope, "memory_factor": self.memory_factor, "band": self.band,
                "uncalibrated_step_time_s": self.uncalibrated_step_s,
                "uncalibrated_peak_bytes": self.uncalibrated_peak_bytes, "record": self.record}


@dataclass(frozen=True, kw_only=True)
class Projection:
    """A projected training step of ``model`` run as ``execution`` on ``system``."""

    step_time_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float
    """Model TFLOP/s over the GPU's dense peak for the run's precision."""
    breakdown: Breakdown
    stages: tuple[StageTime, ...]
    sources: dict[str, str]
    """Layer kind -> where its cost came from (``analytic``, ``measured:<device>``, ``store:<device>``)."""
    model: ModelSpec
    execution: ExecutionSpec
    system: SystemSpec
    num_microbatches: int
    model_flops_per_step: float
    memory: Memory | None = None
    """``primus_ext.model.memory.Memory`` (``.fits``, ``.stages``, ``.peak_bytes``) when estimated."""
    timeline: tuple[Event, ...] = ()
    band: tuple[float, float] | None = None
    """(low, high) tokens/s/GPU from the efficiency parameters' ranges and the measurement spread."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    calibration: CalibrationApplied | None = None
    """Set when a calibration record from real runs corrected the figures above (then ``stages`` and
    ``timeline`` stay as projected: the correction is per step, not per op)."""

    @property
    def step_time_ms(self) -> float:
        return self.step_time_s * 1e3

    @property
    def measured_fraction(self) -> float:
        """Share of layer kinds whose cost was measured (not analytic)."""
        kinds = list(self.sources.values())
        return sum(1 for s in kinds if s != "analytic") / len(kinds) if kinds else 0.0
