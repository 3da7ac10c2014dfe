"""Run a suite: project every entry, compare with the baseline, classify.

Status of an entry: ``pass`` (within tolerance), ``improved`` (better beyond tolerance; passes and is
reported), ``regression`` (throughput drop or memory growth beyond tolerance; fails), ``drift``
(projection off its measured anchor beyond tolerance; fails), ``error`` (the entry cannot be
projected or has no baseline; exit 2).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from primus_ext.errors import INTERNAL_ERRORS, PrimusExtError, cut
from primus_ext.perfci.suite import Entry, Suite

if TYPE_CHECKING:
    from primus_ext.projection.evaluate import Costs

GIB = 2**30


@dataclass(frozen=True, kw_only=True)
class EntryResult:
    name: str
    status: str
    """pass | improved | regression | drift | error"""
    message: str = ""
    step_time_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    tflops_per_gpu: float | None = None
    mfu: float | None = None
    """Model TFLOP/s over the GPU's dense peak, a fraction (as everywhere in the result schema)."""
    peak_memory_gib: float | None = None
    fits: bool | None = None
    cost_source: str = ""
    baseline: Mapping[str, Any] | None = None
    throughput_delta_pct: float | None = None
    memory_delta_gib: float | None = None
    measured_error_pct: float | None = None
    wall_s: float = 0.0
    """Seconds this entry took to project."""
    notes: tuple[str, ...] = ()
    """How the recipe was read where it may surprise: a Primus recipe priced with primus-ext's bundled presets (no
    Primus checkout above it; the entry's ``config_roots`` names one)."""

    def to_baseline(self) -> dict[str, Any]:
        """The baseline file's entry (the result schema's ``baseline_entry``)."""
        return {"step_time_s": self.step_time_s, "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
                "tflops_per_gpu": self.tflops_per_gpu, "mfu": self.mfu, "peak_memory_gib": self.peak_memory_gib,
                "cost_source": self.cost_source}


@dataclass(frozen=True, kw_only=True)
class SuiteResult:
    suite: str
    entries: tuple[EntryResult, ...]
    baseline_path: str = ""
    errors: tuple[str, ...] = field(default_factory=tuple)

    def count(self, status: str) -> int:
        return sum(1 for e in self.entries if e.status == status)

    @property
    def exit_code(self) -> int:
        if self.count("error"):
            return 2
        if self.count("regression") or self.count("drift"):
            return 1
        return 0


def _costs(suite: Suite):
    """The suite's committed timing store (imported into a scratch SQLite file), or None (analytic)."""
    if suite.store is None:
        return None
    from primus_ext.measure.store import TimingStore

    folder = tempfile.mkdtemp(prefix="primus-ext-ci-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # the scratch copy goes when the run ends
    scratch = Path(folder) / "store.sqlite"
    store = TimingStore(scratch, device=None, versions="any")
    store.import_(suite.store)
    rows = store.layer_rows()
    devices = sorted({r["device"] for r in rows})
    if len(devices) == 1:
        store = TimingStore(scratch, device=devices[0], versions="any")
    return store


def session_of(costs: Costs) -> Any:
    """The suite's projection session (``primus_ext.session``): the suite's committed store (else the roofline), no
    stored calibration (a user's records must not move a CI figure), and an environment whose ``$NNODES`` and
    ``$PRIMUS_EXT_CLUSTER`` do not move an entry, nor the runner's GPUs (reproducible: its target is the entry's
    or its recipe's, else the entry is an error naming --cluster)."""
    from primus_ext.recipe.node_count import NODES_ENV
    from primus_ext.recipe.target import CLUSTER_ENV
    from primus_ext.session import CostChoice, Session

    env = {k: v for k, v in os.environ.items() if k not in (NODES_ENV, CLUSTER_ENV)}
    return Session(CostChoice(mode="analytic" if costs is None else "store", calibrated=False), provider=costs,
                   env=env, gpus=tuple)


def _project(entry: Entry, session: Any) -> EntryResult:
    from primus_ext.recipe.loader import BUNDLED_PRESETS

    recipe = session.load(entry.recipe, entry.overrides, cluster=entry.cluster, nodes=entry.nodes,
                          config_roots=entry.config_roots)
    result = session.project(recipe, band=False)
    sources = sorted(set(result.sources.values()))
    memory = result.memory
    return EntryResult(
        name=entry.name, status="pass",
        step_time_s=round(result.step_time_s, 6),
        tokens_per_s_per_gpu=round(result.tokens_per_s_per_gpu, 3),
        tflops_per_gpu=round(result.model_tflops_per_gpu, 3),
        mfu=round(result.mfu, 5),
        peak_memory_gib=round(memory.peak_bytes / GIB, 3) if memory is not None else None,
        fits=memory.fits if memory is not None else None,
        cost_source="+".join(sources) if sources else "analytic",
        notes=tuple(w for w in recipe.warnings if BUNDLED_PRESETS in w),
    )


def classify(entry: Entry, current: EntryResult, baseline: Mapping[str, Any] | None) -> EntryResult:
    """Compare one projected entry with its baseline and measured anchor."""
    if baseline is None:
        return replace(current, status="error", message="no baseline entry (run with --update-baseline)")
    messages, status = [], "pass"
    tp_delta = mem_delta = None
    old_tp = baseline.get("tokens_per_s_per_gpu")
    if old_tp and current.tokens_per_s_per_gpu is not None:
        tp_delta = (current.tokens_per_s_per_gpu - old_tp) / old_tp * 100.0
        if tp_delta < -entry.tolerance.throughput_pct:
            status = "regression"
            messages.append(f"throughput {tp_delta:+.2f} % (tolerance -{entry.tolerance.throughput_pct} %)")
        elif tp_delta > entry.tolerance.throughput_pct:
            status = "improved"
            messages.append(f"throughput {tp_delta:+.2f} %")
    old_mem = baseline.get("peak_memory_gib")
    if old_mem is not None and current.peak_memory_gib is not None:
        mem_delta = current.peak_memory_gib - old_mem
        if mem_delta > entry.tolerance.memory_gib:
            status = "regression"
            messages.append(f"peak memory {mem_delta:+.2f} GiB (tolerance +{entry.tolerance.memory_gib} GiB)")
        elif mem_delta < -entry.tolerance.memory_gib:
            status = "improved" if status == "pass" else status
            messages.append(f"peak memory {mem_delta:+.2f} GiB")
    measured_error = None
    if entry.measured is not None and current.tokens_per_s_per_gpu is not None:
        m = entry.measured
        measured_error = (current.tokens_per_s_per_gpu - m.tokens_per_s_per_gpu) / m.tokens_per_s_per_gpu * 100
        if abs(measured_error) > m.tolerance_pct:
            status = "drift" if status != "regression" else status
            messages.append(f"projection {measured_error:+.1f} % off measured {m.tokens_per_s_per_gpu:g} tok/s/GPU "
                            f"{('(' + m.source + ')') if m.source else ''} (tolerance {m.tolerance_pct} %)")
    return replace(current, status=status, message="; ".join(messages) or "within tolerance", baseline=baseline,
                   throughput_delta_pct=tp_delta, memory_delta_gib=mem_delta, measured_error_pct=measured_error)


def run_suite(suite: Suite, baseline: Mapping[str, Mapping[str, Any]] | None, *,
              progress: Callable[[str], None] | None = None) -> SuiteResult:
    """Project and classify every entry. ``baseline`` None = record mode (every entry passes)."""
    session = session_of(_costs(suite))
    results = []
    for i, entry in enumerate(suite.entries):
        if progress:
            progress(f"[{i + 1}/{len(suite.entries)}] {entry.name}")
        start = time.perf_counter()
        try:
            current = _project(entry, session)
            result = current if baseline is None else classify(entry, current, baseline.get(entry.name))
        except PrimusExtError as err:
            result = EntryResult(name=entry.name, status="error", message=str(err).replace("\n", " "))
        except INTERNAL_ERRORS as err:  # one entry the projection fails on is one error row; the others go on
            result = EntryResult(name=entry.name, status="error", message=f"internal error ({type(err).__name__}: "
                                 f"{cut(err)}): the projection failed on this entry; please report it")
        results.append(replace(result, wall_s=time.perf_counter() - start))
    return SuiteResult(suite=suite.name, entries=tuple(results))
