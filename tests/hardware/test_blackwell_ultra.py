"""Blackwell Ultra (B300 / GB300): what its profiles state beyond B200 / GB200, the softmax's SFU term in attention,
and the efficiencies it inherits (no B300 / GB300 run exists to fit them)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus_ext.hardware import list_profiles, load_gpu, load_system
from primus_ext.model.analytic import layer_parts
from primus_ext.model.layers import rank_shapes
from primus_ext.model.roofline import softmax_sfu_factor
from primus_ext.projection import project
from primus_ext.report.projection_table import format_projection
from primus_ext.specs import ExecutionSpec, ModelSpec

PAIRS = [("b300", "b200"), ("gb300", "gb200")]
MODEL = ModelSpec(name="m", num_layers=4, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                  num_query_groups=8, kv_channels=128, vocab_size=128256, activation="swiglu")


@pytest.mark.parametrize(("ultra", "base"), PAIRS)
def test_ultra_states_what_differs_from_blackwell(ultra, base):
    u, b = load_gpu(ultra), load_gpu(base)
    assert (u.bf16_dense_tflops, u.fp8_dense_tflops) == (b.bf16_dense_tflops, b.fp8_dense_tflops)
    assert u.fp4_dense_tflops / b.fp4_dense_tflops == pytest.approx(1.5, abs=0.06)  # 14 / 9, 15 / 10 PF dense
    assert u.sfu_exp_per_s == 2 * b.sfu_exp_per_s  # doubled SFU exponential throughput
    assert u.hbm_bytes > b.hbm_bytes and u.hbm_bytes < 288e9  # usable 270 / 279 GB of 288 physical
    assert u.nic_bandwidth_bytes_per_s == 2 * b.nic_bandwidth_bytes_per_s == 800e9 / 8  # ConnectX-8
    assert u.tdp_w > b.tdp_w
    assert u.inherits_efficiency_from == base
    assert replace(u.efficiency, attention_sfu_exp_per_s=0.0) == b.efficiency  # the same fitted values
    assert u.efficiency.attention_sfu_exp_per_s == b.sfu_exp_per_s


def test_every_gpu_with_its_own_calibration_keeps_its_attention_time():
    for name in list_profiles():
        gpu = load_gpu(name)
        factor = softmax_sfu_factor(128, gpu)
        parent = load_gpu(gpu.inherits_efficiency_from) if gpu.inherits_efficiency_from else None
        # B300 / GB300 state faster SFUs than the parent they inherit from; MI350X states none, H800 H100's own
        faster_sfus = parent is not None and gpu.sfu_exp_per_s and gpu.sfu_exp_per_s != parent.sfu_exp_per_s
        assert factor == (pytest.approx(1 - 96 / 224 / 2) if faster_sfus else 1.0)


@pytest.mark.parametrize(("ultra", "base"), PAIRS)
def test_only_attention_runs_faster_on_ultra_by_the_softmax_share(ultra, base):
    shape = rank_shapes(MODEL, ExecutionSpec(tensor_model_parallel_size=2, seq_length=8192))["dense"]
    u, b = layer_parts(shape, load_gpu(ultra)), layer_parts(shape, load_gpu(base))
    assert u.fwd["core_attn"] == pytest.approx(b.fwd["core_attn"] * (1 - 96 / 224 / 2))
    assert u.fwd["mlp"] == pytest.approx(b.fwd["mlp"] * load_gpu(base).bf16_dense_tflops /
                                         load_gpu(ultra).bf16_dense_tflops)


def test_a_projection_on_b300_says_its_efficiencies_are_b200s():
    execution = ExecutionSpec(tensor_model_parallel_size=2, data_parallel_size=4, global_batch_size=64,
                              seq_length=8192, sequence_parallel=True)
    system = load_system("b300", 1)
    text = format_projection(project(MODEL, execution, system))
    assert "inherited from b200 (no measured run of this GPU)" in text
