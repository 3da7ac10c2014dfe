"""A measured in-node fabric as the projection's scale-up link (torch-free).

    from primus_ext.measure.fabric_fit import scaleup_from_sweep, with_measured_scaleup
    fit = scaleup_from_sweep(store.fabric(device="cpu"))       # None without all-reduce points
    system = with_measured_scaleup(system, fit) if fit else system

The collective model (``model/collectives.py``) prices a ring step inside the scale-up domain at
``collective_latency_s`` plus bytes / (bandwidth x ``scaleup_link``). A sweep of the machine the run
will use measures both directly (nccl-tests conventions, ``fabric.py``):

- the alpha-beta model of an all-reduce, t = alpha + 2(n-1)/n x bytes / bus bandwidth, fitted by
  alternating medians: latency from the smallest half of the message sizes after their
  byte term, bus bandwidth from the largest half after their latency term (three rounds converge
  on clean data). Medians, not least squares, so one noisy point does not set either (a CPU sweep
  measured 4 KiB at 1.5 ms and 16 KiB at 0.8 ms); ``scaleup_link`` = 1 since the measurement
  already includes what the link reaches;
- the per-step latency is alpha over the steps the collective model charges an all-reduce: its
  ``auto`` algorithm always takes the tree's 2 ceil(log2 n) (same bus bandwidth, fewer steps than the
  ring's 2(n-1)), so the model prices the swept all-reduces at their swept times. The same step
  latency then prices all-gathers / reduce-scatters (n - 1 steps): exact for 2 ranks, an
  approximation beyond.

Only the scale-up tier is replaced; inter-node links keep the profile's figures, and the profile's
``calibration`` says which parts were measured.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from primus_ext.specs import SystemSpec

ROUNDS = 3
"""Alternating latency / bandwidth estimates (each round uses the other's last value)."""


@dataclass(frozen=True, kw_only=True)
class ScaleupFit:
    bus_bandwidth_bytes_per_s: float
    latency_s: float
    """Per latency step of the collective model (an all-reduce of n ranks: 2 ceil(log2 n) steps)."""
    world: int
    """Ranks the sweep ran on."""
    device: str
    date: str

    def describe(self) -> str:
        return (f"scale-up link measured by a fabric sweep of {self.world} x {self.device} ({self.date}): "
                f"all-reduce bus bandwidth {self.bus_bandwidth_bytes_per_s / 1e9:.2f} GB/s, "
                f"{self.latency_s * 1e6:.0f} us per step")


def scaleup_from_sweep(points: Sequence) -> ScaleupFit | None:
    """Fit the scale-up link from ``FabricPoint``s of one device (the widest world swept); None
    without all-reduce points."""
    reduce = [p for p in points if p.op == "all_reduce" and p.world >= 2 and p.time_ms > 0]
    if not reduce:
        return None
    world = max(p.world for p in reduce)
    reduce = sorted((p for p in reduce if p.world == world), key=lambda p: p.nbytes)
    sizes = sorted({p.nbytes for p in reduce})
    half = max(1, len(sizes) // 2)
    small = [p for p in reduce if p.nbytes in sizes[:half]]
    large = [p for p in reduce if p.nbytes in sizes[-half:]]
    steps, share = 2 * math.ceil(math.log2(world)), 2 * (world - 1) / world  # model/collectives.py: tree
    busbw = max(p.busbw_gbps for p in reduce) * 1e9
    latency = 0.0
    for _ in range(ROUNDS):
        latency = statistics.median(max(0.0, p.time_ms * 1e-3 - share * p.nbytes / busbw) for p in small) / steps
        rates = [share * p.nbytes / (p.time_ms * 1e-3 - steps * latency) for p in large
                 if p.time_ms * 1e-3 > steps * latency]
        busbw = statistics.median(rates) if rates else busbw
    return ScaleupFit(bus_bandwidth_bytes_per_s=busbw, latency_s=latency, world=world,
                      device=reduce[0].device, date=max(p.date for p in reduce))


def with_measured_scaleup(system: SystemSpec, fit: ScaleupFit) -> SystemSpec:
    """The system with its scale-up bandwidth, link efficiency and step latency taken from ``fit``."""
    gpu = system.gpu
    eff = replace(gpu.efficiency, scaleup_link=1.0, collective_latency_s=fit.latency_s,
                  calibration=f"{gpu.efficiency.calibration}; {fit.describe()}")
    return replace(system, gpu=replace(gpu, scaleup_bandwidth_bytes_per_s=fit.bus_bandwidth_bytes_per_s,
                                       efficiency=eff))
