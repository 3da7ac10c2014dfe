"""The full projection for the CLI: ``evaluate`` + timeline + memory + uncertainty band.

    >>> from primus_ext.projection import project
    >>> p = project(model, execution, system, store)
    >>> p.band, p.memory.fits, len(p.timeline)

The band is per side the wider of two: the sensitivity band (every efficiency parameter -- GEMM, attention, HBM,
links, overlap -- moved by ``band_range`` down and up, widened by the largest measured timing spread) and the 80 %
interval of the error cross-validation measured on published runs of the projection's class
(``projection.error_bands``: GPU family x model type x precision x scale). A class with no published run keeps the
sensitivity band, and ``Projection.band_evidence`` says so. A calibrated projection's band is its record's instead
(``calibration.apply``).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, replace

from primus_ext.hardware.host_time import measured_on
from primus_ext.model.analytic import device_seconds
from primus_ext.model.breakdown import host_bound_s, kernel_classes_s
from primus_ext.model.carry import carry_cost
from primus_ext.model.costs import CostProvider, LayerCost
from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.layers import rank_shapes
from primus_ext.model.rank_shape import RankShape
from primus_ext.projection.evaluate import projection_of
from primus_ext.projection.result import Projection
from primus_ext.projection.table import Costs, lookup, providers_of
from primus_ext.specs import ExecutionSpec, GPUSpec, ModelSpec, SystemSpec

EFFICIENCY_RANGE = 0.10
"""Relative range assumed for each efficiency parameter, calibrated, measured (``Efficiency.measured``: one
kernel's value at one size stands for a layer's) or not (docs/DESIGN.md "Sources of error")."""


def band_range(gpu: GPUSpec) -> float:
    """How far each efficiency moves for the band: the profile's ``Efficiency.band`` (wider where its calibration
    rests on few rows), never below ``EFFICIENCY_RANGE``."""
    return max(EFFICIENCY_RANGE, gpu.efficiency.band)


def band_reason(gpu: GPUSpec) -> str:
    """Why ``band_range`` is wider than ``EFFICIENCY_RANGE`` ('' when it is not): efficiencies carried from other GPUs
    (``inherits_efficiency_from``, a pooled prior: no run and no kernel measurement of this GPU calibrates them), else
    a calibration on few runs (an AMD board's held-out error)."""
    if band_range(gpu) <= EFFICIENCY_RANGE:
        return ""
    if gpu.inherits_efficiency_from or gpu.efficiency.calibration.startswith("pooled prior"):
        return f"its efficiencies come from other GPUs, no run or kernel measurement of {gpu.name}"
    return "its calibration rests on few runs"


_SCALED = ("gemm_max", "fp8_gemm_max", "attention", "hbm", "scaleup_link", "scaleout_link", "overlap")


def _scaled_system(system: SystemSpec, factor: float) -> SystemSpec:
    eff = system.gpu.efficiency
    changes = {name: min(1.0, getattr(eff, name) * factor) for name in _SCALED}
    changes["kernel_overhead_s"] = eff.kernel_overhead_s / factor
    return replace(system, gpu=replace(system.gpu, efficiency=replace(eff, **changes)))


@dataclass(frozen=True, kw_only=True)
class _AtNominal:
    """``provider``'s entries carried (``model.carry``) at the GPU's nominal efficiencies: the band's scaled
    efficiencies move what is analytic, not the roofline ratio a measured entry was carried by."""

    provider: CostProvider
    gpu: GPUSpec

    def cost(self, shape: RankShape) -> LayerCost | None:
        found = self.provider.cost(shape)
        return None if found is None else carry_cost(found, shape, measured_on=self.gpu, target=self.gpu)


def _memory(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec, providers: tuple) -> tuple[object, str]:
    if importlib.util.find_spec("primus_ext.model.memory") is None:
        return None, "memory model (primus_ext.model.memory) not available in this checkout"
    from primus_ext.model.memory import estimate_memory

    # Measured saved bytes rescale the formula by their measured/formula ratio at the shape and the
    # implementation they were taken on: CPU runs use megatron-core's local spec, GPU runs the TE spec;
    # a reduced-scale entry says so in its origin (``scale``); a one-rank run of a sequence-parallel shape ran
    # unsplit (``sequence_unsplit``).
    by_scale: dict[tuple[str, float, bool | None], dict[str, int]] = {}
    stand_ins = False
    for kind, shape in rank_shapes(model, execution).items():
        cost = lookup(shape, providers, system)
        origin = cost.origin
        if origin.stand_ins:  # TE absent on the measuring GPU: neither formula's implementation
            stand_ins = True
            continue
        if origin.producer != "analytic" and cost.saved_bytes:
            impl = "local" if origin.on_cpu else "te"
            split = False if origin.sequence_unsplit else None
            by_scale.setdefault((impl, origin.scale, split), {})[kind] = cost.saved_bytes
    note = ("activation memory: the TE formula (saved bytes measured with PyTorch stand-ins for transformer-engine "
            "are not used)") if stand_ins else ""
    if not by_scale:
        return estimate_memory(model, execution, system), note
    (impl, scale, split), measured = max(by_scale.items(), key=lambda item: len(item[1]))
    return estimate_memory(model, execution, system, activation_bytes=measured, measured_impl=impl,
                           measured_scale=scale, measured_sequence_split=split), note


HOST_NOTE_SHARE = 0.05
"""A layer kind's host floor is reported when it adds at least this share to the kind's device time."""


def host_bound_notes(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec, providers: tuple) -> list[str]:
    """Per analytic decoder layer kind, the kernel classes its time is made of (``roofline.kernel_classes_s``), and a
    sentence per layer kind whose pass waits on the host (``roofline.host_bound_s``), and by how much."""
    notes = []
    for kind, shape in rank_shapes(model, execution).items():
        if not get_kind(kind).decoder_layer or lookup(shape, providers, system).source != "analytic":
            continue  # the edge layers (embedding, output): a pass each per micro-batch, never what sets a step
        stated = system.gpu.efficiency.host_factor > 0
        fwd, bwd = host_bound_s(shape, system.gpu, None if stated else 1.0)
        device = sum(device_seconds(shape, system.gpu)[:2])
        classes = kernel_classes_s(shape, system.gpu)
        spent = ", ".join(f"{name} {seconds * 1e3:.2f}" for name, seconds in classes.items() if seconds > 0)
        notes.append(f"kernels of a {kind} layer per micro-batch, forward + backward (ms): {spent}")
        if fwd + bwd > HOST_NOTE_SHARE * device:
            what = (f"host-bound: a {kind} layer's passes wait on the host, +{(fwd + bwd) * 1e3:.2f} ms per "
                    f"micro-batch over its kernels" if stated else
                    f"may be host-bound: on a host as fast as {measured_on()}, a {kind} layer's passes would wait on "
                    f"it, +{(fwd + bwd) * 1e3:.2f} ms per micro-batch over its kernels")
            notes.append(f"{what} (forward +{fwd * 1e3:.2f}, backward +{bwd * 1e3:.2f}): megatron-core's Python and "
                         "dispatch per pass" + ("" if stated else "; not applied: the profile states no host_factor "
                                                "(measure the training host: benchmarks/gpu_kernel_sweep.py --host)")
                         + "; CUDA graphs (cuda_graph_impl / external_cuda_graph) replay the kernels without it")
    return notes


def project(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec, costs: Costs = None, *,
            memory: bool = True, band: bool = True) -> Projection:
    """One configuration's projection with its timeline, memory estimate and uncertainty band."""
    providers = providers_of(costs)
    result = projection_of(model, execution, system, providers, timeline=True)
    notes = list(result.notes)
    if execution.cuda_graph != "none" and any(src != "analytic" for src in result.sources.values()):
        notes.append(f"CUDA graphs ({execution.cuda_graph}): fixed launch / MoE costs are removed from analytic "
                     "layer costs only; measured layers keep what their eager measurement held")
    notes += host_bound_notes(model, execution, system, providers)
    mem = None
    if memory:
        mem, note = _memory(model, execution, system, providers)
        if note:
            notes.append(note)
    interval, evidence = None, None
    if band:
        from primus_ext.projection.error_bands import class_of, shipped, widest

        evidence = shipped().evidence(class_of(model, execution, system))
        interval = widest(result.tokens_per_s_per_gpu, sensitivity_band(model, execution, system, providers),
                          evidence)
    _check_possible(result, system, execution.precision)
    return replace(result, memory=mem, band=interval, band_evidence=evidence, notes=tuple(notes))


def sensitivity_band(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec,
                     providers: tuple = ()) -> tuple[float, float]:
    """(low, high) tokens/s/GPU with every efficiency moved by ``band_range`` down and up, widened by the largest
    measured timing spread of the layer costs ``providers`` give."""
    nominal = tuple(_AtNominal(provider=p, gpu=system.gpu) for p in providers) if providers else ()
    width = band_range(system.gpu)
    low = projection_of(model, execution, _scaled_system(system, 1 - width), nominal)
    high = projection_of(model, execution, _scaled_system(system, 1 + width), nominal)
    spread = 0.0
    for shape in rank_shapes(model, execution).values():
        cost = lookup(shape, providers, system)
        spread = max(spread, cost.fwd_spread, cost.bwd_spread)
    # the measurement spread widens the band by a factor each way (never below zero, however noisy a CPU)
    return low.tokens_per_s_per_gpu / (1 + spread / 2), high.tokens_per_s_per_gpu * (1 + spread / 2)


def _check_possible(result: Projection, system: SystemSpec, precision: str) -> None:
    """A projection faster than the GPU's peak is not a projection: the layer costs contradict the profile."""
    from primus_ext.errors import PrimusExtError

    figures = (result.step_time_s, result.tokens_per_s_per_gpu, result.mfu)
    if not all(math.isfinite(x) for x in figures) or result.step_time_s <= 0:
        raise PrimusExtError(f"the projection is not a number (step {result.step_time_s!r} s): a layer cost in "
                             f"{sorted(set(result.sources.values()))} is not finite or not positive")
    if result.mfu > 1.0:
        measured = sorted({src for src in result.sources.values() if src != "analytic"})
        raise PrimusExtError(
            f"the layer costs imply {result.mfu:.0%} of the {system.gpu.name} profile's peak "
            f"({system.gpu.peak_tflops(precision):.3g} TFLOP/s {precision}): impossible. The measured costs "
            f"({', '.join(measured) or 'none'}) were not taken on this device, or the profile's peak is wrong "
            "for it; project with --compute analytic, or measure on the target GPU")
