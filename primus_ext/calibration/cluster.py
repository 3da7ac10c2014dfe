"""A cluster record: the environment of one cluster (``calibration.environment``), fitted on real runs of any model.

    primus-ext calibrate RECIPE LOG --scope cluster [--cluster-label NAME]      # fit, store (cli.calibrate_cluster)
    records = load_cluster_records(store, profile="mi355x")
    found, note = pick_cluster_record(records, label="")      # the record a projection on that cluster applies

**Same cluster** means the same hardware profile (``--cluster``, e.g. ``mi355x``: the GPU type and its datasheet) and
the same cluster label (``--cluster-label`` / ``$PRIMUS_EXT_CLUSTER_LABEL``; none given: the unlabelled record) in
the same timing store. A record applies to every model projected there, at any node count: its scale-up factor is a
property of each node's fabric, its scale-out factor (fitted only from runs that cross nodes) of the network. One
record per profile and label; a new calibration replaces it when it rests on at least as many distinct
configurations (``better_evidenced``), else only with ``--force``.

Records are never applied by ``validate`` (its development set judges the profiles), nor with ``--uncalibrated``.
Precedence with per-model records: ``session.Session.environment``.
"""

from __future__ import annotations

import math
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from primus_ext.calibration.correction import RecordKept
from primus_ext.calibration.environment import FACTORS, describe_value, physical_range
from primus_ext.specs import GPUSpec

CLUSTER_RECORD_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class ClusterRun:
    """One log behind a cluster record: its model, the step it measured, the steps projected before and after."""

    log: str
    model: str
    configuration: str
    measured_s: float
    before_s: float
    after_s: float
    spread: float = 0.0
    iterations: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"log": self.log, "model": self.model, "configuration": self.configuration,
                "measured_s": self.measured_s, "before_s": self.before_s, "after_s": self.after_s,
                "spread": self.spread, "iterations": self.iterations}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterRun:
        out = cls(log=str(data["log"]), model=str(data["model"]), configuration=str(data["configuration"]),
                  measured_s=float(data["measured_s"]), before_s=float(data["before_s"]),
                  after_s=float(data["after_s"]), spread=float(data.get("spread", 0.0)),
                  iterations=int(data.get("iterations", 0)))
        if not all(math.isfinite(x) and x > 0 for x in (out.measured_s, out.before_s, out.after_s)):
            raise ValueError(f"not a run's steps: {data!r}")
        return out


@dataclass(frozen=True, kw_only=True)
class ClusterRecord:
    profile: str
    """Hardware profile name (``SystemSpec.name``): with ``label``, which cluster."""
    gpu: str
    """The profile's GPU (``GPUSpec.name``)."""
    label: str = ""
    values: dict[str, float] = field(default_factory=dict)
    """The fitted factors (``environment.FACTORS``) and their values; the profile's for the others."""
    profile_values: dict[str, float] = field(default_factory=dict)
    """What the profile had for each fitted factor (to say what moved)."""
    standard_errors: dict[str, float] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)
    """Factors held at the profile, and why."""
    rule: str = ""
    runs: tuple[ClusterRun, ...] = ()
    costs: str = "analytic"
    """Layer costs of the projections fitted (``analytic`` or ``measured``, as ``CalibrationRecord.costs``)."""
    date: str = ""
    host: str = ""
    notes: tuple[str, ...] = ()

    @property
    def configurations(self) -> int:
        return len({r.configuration for r in self.runs})

    def where(self) -> str:
        """``mi355x, unlabelled`` / ``mi355x, label 'rack-3'``."""
        return f"{self.profile}, " + (f"label '{self.label}'" if self.label else "unlabelled")

    def factors_text(self, gpu: GPUSpec | None = None) -> str:
        """``scale-up links 0.0306 (16.5 GB/s per GPU; profile 0.8428)``, one per fitted factor."""
        parts = []
        for name in FACTORS:
            if name not in self.values:
                continue
            value, was = self.values[name], self.profile_values.get(name)
            text = describe_value(name, value, gpu) if gpu is not None else f"{name} {value:.4g}"
            parts.append(text + (f" (profile {was:.4g})" if was is not None and name != "kernels" else ""))
        return ", ".join(parts) or "nothing fitted"

    def describe(self) -> str:
        """``cluster mi355x, unlabelled: 1 log of llama3.2_1B (2026-12-06)``."""
        models = sorted({r.model for r in self.runs})
        n = len(self.runs)
        return (f"cluster {self.where()}: {n} log{'s' if n != 1 else ''} of {', '.join(models) or 'unnamed models'} "
                f"({self.date[:10] or 'undated'})")

    def source(self, gpu: GPUSpec | None = None) -> str:
        """Which logs, when, the factors: ``a.log (2026-12-06): scale-up links 0.0306 (...)``."""
        names = ", ".join(Path(r.log).name or r.log for r in self.runs[:3]) + (
            f" and {len(self.runs) - 3} more" if len(self.runs) > 3 else "")
        return f"{names or 'unnamed logs'} ({self.date[:10] or 'undated'}): {self.factors_text(gpu)}"

    def evidence(self) -> str:
        n = self.configurations
        return f"{len(self.runs)} log(s), {n} configuration{'s' if n != 1 else ''}"

    def to_dict(self) -> dict[str, Any]:
        return {"version": CLUSTER_RECORD_VERSION, "scope": "cluster", "profile": self.profile, "gpu": self.gpu,
                "label": self.label, "values": dict(self.values), "profile_values": dict(self.profile_values),
                "standard_errors": dict(self.standard_errors), "held": dict(self.held), "rule": self.rule,
                "runs": [r.to_dict() for r in self.runs], "costs": self.costs, "date": self.date, "host": self.host,
                "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], gpu: GPUSpec | None = None) -> ClusterRecord:
        """Read a stored record; every value checked against its physical range (on ``gpu`` when given)."""
        if data.get("version") != CLUSTER_RECORD_VERSION:
            raise ValueError(f"cluster record version {data.get('version')!r}, this version reads "
                             f"{CLUSTER_RECORD_VERSION}")
        values = {str(k): float(v) for k, v in dict(data.get("values", {})).items()}
        for name, value in values.items():
            if name not in FACTORS or not math.isfinite(value):
                raise ValueError(f"not a cluster factor: {name} = {value!r}")
            if gpu is not None:
                low, high = physical_range(name, gpu)
                if not low - 1e-9 <= value <= high + 1e-9:
                    raise ValueError(f"{name} = {value:.4g} outside its physical range [{low:.4g}, {high:.4g}]")
        return cls(profile=str(data["profile"]), gpu=str(data["gpu"]), label=str(data.get("label", "")),
                   values=values, profile_values={str(k): float(v) for k, v in
                                                  dict(data.get("profile_values", {})).items()},
                   standard_errors={str(k): float(v) for k, v in dict(data.get("standard_errors", {})).items()},
                   held={str(k): str(v) for k, v in dict(data.get("held", {})).items()},
                   rule=str(data.get("rule", "")), runs=tuple(ClusterRun.from_dict(r) for r in data.get("runs", ())),
                   costs=str(data.get("costs", "analytic")), date=str(data.get("date", "")),
                   host=str(data.get("host", "")), notes=tuple(str(x) for x in data.get("notes", ())))


def better_evidenced(new: ClusterRecord, old: ClusterRecord) -> bool:
    """``new`` may replace ``old`` (same profile and label): it rests on at least as many distinct configurations."""
    return new.configurations >= old.configurations


def save_cluster_record(record: ClusterRecord, store_path: str | os.PathLike[str] | None = None, *,
                        replace: bool = False) -> Path:
    """Store ``record`` (the profile and label's previous one replaced when ``better_evidenced`` or ``replace``);
    returns the store's path. Raises ``RecordKept`` (nothing written) otherwise."""
    from primus_ext.measure.store import TimingStore

    with TimingStore(store_path, device="any", versions="any") as store:
        for data in store.clusters(profile=record.profile):
            try:
                old = ClusterRecord.from_dict(data)
            except (KeyError, TypeError, ValueError):
                continue  # unreadable (load_cluster_records warns): replaced
            if old.label == record.label and not replace and not better_evidenced(record, old):
                raise RecordKept(
                    f"{store.path} holds a cluster record of {record.where()} resting on more configurations "
                    f"({old.source()}; {old.evidence()}) than these logs ({record.evidence()}): kept, this one not "
                    "stored. Give all the logs together (they are fitted jointly), or --force to replace it; "
                    "`primus-ext calibrate --forget --scope cluster` removes it")
        store.record_cluster(profile=record.profile, label=record.label, record=record.to_dict(), date=record.date,
                             host=record.host or socket.gethostname())
        return store.path


def load_cluster_records(store_path: str | os.PathLike[str] | None = None, *, profile: str | None = None,
                         gpu: GPUSpec | None = None) -> list[ClusterRecord]:
    """The cluster records in a store (none when it does not exist: nothing is created); an unreadable one is
    skipped with a warning, never applied half."""
    from primus_ext.measure.store import TimingStore, default_store_path

    path = Path(store_path) if store_path is not None else default_store_path()
    if not path.exists() or path.suffix == ".jsonl":
        return []
    out = []
    with TimingStore(path, device="any", versions="any", reading=True) as store:  # never changes the file
        for data in store.clusters(profile=profile):
            try:
                out.append(ClusterRecord.from_dict(data, gpu))
            except (KeyError, TypeError, ValueError) as err:
                print(f"warning: {path}: a cluster record is not readable ({err}); skipped", file=sys.stderr)
    return out


def forget_cluster_records(store_path: str | os.PathLike[str] | None = None, *, profile: str | None = None,
                           label: str | None = None) -> int:
    """Remove cluster records (all, one profile's, or one profile and label's); returns how many."""
    from primus_ext.measure.store import TimingStore, default_store_path

    path = Path(store_path) if store_path is not None else default_store_path()
    if not path.exists():
        return 0
    with TimingStore(path, device="any", versions="any") as store:
        return store.forget_clusters(profile=profile, label=label)


def pick_cluster_record(records: Sequence[ClusterRecord], *, profile: str, label: str = "",
                        store: str = "") -> tuple[ClusterRecord | None, str]:
    """The record of ``profile`` and ``label`` (``""``: the unlabelled one), and a note when none applies but some
    exist (other labels)."""
    mine = [r for r in records if r.profile == profile]
    for r in mine:
        if r.label == label:
            return r, ""
    others = sorted(r.label or "(unlabelled)" for r in mine)
    where = f" in {store}" if store else ""
    if not others:
        return None, (f"no cluster record of {profile} labelled '{label}'{where}: none applied" if label else "")
    if label:
        return None, (f"no cluster record of {profile} labelled '{label}'{where} (there: {', '.join(others)}): "
                      "none applied")
    return None, (f"cluster records of {profile} labelled {', '.join(others)}{where} exist; none applied without "
                  "--cluster-label NAME (or $PRIMUS_EXT_CLUSTER_LABEL)")
