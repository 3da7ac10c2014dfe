"""Validate the hybrid method: rows projected from measured layers in a timing store.

Usage::

    store = TimingStore("h200.sqlite", device="NVIDIA H200", versions="any")
    report = validate_runs(runs, measured_projector(store, load_gpu("h200")), label="hybrid")

A row is projected with the store's measured layer costs (communication, pipeline schedule and
optimizer stay analytic, as in ``primus-ext project --store``) when every layer kind of its per-rank
shapes has an entry; otherwise it is refused with the kinds the store lacks, never filled in.

Carry-over (``CarriedCosts``), labelled in each cost's ``source``: a row on another GPU of the measured
GPU's family (H100 rows from an H200 store) and an FP8 shape measured in bf16 (no transformer-engine on
the measuring GPU) take the measured time times the roofline's ratio ``analytic(shape, row GPU) /
analytic(shape as measured, measuring GPU)``, per pass. Within a family the tensor cores and clocks
are the same (H100 and H200 SXM: same GH100 die, datasheets), so the ratio moves memory-bound parts by
HBM bandwidth and FP8 GEMMs by the FP8 peak; rows of another family are refused.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from primus_ext.errors import PrimusExtError
from primus_ext.measure.store import TimingStore
from primus_ext.model.costs import CostProvider, LayerCost
from primus_ext.model.rank_shape import RankShape, rank_shapes
from primus_ext.model.roofline import analytic_cost
from primus_ext.specs import GPUSpec
from primus_ext.validate.run import Projector
from primus_ext.validate.runs import RunRow

SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file (sqlite.org/fileformat.html, 1.3)."""
_PRECISION_OF_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "fp8": "fp8"}
"""A store entry's ``dtype`` (torch's name, or ``fp8`` under TE) as a ``RankShape.precision``."""


def _ratio(new: float | None, old: float | None) -> float:
    return new / old if new and old else 1.0


@dataclass(frozen=True, kw_only=True)
class CarriedCosts:
    """``CostProvider``: measured entries of ``store`` (taken on ``measured_on``) carried to ``target``.

    ``measured_dtype(shape)`` names the dtype an entry ran in (``"bf16"`` for an FP8 shape measured
    without transformer-engine), ``None`` when the store has no entry.
    """

    store: CostProvider
    measured_on: GPUSpec
    target: GPUSpec
    measured_dtype: Callable[[RankShape], str | None] | None = None
    """Default: every entry ran in the shape's own precision."""

    def cost(self, shape: RankShape) -> LayerCost | None:
        measured = self.store.cost(shape)
        if measured is None:
            return None
        dtype = self.measured_dtype(shape) if self.measured_dtype else shape.precision
        as_run = replace(shape, precision=dtype) if dtype and dtype != shape.precision else shape
        same_gpu = self.target.name == self.measured_on.name  # a profile and its CSV twin differ in sources
        if as_run == shape and same_gpu:
            return measured
        old = analytic_cost(as_run, self.measured_on)
        new = analytic_cost(shape, self.measured_on if same_gpu else self.target)
        how = []
        if not same_gpu:
            how.append(f"to {self.target.name}")
        if as_run != shape:
            how.append(f"{dtype} measurement to {shape.precision}")
        bwd = measured.bwd_ms * _ratio(new.bwd_ms, old.bwd_ms)
        return replace(
            measured,
            fwd_ms=measured.fwd_ms * _ratio(new.fwd_ms, old.fwd_ms),
            bwd_ms=bwd,
            wgrad_ms=None if measured.wgrad_ms is None else measured.wgrad_ms * _ratio(new.wgrad_ms, old.wgrad_ms),
            recompute_ms=measured.recompute_ms * _ratio(new.recompute_ms, old.recompute_ms),
            source=f"{measured.source} carried {' and '.join(how)} by the analytic ratio",
        )


def store_dtype(store: TimingStore) -> Callable[[RankShape], str | None]:
    """``measured_dtype`` for a ``TimingStore``: the dtype of the entry ``store.cost`` returns."""

    def dtype(shape: RankShape) -> str | None:
        entry = store.entry(shape)
        return None if entry is None else _PRECISION_OF_DTYPE.get(str(entry["dtype"]), shape.precision)

    return dtype


def measured_projector(store: CostProvider, measured_on: GPUSpec) -> Projector:
    """A projector over ``store``'s measured layers (see module docstring); refuses uncovered rows."""
    from primus_ext.projection import evaluate

    def project(run: RunRow) -> float:
        assert run.model is not None and run.execution is not None and run.system is not None
        gpu = run.system.gpu
        if gpu.name != measured_on.name and (not gpu.family or gpu.family != measured_on.family):
            raise PrimusExtError(f"layers measured on {measured_on.name} ({measured_on.family or 'no family'}): "
                                 f"no carry-over to {gpu.name} ({gpu.family or 'no family'})")
        dtype = store_dtype(store) if isinstance(store, TimingStore) else None
        costs = CarriedCosts(store=store, measured_on=measured_on, target=gpu, measured_dtype=dtype)
        missing = sorted({s.kind for s in rank_shapes(run.model, run.execution).values() if costs.cost(s) is None})
        if missing:
            raise PrimusExtError(f"no measured {', '.join(missing)} layer in the store for this configuration")
        return evaluate(run.model, run.execution, run.system, costs).tokens_per_s_per_gpu

    return project


def _load(file: Path, device: str) -> TimingStore:
    with file.open("rb") as fh:
        sqlite = fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    store = TimingStore(file if sqlite else ":memory:", device=device, versions="any")
    if not sqlite:
        store.import_(file)
    return store


def open_store(path: str, device: str | None = None) -> TimingStore:
    """A ``TimingStore`` over ``path`` (an SQLite store, or the JSON lines of ``bench --export`` read into
    memory), any library versions, on ``device`` (default: the one device whose measured entries it holds)."""
    file = Path(path)
    if not file.is_file():
        raise PrimusExtError(f"--store {path}: no such file (a timing store from `primus-ext bench --out` or "
                             "its `--export`)")
    try:
        probe = _load(file, device or "")
        devices = sorted({r["device"] for r in probe.layer_rows() if r["status"] == "ok"})
        probe.close()
    except (ValueError, KeyError, TypeError, AttributeError, sqlite3.Error, UnicodeDecodeError) as err:
        raise PrimusExtError(f"--store {path}: not a timing store ({type(err).__name__}: {err})") from None
    if not devices:
        raise PrimusExtError(f"--store {path}: holds no measured layer")
    if device is None and len(devices) > 1:
        raise PrimusExtError(f"--store {path}: layers of {len(devices)} devices ({', '.join(devices)}): "
                             "name one with --store-device")
    if device is not None and device not in devices:
        raise PrimusExtError(f"--store-device {device!r}: the store holds {', '.join(devices)}")
    return _load(file, device or devices[0])


def profile_of(device: str) -> str | None:
    """The hardware profile a CUDA device name names (``"NVIDIA H200"`` -> ``h200``), if exactly one."""
    import re

    from primus_ext.hardware import list_profiles

    words = set(re.split(r"[^a-z0-9]+", device.lower()))
    found = [p for p in list_profiles() if p in words]
    return found[0] if len(found) == 1 else None
