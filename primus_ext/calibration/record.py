"""A calibration record: what one or more real runs of a workload measured, what was projected, the correction.

Stored in the timing store (``TimingStore.record_calibration``), one per workload; ``load_records`` reads them
back (a record the store holds but this version cannot read is skipped with a warning, never applied half).
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primus_ext.calibration.correction import Correction
from primus_ext.calibration.workload import Workload

RECORD_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class RunFigures:
    """One side (measured or projected) of one run: step time, throughput, peak memory of the compared rank."""

    step_s: float
    tokens_per_s_per_gpu: float | None = None
    tflops_per_gpu: float | None = None
    peak_bytes: float | None = None
    spread: float = 0.0
    """Relative spread of the step time (measured side)."""

    def to_dict(self) -> dict[str, Any]:
        return {"step_s": self.step_s, "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
                "tflops_per_gpu": self.tflops_per_gpu, "peak_bytes": self.peak_bytes, "spread": self.spread}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunFigures:
        def num(name: str) -> float | None:
            value = data.get(name)
            if value is None:
                return None
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"{name} is not finite")
            return value

        step = num("step_s")
        if step is None or step <= 0:
            raise ValueError("step_s must be positive")
        return cls(step_s=step, tokens_per_s_per_gpu=num("tokens_per_s_per_gpu"), tflops_per_gpu=num("tflops_per_gpu"),
                   peak_bytes=num("peak_bytes"), spread=num("spread") or 0.0)


@dataclass(frozen=True, kw_only=True)
class CalibrationRecord:
    workload: Workload
    correction: Correction
    measured: tuple[RunFigures, ...]
    projected: tuple[RunFigures, ...]
    """Uncalibrated projections of the same runs, in the same order."""
    logs: tuple[str, ...]
    """The logs read (absolute paths as given)."""
    framework: str = ""
    """Framework / version as the logs state it (empty when they do not)."""
    cluster: str = ""
    """Hardware profile name the projection used."""
    costs: str = "analytic"
    """Layer costs of the projection it corrects: ``analytic`` (roofline only) or ``measured`` (some from the
    timing store). A record corrects only projections priced the same way (its factor is relative to them)."""
    date: str = ""
    host: str = ""
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: what the record is and where it came from."""
        runs = f"{len(self.logs)} log{'s' if len(self.logs) != 1 else ''}"
        framework = f", {self.framework}" if self.framework else ""
        return f"{runs} of {self.workload.label} ({self.date[:10] or 'undated'}{framework})"

    def to_dict(self) -> dict[str, Any]:
        return {"version": RECORD_VERSION, "workload": self.workload.to_dict(), "correction": self.correction.to_dict(),
                "measured": [m.to_dict() for m in self.measured], "projected": [p.to_dict() for p in self.projected],
                "logs": list(self.logs), "framework": self.framework, "cluster": self.cluster, "costs": self.costs,
                "date": self.date, "host": self.host, "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CalibrationRecord:
        if data.get("version") != RECORD_VERSION:
            raise ValueError(f"record version {data.get('version')!r}, this version reads {RECORD_VERSION}")
        return cls(workload=Workload.from_dict(data["workload"]), correction=Correction.from_dict(data["correction"]),
                   measured=tuple(RunFigures.from_dict(m) for m in data["measured"]),
                   projected=tuple(RunFigures.from_dict(p) for p in data["projected"]),
                   logs=tuple(str(x) for x in data.get("logs", ())), framework=str(data.get("framework", "")),
                   cluster=str(data.get("cluster", "")), costs=str(data.get("costs", "analytic")),
                   date=str(data.get("date", "")), host=str(data.get("host", "")),
                   notes=tuple(str(x) for x in data.get("notes", ())))


def costs_of(sources: dict[str, str]) -> str:
    """``analytic`` when every layer kind was priced by the roofline, else ``measured``."""
    return "analytic" if all(src == "analytic" for src in sources.values()) else "measured"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def save_record(record: CalibrationRecord, store_path: str | os.PathLike[str] | None = None) -> Path:
    """Store ``record`` in the timing store (default: the user's); returns the store's path."""
    from primus_ext.measure.store import TimingStore

    with TimingStore(store_path, device="any", versions="any") as store:
        store.record_calibration(key=record.workload.key(), model=record.workload.model, gpu=record.workload.gpu,
                                 precision=record.workload.precision, record=record.to_dict(), date=record.date,
                                 host=record.host or socket.gethostname())
        return store.path


def load_records(store_path: str | os.PathLike[str] | None = None, *, model: str | None = None,
                 gpu: str | None = None) -> list[CalibrationRecord]:
    """The calibration records in a store (none when the store does not exist: nothing is created)."""
    from primus_ext.measure.store import TimingStore, default_store_path

    path = Path(store_path) if store_path is not None else default_store_path()
    if not path.exists() or path.suffix == ".jsonl":
        return []
    out = []
    with TimingStore(path, device="any", versions="any", reading=True) as store:
        for data in store.calibrations(model=model, gpu=gpu):
            try:
                out.append(CalibrationRecord.from_dict(data))
            except (KeyError, TypeError, ValueError) as err:
                print(f"warning: {path}: a calibration record is not readable ({err}); skipped", file=sys.stderr)
    return out
