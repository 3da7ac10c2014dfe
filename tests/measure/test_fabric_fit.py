"""A fabric sweep as the projection's scale-up link: the fit recovers a known alpha-beta fabric, and
the collective model then prices the swept messages at the swept times."""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus_ext.hardware import load_system
from primus_ext.measure.fabric_fit import scaleup_from_sweep, with_measured_scaleup
from primus_ext.measure.store import FabricPoint
from primus_ext.model.collectives import collective_time
from primus_ext.model.placement import place_group

BUSBW, ALPHA = 0.6e9, 400e-6  # a CPU gloo pair: bytes/s of bus bandwidth, seconds per ring step
SIZES = tuple(2**k for k in range(12, 25, 2))


def _point(nbytes: int, world: int = 2, *, time_s: float | None = None, op: str = "all_reduce") -> FabricPoint:
    steps = 2 * (world - 1)
    t = time_s if time_s is not None else steps * ALPHA + nbytes * steps / world / BUSBW
    algbw = nbytes / t / 1e9
    return FabricPoint(device="cpu:test", world=world, backend="gloo", op=op, nbytes=nbytes, time_ms=t * 1e3,
                       busbw_gbps=algbw * steps / world, date=f"2026-12-0{world}")


def test_recovers_bandwidth_and_latency_of_an_alpha_beta_fabric():
    fit = scaleup_from_sweep([_point(n) for n in SIZES])
    # the largest half still carries some alpha: the bus bandwidth is within a few % of BUSBW
    assert fit.bus_bandwidth_bytes_per_s == pytest.approx(BUSBW, rel=0.08)
    assert fit.latency_s == pytest.approx(ALPHA, rel=0.05)
    assert (fit.world, fit.device) == (2, "cpu:test") and "0.6" in fit.describe()


def test_one_noisy_small_message_does_not_set_the_latency():
    points = [_point(n) for n in SIZES[1:]] + [_point(SIZES[0], time_s=4 * 2 * ALPHA)]
    assert scaleup_from_sweep(points).latency_s == pytest.approx(ALPHA, rel=0.1)


def test_uses_the_widest_world_and_needs_all_reduce_points():
    points = [_point(n, world=2, time_s=1.0) for n in SIZES] + [_point(n, world=4) for n in SIZES]
    fit = scaleup_from_sweep(points)
    # 4 ranks, ring: 6 steps of ALPHA swept; the collective model charges an all-reduce 2 log2(4) = 4
    assert fit.world == 4 and fit.latency_s == pytest.approx(ALPHA * 6 / 4, rel=0.05)
    assert scaleup_from_sweep([_point(n, op="all_gather") for n in SIZES]) is None
    assert scaleup_from_sweep([]) is None


@pytest.mark.parametrize("world", [2, 4, 8])
def test_the_measured_system_prices_the_swept_messages_at_their_swept_times(world):
    cpu = load_system("cpu", 1)
    points = [_point(n, world) for n in SIZES]
    measured = with_measured_scaleup(cpu, scaleup_from_sweep(points))
    measured = replace(measured, gpu=replace(measured.gpu, scaleup_domain=world, gpus_per_node=world))
    group = place_group(world, 1, measured.scaleup_domain)
    for p in points:  # the model's own algorithm choice (auto), as the projection prices them
        assert collective_time("all_reduce", p.nbytes, group, measured) == pytest.approx(p.time_ms * 1e-3, rel=0.02)
    # only the scale-up tier changed, and the profile says how
    assert measured.gpu.nic_bandwidth_bytes_per_s == cpu.gpu.nic_bandwidth_bytes_per_s
    assert measured.gpu.efficiency.scaleup_link == 1.0
    assert "fabric sweep" in measured.gpu.efficiency.calibration
    assert cpu.gpu.efficiency.calibration in measured.gpu.efficiency.calibration
