"""What the projection does with store entries that ran otherwise than their shape says: an FP8 shape measured
in bf16 (carried by the roofline's ratio) and saved bytes taken with PyTorch stand-ins for TE (not used)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from projection_specs import LLAMA

from primus_ext.hardware import load_system
from primus_ext.model.analytic import analytic_cost
from primus_ext.model.costs import MEASURED_AS_TAG, STAND_IN_TAG, CostOrigin
from primus_ext.projection import project
from primus_ext.specs import ExecutionSpec

FP8 = ExecutionSpec(tensor_model_parallel_size=2, data_parallel_size=4, seq_length=4096, micro_batch_size=1,
                    global_batch_size=64, precision="fp8")


class Bf16Store:
    """Every layer as the roofline prices it in bf16 on the GPU, tagged as a store entry of that run."""

    def __init__(self, gpu, tags: str) -> None:
        self.gpu, self.tags = gpu, tags

    def cost(self, shape):
        bf16 = analytic_cost(replace(shape, precision="bf16"), self.gpu)
        return replace(bf16, saved_bytes=10**9, origin=CostOrigin.parse(f"measured:NVIDIA H200{self.tags}"))


def test_an_fp8_shape_measured_in_bf16_is_projected_at_fp8_speed():
    system = load_system("h200", 1)
    analytic = project(LLAMA, FP8, system)
    carried = project(LLAMA, FP8, system, Bf16Store(system.gpu, f"{MEASURED_AS_TAG}bf16"))
    raw = project(LLAMA, FP8, system, Bf16Store(system.gpu, ""))  # the same entries, not said to be bf16
    assert carried.tokens_per_s_per_gpu == pytest.approx(analytic.tokens_per_s_per_gpu, rel=1e-6)
    assert raw.tokens_per_s_per_gpu < 0.9 * carried.tokens_per_s_per_gpu
    assert "carried bf16 measurement to fp8" in carried.sources["dense"]
    low, high = carried.band  # carried at the nominal efficiencies: the band moves only what is analytic
    assert low < carried.tokens_per_s_per_gpu < high


def test_saved_bytes_measured_with_stand_ins_leave_the_te_formula():
    system = load_system("h200", 1)
    analytic = project(LLAMA, FP8, system)
    stand_ins = project(LLAMA, FP8, system, Bf16Store(system.gpu, f"{MEASURED_AS_TAG}bf16{STAND_IN_TAG}"))
    te = project(LLAMA, FP8, system, Bf16Store(system.gpu, f"{MEASURED_AS_TAG}bf16"))
    assert stand_ins.memory.peak_bytes == analytic.memory.peak_bytes
    assert te.memory.peak_bytes != analytic.memory.peak_bytes  # a TE measurement does rescale the formula
    assert any("stand-ins" in n for n in stand_ins.notes)
