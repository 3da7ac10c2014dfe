"""No impossible figure reaches the user (issue 31): MFU above 100 %, a negative band, NaN statistics, a multi-node
cluster without a network, another device's timings - each is refused or impossible by construction."""

from __future__ import annotations

import math

import pytest
from projection_specs import LLAMA

from primus_ext.cli import main
from primus_ext.errors import PrimusExtError
from primus_ext.hardware import load_system
from primus_ext.model.costs import CostOrigin, LayerCost
from primus_ext.model.layers import rank_shapes
from primus_ext.projection import project
from primus_ext.specs import ExecutionSpec

RECIPE = "recipes/llama3.1_8B-pretrain.yaml"
EX = ExecutionSpec(data_parallel_size=8, global_batch_size=64, seq_length=4096, micro_batch_size=1)


class Dense:
    """A provider of the dense layer only, at a chosen time and spread."""

    def __init__(self, shape, ms: float, spread: float = 0.0):
        self.shape, self.ms, self.spread = shape, ms, spread

    def cost(self, shape):
        if shape != self.shape:
            return None
        return LayerCost(fwd_ms=self.ms, bwd_ms=2 * self.ms, fwd_spread=self.spread, bwd_spread=self.spread,
                         origin=CostOrigin.parse("measured:fake"))


def test_costs_faster_than_the_peak_are_refused_with_their_cause():
    system = load_system("h100", 1)
    fast = Dense(rank_shapes(LLAMA, EX)["dense"], ms=1e-6)
    with pytest.raises(PrimusExtError, match=r"peak .*impossible.*measured:fake"):
        project(LLAMA, EX, system, fast)


def test_a_noisy_measurement_widens_the_band_without_going_below_zero():
    system = load_system("h100", 1)
    dense = rank_shapes(LLAMA, EX)["dense"]
    plain = project(LLAMA, EX, system, Dense(dense, ms=50.0))
    noisy = project(LLAMA, EX, system, Dense(dense, ms=50.0, spread=5.0))  # (p90-p10)/median of 500 %
    assert 0 < noisy.band[0] < plain.band[0] <= plain.tokens_per_s_per_gpu <= plain.band[1] < noisy.band[1]
    assert 0 < noisy.mfu <= 1


def test_a_cluster_without_a_network_is_one_node(capsys):
    assert main(["project", RECIPE, "--cluster", "cpu", "--nodes", "8"]) == 2
    err = capsys.readouterr().err
    assert "no scale-out network" in err and "Traceback" not in err


def test_this_machines_timings_do_not_price_another_gpu_unless_asked(capsys):
    assert main(["project", RECIPE, "--cluster", "mi325x", "--nodes", "1", "--compute", "measured"]) == 2
    err = capsys.readouterr().err
    assert "--accept-scaled" in err and "mi325x" in err


def test_rank_statistics_of_equal_values_are_not_a_number_anyone_sees():
    from primus_ext.validate.run import _finite

    assert _finite({"a": math.nan, "b": 0.5}) == {"a": None, "b": 0.5}


def test_the_cpu_profile_peak_is_not_below_what_this_machine_measures():
    """The cpu profile's bf16 peak was an AVX2 fp32 bound (0.16 TFLOP/s) below the machine's measured 0.4."""
    cpu = load_system("cpu", 1).gpu
    assert cpu.peak_tflops("bf16") >= 0.4


def test_over_the_margin_and_out_of_memory_are_different_verdicts():
    from primus_ext.model.memory import DEFAULT_MARGIN, margin_verdict

    assert DEFAULT_MARGIN == 0.05
    assert margin_verdict(90, 100) == "fits"
    assert margin_verdict(97, 100) == "over the margin"
    assert margin_verdict(101, 100) == "within the model's error"  # memory.MEMORY_ERROR: 17.5 %
    assert margin_verdict(117.5, 100) == "within the model's error"
    assert margin_verdict(118, 100) == "out of memory"
    assert margin_verdict(97, 100, margin=0.0) == "fits"


def test_the_tuner_states_its_margin_and_labels_the_recipe_by_its_verdict():
    from types import SimpleNamespace

    from primus_ext.report.tune_table import _baseline_label

    over = SimpleNamespace(status="oom", memory=SimpleNamespace(peak_bytes=97, capacity_bytes=100))
    oom = SimpleNamespace(status="oom", memory=SimpleNamespace(peak_bytes=101, capacity_bytes=100))
    assert _baseline_label(over) == " (over the margin)" and _baseline_label(oom) == " (out of memory)"
