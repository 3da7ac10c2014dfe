"""Collective times against hand-derived alpha-beta numbers (round bandwidths, unit efficiencies)."""

import pytest

from primus_ext.model.collectives import bus_factor, collective_time, p2p_time
from primus_ext.model.placement import GroupPlacement, place_group
from primus_ext.specs import Efficiency, GPUSpec, SystemSpec

UP, NIC = 100e9, 10e9  # bytes/s per GPU per direction
S = 1e9


def system(domain=8, nodes=16, alpha=0.0, net_alpha=0.0, up_eff=1.0, nic_eff=1.0):
    eff = Efficiency(scaleup_link=up_eff, scaleout_link=nic_eff, collective_latency_s=alpha,
                     network_latency_s=net_alpha)
    gpu = GPUSpec(name="toy", bf16_dense_tflops=1000, fp8_dense_tflops=2000, hbm_bytes=80e9,
                  hbm_bandwidth_bytes_per_s=3e12, scaleup_bandwidth_bytes_per_s=UP, scaleup_domain=domain,
                  nic_bandwidth_bytes_per_s=NIC, gpus_per_node=min(domain, 8), efficiency=eff)
    return SystemSpec(gpu=gpu, num_nodes=nodes)


def test_bus_factors():
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 4) == pytest.approx(3 / 4)
    assert bus_factor("reduce_scatter", 2) == pytest.approx(1 / 2)
    assert bus_factor("all_to_all", 64) == pytest.approx(63 / 64)
    assert bus_factor("send_recv", 2) == 1.0


def test_intra_domain_ring():
    sysm, g8 = system(), place_group(8, 1, 8)
    assert not g8.crosses
    assert collective_time("all_reduce", S, g8, sysm, algorithm="ring") == pytest.approx(2 * 7 / 8 * S / UP)
    assert collective_time("all_gather", S, g8, sysm) == pytest.approx(7 / 8 * S / UP)
    assert collective_time("reduce_scatter", S, g8, sysm) == pytest.approx(7 / 8 * S / UP)
    assert collective_time("all_to_all", S, g8, sysm) == pytest.approx(7 / 8 * S / UP)
    assert collective_time("all_reduce", S, place_group(1, 1, 8), sysm) == 0.0


def test_flat_ring_over_nics_when_one_member_per_domain():
    # DP under TP8: 16 members, one per node -> every byte crosses a NIC
    g = place_group(16, 8, 8)
    assert (g.domains, g.per_domain) == (16, 1)
    assert collective_time("all_reduce", S, g, system(), algorithm="ring") == pytest.approx(2 * 15 / 16 * S / NIC)


def test_hierarchical_all_reduce_takes_slower_tier():
    g = place_group(16, 1, 8)  # two full nodes
    assert (g.domains, g.per_domain) == (2, 8)
    intra = 2 * 7 / 8 * S / UP          # 17.5 ms
    inter = 2 * 1 / 2 * (S / 8) / NIC   # 12.5 ms
    assert collective_time("all_reduce", S, g, system(), algorithm="ring") == pytest.approx(max(intra, inter))
    # all-gather: inter phase on S/8 per GPU among 2 domains
    g64 = place_group(64, 1, 8)
    expected = max(7 / 8 * S / UP, 7 / 8 * (S / 8) / NIC)
    assert collective_time("all_gather", S, g64, system()) == pytest.approx(expected)


def test_all_to_all_across_domains_and_on_nvl72():
    g = place_group(64, 1, 8)
    expected = max(7 / 64 * S / UP, 56 / 64 * S / NIC)
    assert collective_time("all_to_all", S, g, system()) == pytest.approx(expected)
    nvl = system(domain=72, nodes=32)  # 4-GPU trays, 72-GPU NVLink domain
    g72 = place_group(64, 1, 72)
    assert not g72.crosses
    assert collective_time("all_to_all", S, g72, nvl) == pytest.approx(63 / 64 * S / UP)


def test_latency_terms_and_tree():
    sysm = system(alpha=1e-5, net_alpha=5e-6)
    g8 = place_group(8, 1, 8)
    ring = collective_time("all_reduce", 8.0, g8, sysm, algorithm="ring")
    tree = collective_time("all_reduce", 8.0, g8, sysm, algorithm="tree")
    assert ring == pytest.approx(14 * 1e-5 + 2 * 7 / 8 * 8 / UP)
    assert tree == pytest.approx(6 * 1e-5 + 2 * 7 / 8 * 8 / UP)
    assert collective_time("all_reduce", 8.0, g8, sysm) == pytest.approx(tree)  # auto picks the faster
    assert p2p_time(S, True, sysm) == pytest.approx(1.5e-5 + S / NIC)
    assert p2p_time(S, False, sysm) == pytest.approx(1e-5 + S / UP)


def test_link_efficiency_scales_bandwidth_term():
    g8 = place_group(8, 1, 8)
    full = collective_time("all_gather", S, g8, system())
    half = collective_time("all_gather", S, g8, system(up_eff=0.5))
    assert half == pytest.approx(2 * full)


def test_unknown_op_and_missing_nic():
    with pytest.raises(ValueError):
        collective_time("all_scatter", S, place_group(8, 1, 8), system())
    no_nic = SystemSpec(gpu=GPUSpec(name="x", bf16_dense_tflops=1, fp8_dense_tflops=0, hbm_bytes=1,
                                    hbm_bandwidth_bytes_per_s=1, scaleup_bandwidth_bytes_per_s=1, scaleup_domain=2,
                                    nic_bandwidth_bytes_per_s=0), num_nodes=2)
    with pytest.raises(ValueError, match="NIC"):
        collective_time("all_reduce", S, GroupPlacement(size=4, domains=2, per_domain=2), no_nic)
