"""What ``read_log`` returns: typed, frozen records of one training log (no parsing here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from primus_ext.errors import PrimusExtError

LogFormat = Literal["megatron", "primus", "megatron-bridge", "nemo"]


class LogError(PrimusExtError):
    """A training log that cannot be read; the message names what was missing."""


@dataclass(frozen=True, kw_only=True)
class Iteration:
    """One logged iteration (deduplicated: a line printed twice or by several ranks counts once)."""

    index: int
    """The iteration number as printed (NeMo counts from 0, Megatron from 1)."""
    total: int | None = None
    """The run's ``train_iters`` as printed after the slash, ``None`` when absent."""
    step_time_s: float
    """Seconds per iteration as printed (Megatron: averaged over the log interval; Primus: the instantaneous one)."""
    tflops_per_gpu: float | None = None
    """Printed TFLOP/s per GPU; ``None`` when absent or impossible (then in ``TrainingLog.flags``)."""
    tokens_per_s_per_gpu: float | None = None
    global_batch_size: int | None = None
    line: int
    """1-based line number in the file."""
    averaged_over: int = 1
    """Iterations the printed time averages (the run's ``log_interval`` when known), else 1."""


@dataclass(frozen=True, kw_only=True)
class MemoryReport:
    """Megatron's ``[Rank R] (after N iterations) memory (MB) | allocated | max allocated | reserved | max reserved``.

    MB = 2**20 bytes (megatron/training/utils.py ``report_memory``: ``mega_bytes = 1024.0 * 1024.0``)."""

    rank: int
    after_iterations: int | None
    allocated_mb: float | None
    max_allocated_mb: float | None
    reserved_mb: float | None
    max_reserved_mb: float | None
    line: int


@dataclass(frozen=True, kw_only=True)
class LogFlag:
    """An impossible or suspicious value found in the log (not used for the figures)."""

    line: int
    field: str
    value: str
    why: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.field} = {self.value}: {self.why}"


@dataclass(frozen=True, kw_only=True)
class StepStats:
    """Step time of the stable segment (see ``primus_ext.logs.stats`` for the rules)."""

    median_s: float
    spread: float
    """Robust relative spread: interquartile range / median (range / median below 4 iterations)."""
    n: int
    first: int
    """Index of the first iteration used."""
    last: int
    excluded: tuple[tuple[int, str], ...] = ()
    """(iteration, reason) of every iteration of the last run left out: warm-up, non-positive, spike."""
    averaged: bool = False
    """The lines used each average several iterations including warm-up (e.g. one line at log_interval=10)."""
    from_warmup: bool = False
    """No iteration after warm-up has a positive time: the figure is of warm-up iterations (an upper bound)."""


Precision = Literal["fp4", "fp8", "bf16", "fp16", "fp32"]


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """What the run's configuration dump states (``logs.dump``: Megatron-LM, Megatron-Bridge, NeMo 2, Primus);
    each ``None`` where the log does not say it."""

    num_layers: int | None = None
    hidden_size: int | None = None
    num_attention_heads: int | None = None
    ffn_hidden_size: int | None = None
    precision: Precision | None = None
    """The compute precision: ``fp8`` when FP8 GEMMs are on (over a bf16 base), else the base's."""
    seq_length: int | None = None
    """The trained sequence length (Megatron-Bridge: the dataset's, not the model's maximum)."""
    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    context_parallel: int | None = None
    expert_parallel: int | None = None
    data_parallel: int | None = None
    world_size: int | None = None


@dataclass(frozen=True, kw_only=True)
class TrainingLog:
    format: LogFormat
    iterations: tuple[Iteration, ...]
    """The last run's iterations, in order."""
    memory: tuple[MemoryReport, ...]
    flags: tuple[LogFlag, ...]
    stats: StepStats
    tokens_per_s_per_gpu: float | None = None
    """Median over the stable segment where printed (impossible values excluded and flagged)."""
    tflops_per_gpu: float | None = None
    framework_version: str | None = None
    restarts: int = 0
    """How many times iteration numbering restarted in the file (the last run is the one read)."""
    config: dict[str, str] = field(default_factory=dict)
    """The configuration dump under Megatron's argument names (``name ....... value``; Megatron-Bridge's and NeMo's
    dumps translated, ``logs.dump``) when the log has one."""
    run: RunConfig = field(default_factory=RunConfig)
    """The configuration the run states, typed (layers, hidden, heads, ffn, precision, sequence, batches, layout,
    world size)."""
    global_batch_size: int | None = None
    seq_length: int | None = None
    devices: tuple[str, ...] = ()
    """GPU device names the log prints (``NVIDIA H100 80GB HBM3``, ``AMD Instinct MI300X``: nvidia-smi, rocm-smi,
    torch), distinct, in order of appearance; empty when it names none."""

    @property
    def peak_reserved_bytes(self) -> int | None:
        vals = [m.max_reserved_mb for m in self.memory if m.max_reserved_mb is not None]
        return round(max(vals) * 2**20) if vals else None

    @property
    def peak_allocated_bytes(self) -> int | None:
        vals = [m.max_allocated_mb for m in self.memory if m.max_allocated_mb is not None]
        return round(max(vals) * 2**20) if vals else None
