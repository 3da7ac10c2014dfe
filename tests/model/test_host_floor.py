"""The host floor: a layer pass takes the longer of its kernels and megatron-core's host work between them."""

from dataclasses import replace

import pytest
import yaml
from archs import GQA

from primus_ext.errors import RecipeError
from primus_ext.hardware import load_gpu
from primus_ext.hardware.host_time import _load, host_time_of
from primus_ext.model.host_floor import host_floor_s
from primus_ext.model.rank_shape import RankShape
from primus_ext.model.roofline import analytic_cost, device_seconds, host_bound_s

SMALL = RankShape(kind="dense", arch=GQA, seq_length=256, micro_batch_size=1)
"""A layer whose kernels take less than its host work on an H100."""


def test_a_small_layer_is_host_bound_and_a_cuda_graph_lifts_the_floor():
    gpu = load_gpu("h100")
    host = host_time_of("dense")
    fwd, bwd, _ = device_seconds(SMALL, gpu)
    floor = host_floor_s(SMALL, gpu)
    assert floor == pytest.approx((host.fwd_s * gpu.efficiency.host_factor, host.bwd_s * gpu.efficiency.host_factor))
    assert fwd < floor[0] and bwd < floor[1]
    cost = analytic_cost(SMALL, gpu)
    assert cost.fwd_ms == pytest.approx(floor[0] * 1e3) and cost.bwd_ms == pytest.approx(floor[1] * 1e3)
    assert host_bound_s(SMALL, gpu) == pytest.approx((floor[0] - fwd, floor[1] - bwd))
    graphed = replace(SMALL, cuda_graph="full_iteration")
    assert host_floor_s(graphed, gpu) is None and host_bound_s(graphed, gpu) == (0.0, 0.0)
    assert analytic_cost(graphed, gpu).fwd_ms < cost.fwd_ms


def test_a_large_layer_keeps_its_kernel_time_and_the_factor_scales_the_floor():
    gpu = load_gpu("h100")
    large = replace(SMALL, seq_length=8192, micro_batch_size=8)
    fwd, _, _ = device_seconds(large, gpu)
    assert analytic_cost(large, gpu).fwd_ms == pytest.approx(fwd * 1e3)
    slow_host = replace(gpu, efficiency=replace(gpu.efficiency, host_factor=2 * gpu.efficiency.host_factor))
    assert host_floor_s(SMALL, slow_host)[0] == pytest.approx(2 * host_floor_s(SMALL, gpu)[0])


def test_an_unmeasured_kind_has_no_floor():
    assert host_time_of("mamba") is None
    assert host_floor_s(replace(SMALL, kind="mamba"), load_gpu("h100")) is None


def test_the_shipped_host_times_are_possible_and_a_broken_file_is_named(tmp_path):
    for kind in ("dense", "moe", "embedding", "output"):
        host = host_time_of(kind)
        assert 0 <= host.fwd_s < 0.1 and 0 <= host.bwd_s < 0.1 and host.fwd_ops > 0
    assert host_time_of("moe").fwd_ops > host_time_of("dense").fwd_ops  # router, dispatch, experts
    bad = tmp_path / "host_time.yaml"
    bad.write_text(yaml.safe_dump({"kinds": {"dense": {"fwd_s": "fast"}}}))
    with pytest.raises(RecipeError) as err:
        _load(bad)
    assert "kinds.dense" in str(err.value) and "measure_host_time" in str(err.value)
