"""The memory model's error on runs that ran: the evidence behind ``model.memory.MEMORY_ERROR`` (the launch gate's
"within the model's error" band, exit 4).

    python benchmarks/memory_error.py      # every piece of evidence, the per-component table, the derived error

Two kinds of evidence, both about runs that ran:

* ``measured peak``: a run whose device memory was logged (Primus prints ``hip mem usage``, device used = total -
  free, beside Megatron's allocator line): projected / measured - 1, of either sign;
* ``ran``: a published run the model projects over its GPU's capacity: it ran, so the model over-projects it by at
  least projected / capacity - 1.

``derived_error`` is the largest of their magnitudes, rounded up to half a percent: a projection over the capacity
by no more is not a verdict the model can give. Pure but for reading the files it is given.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from primus_ext.model.memory import estimate_memory
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec
from primus_ext.validate.archs import read_archs
from primus_ext.validate.runs import read_runs

ROUNDING = 0.005
"""``derived_error`` rounds up to half a percent."""
EXCLUDED_ROWS = {
    82: "GPT-OSS-120B H100: the source's GBS is not MBS x DP x GA (an inconsistent row)",
    159: "NeMo AutoModel (FSDP2): checkpointing settings not stated, configs not published",
    160: "NeMo AutoModel (FSDP2): checkpointing settings not stated, configs not published",
    161: "NeMo AutoModel (FSDP2): checkpointing settings not stated, configs not published",
    162: "NeMo AutoModel (FSDP2): checkpointing settings not stated, configs not published",
}
"""``measured_throughput.csv`` rows (0-based data rows) left out of the evidence, with the reason
(benchmarks/RESULTS.md, "Memory projection and the OOM pre-filter")."""
HIP_USED = re.compile(r"hip mem usage/free/total/usage_ratio: ([\d.]+)GB")
"""Primus's iteration line (print_rank_last_patches.py): ``hip mem usage`` in GiB (``/ 1024 ** 3``)."""


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """One run that ran, against the memory model."""

    name: str
    kind: Literal["measured peak", "ran"]
    projected_bytes: float
    reference_bytes: float
    """The measured device peak (``measured peak``) or the GPU's capacity (``ran``)."""

    @property
    def error(self) -> float:
        """projected / reference - 1: the model's error (``measured peak``), a lower bound of its over-projection
        (``ran``)."""
        return self.projected_bytes / self.reference_bytes - 1.0


def device_used_bytes(log_text: str) -> list[float]:
    """The ``hip mem usage`` figures of a Primus log (device used, bytes), each change once, in order (Primus prints
    every iteration line twice, and the figure stays once the allocator has reserved its peak)."""
    out: list[float] = []
    for m in HIP_USED.finditer(log_text):
        value = float(m.group(1)) * 2**30
        if not out or value != out[-1]:
            out.append(value)
    return out


def measured(name: str, model: ModelSpec, execution: ExecutionSpec, system: SystemSpec, peak_bytes: float) -> Evidence:
    """A run whose device peak (``peak_bytes``) is known."""
    mem = estimate_memory(model, execution, system)
    return Evidence(name=name, kind="measured peak", projected_bytes=mem.peak_bytes, reference_bytes=peak_bytes)


def ran(name: str, model: ModelSpec, execution: ExecutionSpec, system: SystemSpec) -> Evidence | None:
    """A run that ran: evidence when the model projects it over its capacity, else ``None``."""
    mem = estimate_memory(model, execution, system)
    if mem.peak_bytes <= mem.capacity_bytes:
        return None
    return Evidence(name=name, kind="ran", projected_bytes=mem.peak_bytes, reference_bytes=mem.capacity_bytes)


def published_runs(measurements: str | Path, archs: str | Path) -> list[Evidence]:
    """Every projectable row of ``measurements`` (each ran) that the model projects over its GPU's capacity, but
    ``EXCLUDED_ROWS``."""
    out = []
    for run in read_runs(measurements, read_archs(archs)):
        if run.model is None or run.index in EXCLUDED_ROWS:
            continue
        name = f"row {run.index} {run.model_name} {run.gpu} x {run.num_gpus} {run.precision_label}"
        found = ran(name, run.model, run.execution, run.system)
        if found is not None:
            out.append(found)
    return out


def derived_error(evidence: list[Evidence]) -> float:
    """The largest |error| of ``evidence``, rounded up to ``ROUNDING``."""
    worst = max(abs(e.error) for e in evidence)
    return math.ceil(worst / ROUNDING - 1e-9) * ROUNDING
