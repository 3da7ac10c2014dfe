"""A calibration record: what one or more real runs of a workload measured, what was projected, the correction.

Stored in the timing store (``TimingStore.record_calibration``), one per workload; ``load_records`` reads them
back (a record the store holds but this version cannot read is skipped with a warning, never applied half).
``save_record`` replaces a workload's record only with a better-evidenced one (``better_evidenced``: at least as
many steady iterations and no larger spread); records of other workloads stay side by side.
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

from primus_ext.calibration.correction import Correction, RecordKept
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
    iterations: int = 0
    """Steady-state iterations the measured step is the median of (0: projected side, or a record older than it)."""

    def to_dict(self) -> dict[str, Any]:
        return {"step_s": self.step_s, "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
                "tflops_per_gpu": self.tflops_per_gpu, "peak_bytes": self.peak_bytes, "spread": self.spread,
                "iterations": self.iterations}

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
        iterations = data.get("iterations", 0)
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
            raise ValueError("iterations must be a whole number >= 0")
        return cls(step_s=step, tokens_per_s_per_gpu=num("tokens_per_s_per_gpu"), tflops_per_gpu=num("tflops_per_gpu"),
                   peak_bytes=num("peak_bytes"), spread=num("spread") or 0.0, iterations=iterations)


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
    environment: dict[str, Any] | None = None
    """The cluster record (``calibration.cluster.ClusterRecord.to_dict()``) the compared projections ran on, ``None``:
    the profile as shipped. The record is applied on that same environment (``session.Session.environment``)."""

    def describe(self) -> str:
        """One line: what the record is and where it came from."""
        runs = f"{len(self.logs)} log{'s' if len(self.logs) != 1 else ''}"
        framework = f", {self.framework}" if self.framework else ""
        return f"{runs} of {self.workload.label} ({self.date[:10] or 'undated'}{framework})"

    @property
    def iterations(self) -> int:
        """Steady-state iterations behind the record (all its runs)."""
        return sum(m.iterations for m in self.measured)

    def evidence(self) -> str:
        """``3 runs, 24 steady iterations, spread 1.2 %``."""
        runs = len(self.measured)
        return (f"{runs} run{'s' if runs != 1 else ''}, {self.iterations or 'unrecorded'} steady iterations, spread "
                f"{self.correction.spread:.1%}")

    def source(self) -> str:
        """Which logs, when, the factor: ``train.log (2026-12-06): kernels x1.180``."""
        names = ", ".join(Path(p).name or p for p in self.logs[:3]) + (
            f" and {len(self.logs) - 3} more" if len(self.logs) > 3 else "")
        when = self.date[:10] or "undated"
        return f"{names or 'unnamed logs'} ({when}): kernels x{self.correction.kernel_factor:.3f}"

    def to_dict(self) -> dict[str, Any]:
        return {"version": RECORD_VERSION, "workload": self.workload.to_dict(), "correction": self.correction.to_dict(),
                "measured": [m.to_dict() for m in self.measured], "projected": [p.to_dict() for p in self.projected],
                "logs": list(self.logs), "framework": self.framework, "cluster": self.cluster, "costs": self.costs,
                "date": self.date, "host": self.host, "notes": list(self.notes),
                **({"environment": self.environment} if self.environment is not None else {})}

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
                   notes=tuple(str(x) for x in data.get("notes", ())),
                   environment=_environment(data.get("environment")))


def _environment(data: Any) -> dict[str, Any] | None:
    """A model record's basis environment, checked readable (``ClusterRecord.from_dict``) or ``ValueError``."""
    if data is None:
        return None
    from primus_ext.calibration.cluster import ClusterRecord

    if not isinstance(data, dict):
        raise ValueError("environment is not a cluster record")
    ClusterRecord.from_dict(data)
    return data


def costs_of(sources: dict[str, str]) -> str:
    """``analytic`` when every layer kind was priced by the roofline, else ``measured``."""
    return "analytic" if all(src == "analytic" for src in sources.values()) else "measured"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def better_evidenced(new: CalibrationRecord, old: CalibrationRecord) -> bool:
    """``new`` may replace ``old`` (the same workload): at least as many steady iterations, no larger spread."""
    return new.iterations >= old.iterations and new.correction.spread <= old.correction.spread


def save_record(record: CalibrationRecord, store_path: str | os.PathLike[str] | None = None, *,
                replace: bool = False) -> Path:
    """Store ``record`` in the timing store (default: the user's); returns the store's path. Raises ``RecordKept``
    (nothing written) when the store holds a record of the same workload that ``record`` is not better evidenced
    than, unless ``replace``."""
    from primus_ext.measure.store import TimingStore

    key = record.workload.key()
    with TimingStore(store_path, device="any", versions="any") as store:
        for data in store.calibrations(model=record.workload.model, gpu=record.workload.gpu):
            try:
                old = CalibrationRecord.from_dict(data)
            except (KeyError, TypeError, ValueError):
                continue  # unreadable (load_records warns): replaced
            if old.workload.key() == key and not replace and not better_evidenced(record, old):
                raise RecordKept(
                    f"{store.path} holds a better-evidenced record of this workload ({old.source()}; "
                    f"{old.evidence()}) than these runs ({record.source()}; {record.evidence()}): kept, this one not "
                    "stored. A record is replaced only by runs with at least as many steady iterations and no larger "
                    "spread; `primus-ext calibrate --forget RECIPE` removes the old one, --force replaces it")
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
