"""A cluster's environment: what every model projected on one cluster shares, as fields of its profile's efficiency.

    values = {"scaleup_link": 0.0306}                        # fitted on a real run (``calibration.cluster_fit``)
    system = apply_environment(system, values)               # the profile's system with the cluster's values
    problems = implausible(values, system.gpu)               # outside the physical ranges below: --force only

A per-model record (``calibration.record``) corrects one model's kernels; a cluster record (``calibration.cluster``)
holds what the cluster's fabric, driver and framework set for every model: the links' efficiency and the overlap the
framework achieved, and, where logs of several models separate it from the links, a kernel factor. Each is a field of
``specs.Efficiency``, so the projection re-runs with it (collectives, overlap windows, pipeline schedule and the tuner
all see it), not a correction of the step afterwards.

``FACTORS`` (the order is the fit's: a cluster record is about the environment first):

- ``scaleup_link``: fraction of the datasheet scale-up bandwidth (xGMI / NVLink, per GPU and direction) a collective
  reaches inside a scale-up domain (``Efficiency.scaleup_link``);
- ``scaleout_link``: the same of the NIC, across domains (``Efficiency.scaleout_link``);
- ``kernels``: every analytic kernel takes ``k`` x its profile time: the GEMM (BF16, FP8), attention and HBM fractions
  of peak divided by ``k``, the fixed per-layer costs (launch, MoE) multiplied by ``k``; layer costs read from a
  timing store are the cluster's own measurements and stay as measured;
- ``overlap``: share of an overlapped collective hidden behind compute (``Efficiency.overlap``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from primus_ext.calibration.correction import K_MAX, PLAUSIBLE_KERNEL_FACTOR
from primus_ext.specs import GPUSpec, SystemSpec

FACTORS = ("scaleup_link", "scaleout_link", "kernels", "overlap")
"""The environment's parameters, in the order the fit frees them (``cluster_fit.free_factors``)."""
LINK_FIT_MIN = 0.005
"""Smallest link fraction the fit may reach: 1/200 of the datasheet (2.7 GB/s of MI355X's 537.6 GB/s xGMI); a fit at
this bound did not find a link speed, it ran out of range (refused even with --force)."""
SCALEUP_FLOOR_BYTES_PER_S = 15.75e9
"""Slowest plausible scale-up collective bandwidth per GPU and direction: one PCIe 3.0 x16 link (PCI-SIG PCIe 3.0 base
specification: 8 GT/s per lane, 128b/130b encoding, 16 x 8e9 x 128/130 / 8 = 15.75 GB/s), the slowest host link an
accelerator of this class sits on. Collectives inside a node slower than that are not a property of the GPUs' fabric
but of a fault (peer-to-peer off and traffic staged through host memory, a wrong transport): below it the record
is refused unless --force. The real MI355X node of ``shared/validation/logs`` runs at ~40 GB/s (7 % of xGMI, about a
PCIe 5.0 x16 link: ``benchmarks/amd_calibration.py`` section 4), inside the range."""
SCALEOUT_FLOOR_BYTES_PER_S = 1.25e9
"""Slowest plausible scale-out bandwidth per GPU and direction: 10 Gb/s Ethernet (IEEE 802.3ae), the management
network every node has and where NCCL / RCCL's socket transport lands when the fast fabric is not found; below it
refused unless --force."""


def kernel_floor(gpu: GPUSpec) -> float:
    """Smallest kernel factor: the one that puts the profile's largest fraction of peak (GEMM, attention, HBM) at 1.
    Faster kernels would run above the GPU's datasheet peak (refused even with --force)."""
    e = gpu.efficiency
    return max(e.gemm_max, e.fp8_gemm_max, e.attention, e.hbm)


def physical_range(name: str, gpu: GPUSpec) -> tuple[float, float]:
    """The fit's bounds for ``name``: outside them no physical cluster gives the logs (never stored)."""
    if name in ("scaleup_link", "scaleout_link"):
        return LINK_FIT_MIN, 1.0  # a collective cannot run faster than its link's datasheet rate
    if name == "kernels":
        return kernel_floor(gpu), K_MAX
    if name == "overlap":
        return 0.0, 1.0
    raise KeyError(name)


def plausible_range(name: str, gpu: GPUSpec) -> tuple[float, float]:
    """Where ``name`` may be stored without --force (``SCALEUP_FLOOR_BYTES_PER_S``, ``SCALEOUT_FLOOR_BYTES_PER_S``,
    ``correction.PLAUSIBLE_KERNEL_FACTOR``; the overlap: its whole physical range)."""
    if name == "scaleup_link" and gpu.scaleup_bandwidth_bytes_per_s > 0:
        return min(1.0, SCALEUP_FLOOR_BYTES_PER_S / gpu.scaleup_bandwidth_bytes_per_s), 1.0
    if name == "scaleout_link" and gpu.nic_bandwidth_bytes_per_s > 0:
        return min(1.0, SCALEOUT_FLOOR_BYTES_PER_S / gpu.nic_bandwidth_bytes_per_s), 1.0
    if name == "kernels":
        low, high = PLAUSIBLE_KERNEL_FACTOR
        return max(low, kernel_floor(gpu)), high
    return physical_range(name, gpu)


def profile_value(name: str, gpu: GPUSpec) -> float:
    """The profile's own value of ``name`` (kernels: 1)."""
    return 1.0 if name == "kernels" else float(getattr(gpu.efficiency, name))


def apply_environment(system: SystemSpec, values: Mapping[str, float]) -> SystemSpec:
    """``system`` with the cluster's ``values`` in its GPU's efficiency (the profile's for what ``values`` lacks)."""
    unknown = set(values) - set(FACTORS)
    if unknown:
        raise KeyError(f"not an environment factor: {sorted(unknown)}")
    if not values:
        return system
    e = system.gpu.efficiency
    changes: dict[str, float] = {n: float(values[n]) for n in ("scaleup_link", "scaleout_link", "overlap")
                                 if n in values}
    k = float(values.get("kernels", 1.0))
    if k != 1.0:
        changes.update(gemm_max=e.gemm_max / k, fp8_gemm_max=e.fp8_gemm_max / k, attention=e.attention / k,
                       hbm=e.hbm / k, kernel_overhead_s=e.kernel_overhead_s * k,
                       moe_layer_overhead_s=e.moe_layer_overhead_s * k)
    return replace(system, gpu=replace(system.gpu, efficiency=replace(e, **changes)))


def implausible(values: Mapping[str, float], gpu: GPUSpec) -> list[str]:
    """One sentence per value outside its plausible range (empty: all inside)."""
    out = []
    for name, value in values.items():
        low, high = plausible_range(name, gpu)
        if not low - 1e-9 <= value <= high + 1e-9:
            out.append(f"{describe_value(name, value, gpu)} is outside the plausible range "
                       f"[{describe_value(name, low, gpu)}, {describe_value(name, high, gpu)}]: {_why(name)}")
    return out


def _why(name: str) -> str:
    if name == "scaleup_link":
        return ("slower than one PCIe 3.0 x16 link (15.75 GB/s per direction), which is a fault of the node "
                "(peer-to-peer off, a wrong transport) or a cost the projection does not model, not its fabric")
    if name == "scaleout_link":
        return "slower than 10 Gb/s Ethernet per GPU: the run did not use the cluster's fabric"
    return ("the shipped profiles miss every published run of the development set by less than x2 (calibration."
            "correction.PLAUSIBLE_KERNEL_FACTOR)")


def describe_value(name: str, value: float, gpu: GPUSpec) -> str:
    """``scale-up links 0.031 (16.5 GB/s per GPU and direction)``, ``kernels x1.97``, ``overlap 0.90``."""
    if name == "scaleup_link":
        return f"scale-up links {value:.4g} ({value * gpu.scaleup_bandwidth_bytes_per_s / 1e9:.1f} GB/s per GPU)"
    if name == "scaleout_link":
        return f"scale-out links {value:.4g} ({value * gpu.nic_bandwidth_bytes_per_s / 1e9:.1f} GB/s per GPU)"
    if name == "kernels":
        return f"kernels x{value:.3f}"
    return f"{name} {value:.2f}"
