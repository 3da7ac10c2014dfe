"""Collective communication time: alpha-beta costs on a two-tier fabric (scale-up domain + NICs).

    >>> from primus_ext.model.collectives import collective_time
    >>> from primus_ext.model.placement import place_group
    >>> collective_time("all_reduce", 256e6, place_group(8, 1, 8), system)     # 8 GPUs, one node
    >>> collective_time("all_reduce", 256e6, place_group(64, 8, 8), system)    # DP across 64 nodes

``nbytes`` follows nccl-tests: the per-rank buffer for all-reduce and send/recv, the *full* (gathered)
buffer for all-gather / reduce-scatter, and each rank's whole send buffer for all-to-all. Bus-bandwidth
factors (nccl-tests PERFORMANCE.md): all-reduce 2(n-1)/n, all-gather / reduce-scatter / all-to-all
(n-1)/n, send/recv 1.

A group inside one scale-up domain runs at the scale-up bandwidth. A group spanning ``D`` domains
with ``k`` members per domain runs hierarchically: the intra-domain phases move the per-GPU bytes of
a k-rank collective over the scale-up link, the inter-domain phase moves the bytes of a D-rank
collective on ``nbytes / k`` (each member drives its own NIC). NCCL pipelines the phases, so the
bandwidth term is the slower tier, the latency terms add. (k = 1, e.g. DP under TP8, degenerates to a
flat ring over NICs; k = 8, D = N/8 gives NCCL's multi-node ring bound 2(n-1)/n * S / (8 * NIC).)
All-to-all sends (k-1)/n of the buffer inside the domain and (n-k)/n over NICs.

Every bandwidth is derated by a named efficiency (``Efficiency.scaleup_link`` / ``scaleout_link``);
alpha per step is ``Efficiency.collective_latency_s`` (+ ``network_latency_s`` across domains).
Pure functions: no I/O, no globals.
"""

from __future__ import annotations

import math
from typing import Literal

from primus_ext.model.placement import GroupPlacement
from primus_ext.specs import SystemSpec

Op = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
Algorithm = Literal["ring", "tree", "auto"]

OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


def bus_factor(op: str, n: int) -> float:
    """Bytes each rank moves per byte of ``nbytes`` (nccl-tests bus-bandwidth factor)."""
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op == "send_recv":
        return 1.0
    raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")


def _steps(op: str, n: int, algorithm: str) -> int:
    """Latency steps of one flat collective on ``n`` ranks."""
    if n <= 1:
        return 0
    if op == "all_reduce":
        return 2 * math.ceil(math.log2(n)) if algorithm == "tree" else 2 * (n - 1)
    if op in ("all_gather", "reduce_scatter"):
        return n - 1
    return 1  # all-to-all: every peer's send posted at once; send/recv: one message


def link_bandwidths(system: SystemSpec) -> tuple[float, float]:
    """Effective (scale-up, scale-out) bytes/s per GPU per direction after the link efficiencies."""
    gpu, eff = system.gpu, system.gpu.efficiency
    return (gpu.scaleup_bandwidth_bytes_per_s * eff.scaleup_link, gpu.nic_bandwidth_bytes_per_s * eff.scaleout_link)


def _transfer(nbytes: float, bandwidth: float, where: str) -> float:
    if nbytes <= 0:
        return 0.0
    if bandwidth <= 0:
        raise ValueError(f"system has no {where} bandwidth but a collective needs it")
    return nbytes / bandwidth


def _one(op: str, nbytes: float, group: GroupPlacement, system: SystemSpec, algorithm: str) -> float:
    n = group.size
    eff = system.gpu.efficiency
    up, nic = link_bandwidths(system)
    alpha_up, alpha_net = eff.collective_latency_s, eff.collective_latency_s + eff.network_latency_s
    if not group.crosses:
        return _steps(op, n, algorithm) * alpha_up + _transfer(bus_factor(op, n) * nbytes, up, "scale-up")
    k, d = group.local, group.domains
    if op == "send_recv":
        return alpha_net + _transfer(nbytes, nic, "scale-out (NIC)")
    if op == "all_to_all":
        intra = _transfer((k - 1) / n * nbytes, up, "scale-up")
        inter = _transfer((n - k) / n * nbytes, nic, "scale-out (NIC)")
        return alpha_net + max(intra, inter)
    if op == "all_reduce":
        intra_bytes, intra_steps = 2.0 * (k - 1) / k * nbytes, 2 * (k - 1)
    else:  # all_gather / reduce_scatter
        intra_bytes, intra_steps = (k - 1) / k * nbytes, k - 1
    inter_bytes = bus_factor(op, d) * nbytes / k
    latency = intra_steps * alpha_up + _steps(op, d, algorithm) * alpha_net
    bandwidth = max(_transfer(intra_bytes, up, "scale-up"), _transfer(inter_bytes, nic, "scale-out (NIC)"))
    return latency + bandwidth


def collective_time(op: Op | str, nbytes: float, group: GroupPlacement, system: SystemSpec, *,
                    algorithm: Algorithm | str = "auto") -> float:
    """Seconds for one collective of ``nbytes`` over ``group`` on ``system``.

    ``algorithm``: ``ring`` or ``tree`` (all-reduce only: 2*log2(n) latency steps instead of 2(n-1),
    same bus bandwidth as NCCL's double binary tree); ``auto`` takes the faster, as NCCL's tuner does.
    """
    if group.size <= 1 or nbytes <= 0:
        return 0.0
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if op == "all_reduce" and algorithm == "auto":
        return min(_one(op, nbytes, group, system, "ring"), _one(op, nbytes, group, system, "tree"))
    return _one(op, nbytes, group, system, algorithm)


def p2p_time(nbytes: float, crosses: bool, system: SystemSpec) -> float:
    """Point-to-point send/recv between two ranks, inside or across a scale-up domain."""
    group = GroupPlacement(size=2, domains=2 if crosses else 1, per_domain=1 if crosses else 2)
    return collective_time("send_recv", nbytes, group, system)


__all__ = ["OPS", "bus_factor", "collective_time", "link_bandwidths", "p2p_time"]
