"""MFU on every console and page: a percent, against a named peak; FP8 runs also against the BF16 peak (issue 43)."""

from __future__ import annotations

import dataclasses

import pytest

from primus_ext.hardware import load_gpu, load_system
from primus_ext.projection import project
from primus_ext.report.compare import compare_rows, format_compare
from primus_ext.report.html import render_html
from primus_ext.report.mfu import bf16_mfu, mfu_basis, mfu_text
from primus_ext.report.projection_table import format_projection


def test_the_basis_is_the_peak_the_figure_divides_by():
    gpu = load_gpu("mi325x")
    assert mfu_basis(gpu, "fp8") == "FP8" and mfu_basis(gpu, "bf16") == "BF16"
    assert bf16_mfu(0.25, gpu, "fp8") == pytest.approx(0.25 * gpu.fp8_dense_tflops / gpu.bf16_dense_tflops)
    assert mfu_text(0.25, gpu, "fp8") == (f"MFU 25.0% of the {gpu.fp8_dense_tflops:,.0f} TFLOP/s FP8 dense peak; "
                                          f"{bf16_mfu(0.25, gpu, 'fp8'):.1%} of the BF16 peak")
    assert mfu_text(0.4, gpu, "bf16") == f"MFU 40.0% of the {gpu.bf16_dense_tflops:,.0f} TFLOP/s BF16 dense peak"
    no_fp8 = dataclasses.replace(gpu, fp8_dense_tflops=0.0)  # FP8 without FP8 tensor cores runs on the BF16 peak
    assert mfu_basis(no_fp8, "fp8") == "BF16" and "BF16 dense peak" in mfu_text(0.3, no_fp8, "fp8")


def test_project_html_and_compare_say_percent_and_basis(projection):
    fp8 = project(projection.model, dataclasses.replace(projection.execution, precision="fp8"), projection.system)
    text = format_projection(fp8)
    assert f"({mfu_text(fp8.mfu, fp8.system.gpu, 'fp8')})" in text and "of the BF16 peak" in text
    assert "(1 node)" in text.splitlines()[0] and "1 nodes" not in text
    assert "TFLOP/s BF16 dense peak)" in format_projection(projection)
    assert "FP8 dense peak" in render_html(fp8)
    rows = {r.name: r for r in compare_rows(projection, fp8)}
    assert rows["MFU (of each side's precision peak)"].better == ""  # two peaks: no better / worse
    assert rows["MFU (of the BF16 dense peak)"].b == pytest.approx(bf16_mfu(fp8.mfu, fp8.system.gpu, "fp8") * 100)
    same = {r.name for r in compare_rows(projection, projection)}
    assert "MFU (of the BF16 dense peak)" in same and len([n for n in same if n.startswith("MFU")]) == 1
    assert "%" in format_compare(compare_rows(projection, fp8), ("A", "B"))
    two = project(projection.model, projection.execution, load_system("h100", 2))
    assert "(2 nodes)" in format_projection(two).splitlines()[0]
