"""A cost's origin: typed fields for the readers, one label string for the store and the output."""

from __future__ import annotations

import pytest

from primus_ext.model.costs import ANALYTIC, CostOrigin, LayerCost


@pytest.mark.parametrize("origin", [
    ANALYTIC,
    CostOrigin(producer="measured", device="cpu", scale=0.125, sequence_unsplit=True),
    CostOrigin(producer="measured", device="NVIDIA H200", measured_as="bf16", stand_ins=True),
    CostOrigin(producer="store", device="h100"),
])
def test_the_label_reads_back_as_the_same_origin(origin: CostOrigin) -> None:
    assert CostOrigin.parse(origin.label) == origin


def test_labels_are_the_strings_the_output_always_carried() -> None:
    scaled = CostOrigin(producer="measured", device="cpu", scale=0.125, sequence_unsplit=True)
    assert scaled.label == "measured:cpu@scale=0.125;sp-unsplit" and scaled.on_cpu
    gpu = CostOrigin(producer="measured", device="NVIDIA H200", measured_as="bf16", stand_ins=True)
    assert gpu.label == "measured:NVIDIA H200;as-bf16;stand-ins" and not gpu.on_cpu
    assert LayerCost(fwd_ms=1.0, bwd_ms=2.0).source == "analytic"
    assert CostOrigin.parse("analytic+lora") == CostOrigin(note="+lora")
