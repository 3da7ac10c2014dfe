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
    from primus_ext.projection.error_bands import Evidence

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
        """Exposed over total, within [0, 1]: the step tail's exposed gradient reduction is a difference of sums
        (tail - makespan) that can exceed its total by a rounding ulp."""
        return min(1.0, max(0.0, self.exposed_s / self.total_s)) if self.total_s > 0 else 0.0


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

    @property
    def tail_s(self) -> float:
        """The step tail after the pipeline's makespan: exposed DP gradient reduction, optimizer step, exposed
        parameter all-gather (the same on every rank; ``report.timeline`` draws it)."""
        return self.comm("dp_grad").exposed_s + self.optimizer_s + self.comm("dp_param").exposed_s


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
    logs: tuple[str, ...] = ()
    """The record's source logs (paths as given to ``calibrate``)."""
    date: str = ""
    """When the record was stored (ISO 8601, UTC)."""
    store: str | None = None
    """The timing store holding it (``primus-ext calibrate --list`` / ``--forget`` there)."""
    timeline_scale: float = 1.0
    """The simulated schedule's times (``stages``, ``timeline``) x this: the calibrated makespan over the projected
    one, so the stages and the timeline end where the calibrated step's tail begins."""

    def to_dict(self) -> dict[str, object]:
        return {"match": self.match, "kernel_factor": self.kernel_factor, "overhead_s": self.overhead_s,
                "scope": self.scope, "memory_factor": self.memory_factor, "band": self.band,
                "uncalibrated_step_time_s": self.uncalibrated_step_s,
                "uncalibrated_peak_bytes": self.uncalibrated_peak_bytes, "record": self.record,
                "logs": list(self.logs), "date": self.date, "store": self.store,
                "timeline_scale": self.timeline_scale}


@dataclass(frozen=True, kw_only=True)
class ClusterApplied:
    """A cluster record (``primus_ext.calibration.cluster``) whose environment this projection ran on."""

    record: str
    """Which cluster and runs: ``ClusterRecord.describe()``."""
    values: dict[str, float]
    """The factors in force (``calibration.environment.FACTORS``), the profile's for the others."""
    profile_values: dict[str, float]
    origin: str
    """``cluster``: the cluster's record; ``model record``: the one a per-model record was fitted on (it takes
    precedence, ``session.Session.environment``)."""
    logs: tuple[str, ...] = ()
    date: str = ""
    store: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"record": self.record, "values": dict(self.values), "profile_values": dict(self.profile_values),
                "origin": self.origin, "logs": list(self.logs), "date": self.date, "store": self.store}


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
    """(low, high) tokens/s/GPU: per side the wider of the sensitivity band (the efficiency parameters' ranges and the
    measurement spread) and the measured error of the projection's class (``band_evidence``); a calibration record's
    band when ``calibration`` is set."""
    band_evidence: Evidence | None = None
    """The published runs the band's measured error rests on (``projection.error_bands.Evidence``: class, level, n;
    level ``none``: no published run of this class, the band is the sensitivity band); None without a band."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    calibration: CalibrationApplied | None = None
    """Set when a calibration record from real runs corrected the figures above (``stages`` and ``timeline`` too:
    the simulated schedule scaled by ``CalibrationApplied.timeline_scale``, so every figure adds up to the step)."""
    cluster_calibration: ClusterApplied | None = None
    """Set when the projection ran on a cluster record's environment (``system`` carries its efficiencies)."""

    @property
    def step_time_ms(self) -> float:
        return self.step_time_s * 1e3


@dataclass(frozen=True, kw_only=True)
class StageIdle:
    """One pipeline rank's step: busy (compute + exposed layer comm), idle in the pipeline, the step tail."""

    rank: int
    busy_s: float
    idle_s: float
    """Makespan minus busy: the schedule's bubble and send/recv waits of this rank."""
    tail_s: float
    """After the makespan: exposed DP reduction, optimizer step, parameter gather (the same on every rank)."""
    step_s: float

    @property
    def idle_fraction(self) -> float:
        return self.idle_s / self.step_s if self.step_s > 0 else 0.0


def stage_idle(projection: Projection) -> list[StageIdle]:
    """Per-stage busy / idle (the breakdown's bubble is the busiest rank's only)."""
    step = projection.step_time_s
    makespan = max((s.finish_s for s in projection.stages), default=0.0)
    if projection.timeline:
        makespan = max(makespan, max(e.end for e in projection.timeline))
    tail = max(0.0, step - makespan)
    return [StageIdle(rank=s.rank, busy_s=s.busy_s, idle_s=max(0.0, makespan - s.busy_s), tail_s=tail, step_s=step)
            for s in projection.stages]


IMBALANCE_THRESHOLD = 0.05
"""Idle-share spread (most idle stage minus least idle, as shares of the step) above which the stages are
flagged as imbalanced. With equal stages every rank of a 1F1B or interleaved schedule waits the same
(p - 1) warm-up / cool-down slots (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
on GPU Clusters", section 2.2.1), so the spread is ~0; 5 % of the step is what the busiest stage makes
every other one wait, and about what one decoder layer of a 16-layer stage costs (1/16 ~ 6 %)."""


@dataclass(frozen=True, kw_only=True)
class Imbalance:
    """How unevenly the pipeline stages are loaded: the idle-share spread and what to do about it."""

    spread: float
    """Most idle stage's share of the step minus the least idle one's."""
    busiest_rank: int
    """The least idle stage: the one the others wait for."""
    idlest_rank: int
    flagged: bool
    """``spread`` above the threshold."""
    fix: str
    """The suggested change: fewer layers on the stage the others wait for, or more on the one that waits for
    them, whichever stands further from the median idle share (uneven first/last stage layers or a layout)."""

    @property
    def message(self) -> str:
        head = "imbalanced" if self.flagged else "balanced"
        return (f"pipeline stages {head}: idle shares differ by {self.spread:.1%} of the step (stage "
                f"{self.busiest_rank} busiest, stage {self.idlest_rank} most idle)"
                + (f"; try {self.fix}" if self.flagged else ""))


def imbalance(projection: Projection, threshold: float = IMBALANCE_THRESHOLD) -> Imbalance | None:
    """The stages' imbalance (None with one pipeline stage)."""
    idle = stage_idle(projection)
    if len(idle) < 2:
        return None
    busiest = min(idle, key=lambda s: (s.idle_fraction, s.rank))
    idlest = max(idle, key=lambda s: (s.idle_fraction, -s.rank))
    shares = sorted(s.idle_fraction for s in idle)
    median = shares[len(shares) // 2]
    overloaded = median - busiest.idle_fraction >= idlest.idle_fraction - median  # which end stands out
    outlier = busiest if overloaded else idlest
    stage = next(s for s in projection.stages if s.rank == outlier.rank)
    where = ("the last stage, which also runs the output layer and loss" if stage.output else
             "the first stage, which also holds the embedding" if stage.embedding else f"stage {outlier.rank}")
    knobs = ("decoder_last_pipeline_num_layers, account_for_loss_in_pipeline_split or a "
             "pipeline_model_parallel_layout" if stage.output else
             "decoder_first_pipeline_num_layers, account_for_embedding_in_pipeline_split or a "
             "pipeline_model_parallel_layout" if stage.embedding else "a pipeline_model_parallel_layout")
    fix = f"{'fewer' if overloaded else 'more'} layers on {where} ({knobs})"
    fix += "; `tune` searches these splits on its `split` axis"
    spread = idlest.idle_fraction - busiest.idle_fraction
    return Imbalance(spread=spread, busiest_rank=busiest.rank, idlest_rank=idlest.rank,
                     flagged=spread > threshold, fix=fix)
