"""The host floor: a layer pass takes the longer of its kernels and megatron-core's host work between them."""

from dataclasses import replace

import pytest
import yaml
from archs import GQA

from primus_ext.errors import RecipeError
from primus_ext.hardware import load_gpu
from primus_ext.hardware.host_time import _load, host_time_of
from primus_ext.model.analytic import analytic_cost, device_seconds
from primus_ext.model.breakdown import host_bound_s
from primus_ext.model.host_floor import host_floor_s
from primus_ext.model.rank_shape import RankShape

SMALL = RankShape(kind="dense", arch=GQA, seq_length=256, micro_batch_size=1)
"""A layer whose kernels take less than its host work on an H100."""


def h100(host_factor: float = 1.0):
    """The H100 profile with a training host of ``host_factor`` x the measuring CPU's host time (the shipped profile
    states none: its floor is not applied)."""
    gpu = load_gpu("h100")
    return replace(gpu, efficiency=replace(gpu.efficiency, host_factor=host_factor))


def test_a_small_layer_is_host_bound_and_a_cuda_graph_lifts_the_floor():
    gpu = h100()
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
    gpu = h100()
    large = replace(SMALL, seq_length=8192, micro_batch_size=8)
    fwd, _, _ = device_seconds(large, gpu)
    assert analytic_cost(large, gpu).fwd_ms == pytest.approx(fwd * 1e3)
    slow_host = replace(gpu, efficiency=replace(gpu.efficiency, host_factor=2 * gpu.efficiency.host_factor))
    assert host_floor_s(SMALL, slow_host)[0] == pytest.approx(2 * host_floor_s(SMALL, gpu)[0])


def test_an_unmeasured_kind_has_no_floor():
    assert host_time_of("mamba") is None
    assert host_floor_s(replace(SMALL, kind="mamba"), h100()) is None


def test_no_floor_where_the_profile_states_no_host_factor_and_the_note_says_what_it_would_add():
    from primus_ext.projection.project import host_bound_notes
    from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

    shipped = load_gpu("h100")
    assert shipped.efficiency.host_factor == 0 and host_floor_s(SMALL, shipped) is None
    assert analytic_cost(SMALL, shipped).fwd_ms == pytest.approx(device_seconds(SMALL, shipped)[0] * 1e3)
    model = ModelSpec(num_layers=2, hidden_size=256, ffn_hidden_size=512, num_attention_heads=8, num_query_groups=2,
                      kv_channels=32, vocab_size=32000)
    notes = host_bound_notes(model, ExecutionSpec(seq_length=256), SystemSpec(gpu=shipped, num_nodes=1), ())
    [may] = [n for n in notes if "host-bound" in n]
    assert may.startswith("may be host-bound") and "not applied" in may and "gpu_kernel_sweep.py --host" in may


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


def test_kernel_classes_add_up_to_the_layer_cost_and_project_names_them():
    from primus_ext.model.breakdown import kernel_classes_s
    from primus_ext.projection.project import host_bound_notes
    from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

    gpu = h100()
    classes = kernel_classes_s(SMALL, gpu)
    cost = analytic_cost(SMALL, gpu)
    assert sum(classes.values()) * 1e3 == pytest.approx(cost.fwd_ms + cost.bwd_ms)
    assert classes["host floor"] > 0 and classes["GEMMs"] > 0 and classes["attention"] > 0
    model = ModelSpec(num_layers=2, hidden_size=256, ffn_hidden_size=512, num_attention_heads=8, num_query_groups=2,
                      kv_channels=32, vocab_size=32000)
    notes = host_bound_notes(model, ExecutionSpec(seq_length=256), SystemSpec(gpu=gpu, num_nodes=1), ())
    assert any(n.startswith("kernels of a dense layer per micro-batch") and "host floor" in n for n in notes)
    assert any(n.startswith("host-bound: a dense layer's passes wait on the host") for n in notes)
    assert not any("embedding" in n or "output" in n for n in notes)
