"""One layer shape measured in this process: build it, time it, count its saved bytes; a failure recorded.

Usage (inside an active ``shims.parallel_context``; ``runner.measure_many`` and ``spawn``'s ranks call it)::

    from primus_ext.measure.single import MeasureOptions, measure_one
    m = measure_one(shape, 0.125, torch.device("cpu"), MeasureOptions())   # Measurement, failures included

Shared by ``runner`` (one-rank groups) and ``spawn`` (real ranks), which import it and not each other's.
"""

from __future__ import annotations

import datetime as dt
import gc
import platform
import socket
from dataclasses import dataclass
from functools import cache

import torch

from primus_ext.measure.build import BuiltLayer, UnsupportedLayer, build_layer
from primus_ext.measure.saved import peak_bytes, saved_bytes
from primus_ext.measure.timing import MeasureTimeout, time_layer
from primus_ext.model.costs import CostOrigin, LayerCost
from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.rank_shape import RankShape

MEASURE_ERRORS: tuple[type[BaseException], ...] = (
    torch.OutOfMemoryError,  # device OOM (a RuntimeError subclass, listed for the record)
    RuntimeError,            # unsupported kernel / dtype on this device, collective failures
    NotImplementedError,
    UnsupportedLayer,
    ValueError,              # megatron config validation
    AssertionError,          # megatron asserts unsupported combinations at build time
    TypeError,               # spec/module signature mismatch in this megatron-core version
    NameError,               # a TE-only code path without TE (e.g. layernorm recompute: FP8GlobalStateManager)
    MeasureTimeout,
)
"""What a single layer's measurement may raise and still let the run continue."""


@dataclass(frozen=True, kw_only=True)
class MeasureOptions:
    warmup: int = 2
    reps: int = 10
    timeout_s: float = 120.0
    """Per-layer budget for the timed loop (``MeasureTimeout`` under ``MIN_REPS`` repetitions)."""
    split_wgrad: bool = False
    spawn: bool = True
    """Run TP/EP groups that fit in the node with real ranks; False = always per-rank at world 1."""


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One layer kind measured (or failed) on one device: the cost plus how and where."""

    target: RankShape
    """The per-rank shape asked for (full scale)."""
    shape: RankShape
    """The shape actually built (``target.scaled(scale)``)."""
    scale: float
    device: str
    dtype: str
    versions: str
    host: str
    date: str
    cost: LayerCost | None = None
    error: str | None = None
    """``"<ExceptionType>: message"`` when the layer failed; ``cost`` is then ``None``."""
    reps: int = 0
    warmup: int = 0
    world: int = 1
    mode: str = "per-rank"
    """``per-rank`` (one rank, per-rank sizes, no communication) or ``distributed`` (real ranks)."""
    spec: str = "local"
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.cost is not None


@cache
def library_versions() -> str:
    """``torch=...;megatron-core=...;te=...`` of this process (part of the store key)."""
    from importlib.metadata import PackageNotFoundError, version

    parts = [f"torch={torch.__version__}"]
    for dist_name, label in (("megatron-core", "megatron-core"), ("transformer-engine", "te")):
        try:
            parts.append(f"{label}={version(dist_name)}")
        except PackageNotFoundError:
            parts.append(f"{label}=none")
    return ";".join(parts)


@cache
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device) -> str:
    """Store key of the device: the GPU's marketing name, or ``cpu:<model>``."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu:{_cpu_model()}"


def device_tag(device: torch.device) -> str:
    """Short device label used in ``LayerCost.source``."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def measured_origin(device: torch.device, scale: float, *, sequence_unsplit: bool = False) -> CostOrigin:
    """A measurement's ``CostOrigin``: the device, the scale it ran at (< 1: reduced), a one-rank SP run."""
    return CostOrigin(producer="measured", device=device_tag(device), scale=min(scale, 1.0),
                      sequence_unsplit=sequence_unsplit)


def _dtype_name(built_or_shape: BuiltLayer | RankShape) -> str:
    if isinstance(built_or_shape, BuiltLayer):
        shape = built_or_shape.shape
        te = built_or_shape.spec_kind == "te"
        if te and (shape.precision == "fp8" or (shape.precision == "fp4" and shape.fp4_recipe == "nvfp4")):
            return shape.precision  # the GEMMs ran quantised (measure.build: TE's fp8 / NVFP4 recipe)
        return str(built_or_shape.dtype).removeprefix("torch.")
    return {"fp32": "float32", "fp16": "float16"}.get(built_or_shape.precision, "bfloat16")


def _sequence_unsplit(built: BuiltLayer) -> bool:
    shape = built.shape
    split = get_kind(shape.kind).takes_sequence_split
    return not built.distributed and shape.sequence_parallel and shape.tp > 1 and split


def measure_built(built: BuiltLayer, target: RankShape, scale: float, opts: MeasureOptions,
                  world: int = 1) -> Measurement:
    timing = time_layer(built, warmup=opts.warmup, reps=opts.reps, timeout_s=opts.timeout_s,
                        split_wgrad=opts.split_wgrad)
    n = built.layers  # a window pattern's period: per-layer means (the peak stays the block's)
    cost = LayerCost(
        fwd_ms=timing.fwd.median_ms / n, bwd_ms=timing.bwd.median_ms / n,
        wgrad_ms=None if timing.wgrad_ms is None else timing.wgrad_ms / n,
        recompute_ms=timing.recompute.median_ms / n, params=built.param_count,
        saved_bytes=saved_bytes(built) // n, peak_bytes=peak_bytes(built),
        fwd_spread=timing.fwd.spread, bwd_spread=timing.bwd.spread,
        origin=measured_origin(built.device, scale, sequence_unsplit=_sequence_unsplit(built)))
    return Measurement(
        target=target, shape=built.shape, scale=scale, device=device_name(built.device),
        dtype=_dtype_name(built), versions=library_versions(), host=socket.gethostname(),
        date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), cost=cost, reps=timing.fwd.n,
        warmup=opts.warmup, world=world, mode="distributed" if built.distributed else "per-rank",
        spec=built.spec_kind, notes=built.notes)


def failed(target: RankShape, scale: float, device: torch.device, err: BaseException,
           world: int = 1) -> Measurement:
    shape = target.scaled(scale)
    return Measurement(
        target=target, shape=shape, scale=scale, device=device_name(device), dtype=_dtype_name(shape),
        versions=library_versions(), host=socket.gethostname(),
        date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        error=f"{type(err).__name__}: {err}".strip()[:2000], world=world,
        mode="distributed" if world > 1 else "per-rank")


def measure_one(target: RankShape, scale: float, device: torch.device, opts: MeasureOptions, *,
                distributed: bool = False, world: int = 1) -> Measurement:
    """Build and measure one shape inside an active ``parallel_context``; failures returned."""
    built = None
    try:
        built = build_layer(target.scaled(scale), device=device, distributed=distributed)
        return measure_built(built, target, scale, opts, world)
    except MEASURE_ERRORS as err:
        return failed(target, scale, device, err, world)
    finally:
        del built
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
