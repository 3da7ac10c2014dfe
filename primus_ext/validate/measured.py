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
from dataclasses import dataclass
from pathlib import Path

from primus_ext.errors import PrimusExtError
from primus_ext.measure.store import TimingStore, open_store_file
from primus_ext.model.carry import carry_cost
from primus_ext.model.costs import CostProvider, LayerCost
from primus_ext.model.layers import rank_shapes
from primus_ext.model.rank_shape import RankShape
from primus_ext.specs import GPUSpec
from primus_ext.validate.run import Projector
from primus_ext.validate.runs import RunRow


@dataclass(frozen=True, kw_only=True)
class CarriedCosts:
    """``CostProvider``: measured entries of ``store`` (taken on ``measured_on``) carried to ``target`` and to
    their shape's precision (``model.carry.carry_cost``)."""

    store: CostProvider
    measured_on: GPUSpec
    target: GPUSpec

    def cost(self, shape: RankShape) -> LayerCost | None:
        measured = self.store.cost(shape)
        return None if measured is None else carry_cost(measured, shape, measured_on=self.measured_on,
                                                        target=self.target)


def measured_projector(store: CostProvider, measured_on: GPUSpec) -> Projector:
    """A projector over ``store``'s measured layers (see module docstring); refuses uncovered rows."""
    from primus_ext.projection import evaluate

    def project(run: RunRow) -> float:
        assert run.model is not None and run.execution is not None and run.system is not None
        gpu = run.system.gpu
        if gpu.name != measured_on.name and (not gpu.family or gpu.family != measured_on.family):
            raise PrimusExtError(f"layers measured on {measured_on.name} ({measured_on.family or 'no family'}): "
                                 f"no carry-over to {gpu.name} ({gpu.family or 'no family'})")
        costs = CarriedCosts(store=store, measured_on=measured_on, target=gpu)
        missing = sorted({s.kind for s in rank_shapes(run.model, run.execution).values() if costs.cost(s) is None})
        if missing:
            raise PrimusExtError(f"no measured {', '.join(missing)} layer in the store for this configuration")
        return evaluate(run.model, run.execution, run.system, costs).tokens_per_s_per_gpu

    return project


def open_store(path: str, device: str | None = None) -> TimingStore:
    """A ``TimingStore`` over ``path`` (an SQLite store, or the JSON lines of ``bench --export`` read into
    memory), any library versions, on ``device`` (default: the one device whose measured entries it holds)."""
    file = Path(path)
    if not file.is_file():
        raise PrimusExtError(f"--store {path}: no such file (a timing store from `primus-ext bench --out` or "
                             "its `--export`)")
    try:
        probe = open_store_file(file, device=device or "", versions="any")
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
    return open_store_file(file, device=device or devices[0], versions="any")
