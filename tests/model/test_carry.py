"""Carrying a measured cost to its shape's precision and to another GPU of the family (``model.carry``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from archs import GQA

from primus_ext.hardware import load_gpu
from primus_ext.model.analytic import analytic_cost
from primus_ext.model.carry import carry_cost, measured_precision
from primus_ext.model.costs import CostOrigin, LayerCost
from primus_ext.model.rank_shape import RankShape

FP8 = RankShape(kind="dense", arch=replace(GQA, hidden_size=2048, ffn_hidden_size=8192, num_attention_heads=16,
                                           num_query_groups=4, kv_channels=128),
                seq_length=4096, micro_batch_size=2, precision="fp8")
"""Wide enough that FP8 pays for its casts (``model.fp8.quantise_seconds``) and its kernels, not the host floor
(``model.host_floor``), set its time in both precisions."""


def test_a_bf16_measurement_of_an_fp8_shape_takes_the_roofline_ratio_once():
    h200 = load_gpu("h200")
    bf16 = analytic_cost(replace(FP8, precision="bf16"), h200)
    measured = replace(bf16, fwd_ms=2 * bf16.fwd_ms, origin=CostOrigin.parse("measured:NVIDIA H200;as-bf16;stand-ins"))
    assert measured_precision(measured) == "bf16"
    carried = carry_cost(measured, FP8, measured_on=h200, target=h200)
    fp8 = analytic_cost(FP8, h200)
    assert carried.fwd_ms == pytest.approx(2 * fp8.fwd_ms)  # what the roofline does not see is kept
    assert carried.bwd_ms == pytest.approx(fp8.bwd_ms)
    assert fp8.fwd_ms < bf16.fwd_ms
    assert carried.source == "measured:NVIDIA H200;stand-ins carried bf16 measurement to fp8 by the analytic ratio"
    assert carry_cost(carried, FP8, measured_on=h200, target=h200) is carried  # no tag left: not carried twice


def test_a_cost_measured_as_its_shape_on_the_same_gpu_is_returned_as_is():
    h200 = load_gpu("h200")
    cost = LayerCost(fwd_ms=1.0, bwd_ms=2.0, origin=CostOrigin.parse("measured:NVIDIA H200"))
    assert carry_cost(cost, FP8, measured_on=h200, target=h200) is cost
    on_h100 = carry_cost(cost, FP8, measured_on=h200, target=load_gpu("h100"))
    assert on_h100.fwd_ms > cost.fwd_ms and on_h100.source.endswith("carried to h100 by the analytic ratio")
