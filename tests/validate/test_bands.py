"""``validate.bands``: every projected row carries the band ``project`` prints, its measured error taken from the other
models' rows only (leave-one-model-out), and the report says how often the bands hold (issue 53 part 1).

    python -m pytest -q tests/validate/test_bands.py
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_efficiency_fit import fake_projector, rows

from primus_ext.projection.error_bands import MIN_ROWS, ErrorBands, ErrorRow, class_of, summarise
from primus_ext.specs import Efficiency
from primus_ext.validate.bands import coverage, coverage_lines, error_rows, with_bands
from primus_ext.validate.run import validate_runs

FLAT = (0.9, 1.1)
"""A sensitivity band of +-10 %, the same for every row (a stand-in for ``analytic_sensitivity``)."""


def _bands(runs, errors_by_model: dict[str, float]) -> ErrorBands:
    """``MIN_ROWS`` error rows per model, each at that model's error, in the class of the model's first run."""
    out = []
    for model, error in errors_by_model.items():
        run = next(r for r in runs if r.model_name == model)
        cls = class_of(run.model, run.execution, run.system)
        out += [ErrorRow(model=model, band_class=cls, error_pct=error, source=f"{model} {i}") for i in range(MIN_ROWS)]
    return ErrorBands(rows=tuple(out), table=summarise(out))


def test_a_rows_band_never_rests_on_its_own_models_error():
    runs = rows(Efficiency(gemm_max=0.5))
    report = validate_runs(runs, fake_projector)  # projected with the default efficiencies: off from the truth
    bands = _bands(runs, {"A": 300.0, "B": -50.0, "C": -50.0})
    banded = with_bands(report, runs, bands, sensitivity=lambda run: FLAT)
    for row in banded.rows:
        assert row.band is not None
        evidence = row.band.evidence
        assert evidence["level"] == "class" and evidence["n"] == 2 * MIN_ROWS  # the other two models' rows
        projected = row.projected_tokens_per_sec_per_gpu
        if row.model == "A":  # B and C: runs twice the projection; A's own +300 % is left out
            assert (row.band.low, row.band.high) == pytest.approx((projected * 0.9, projected * 2.0))
        else:  # A (+300 %) among the others: the 90th percentile reaches it, the band reaches P / 4
            assert row.band.low < projected * 0.9 and row.band.high == pytest.approx(projected * 2.0)


def test_coverage_counts_the_rows_inside_their_band_per_class_and_level():
    runs = rows(Efficiency(gemm_max=0.2))
    report = validate_runs(runs, fake_projector)
    measured_over_projected = {r.index: r.measured_tokens_per_sec_per_gpu / r.projected_tokens_per_sec_per_gpu
                               for r in report.rows}
    assert all(m < 0.9 for m in measured_over_projected.values())  # every run slower than its -10 % band
    flat = with_bands(report, runs, ErrorBands(rows=(), table={}), sensitivity=lambda run: FLAT)
    assert flat.coverage is not None and (flat.coverage.n, flat.coverage.inside) == (9, 0)
    assert flat.coverage.by_level == {"none": (9, 0)} and flat.coverage.by_class == {"hopper | dense": (9, 0)}
    wide = with_bands(report, runs, sensitivity=lambda run: (0.05, 3.0), bands=ErrorBands(rows=(), table={}))
    assert (wide.coverage.inside, wide.coverage.fraction) == (9, 1.0)
    assert "band coverage 9/9 = 100%" in coverage_lines(wide)[0]


def test_the_report_json_carries_each_band_and_the_coverage():
    jsonschema = pytest.importorskip("jsonschema")
    from primus_ext.results import document
    from primus_ext.results.schema import SCHEMA

    runs = rows(Efficiency(gemm_max=0.5))
    report = with_bands(validate_runs(runs, fake_projector), runs, _bands(runs, {"B": 10.0, "C": -10.0}),
                        sensitivity=lambda run: FLAT)
    doc = report.to_dict()
    band = doc["rows"][0]["band"]
    assert band["unit"] == "tokens_per_s_per_gpu" and band["low"] < band["high"]
    assert band["evidence"]["class"] == {"family": "hopper", "type": "dense", "precision": "bf16", "scale": "<=64"}
    summary = doc["summary"]["band_coverage"]
    assert summary["n"] == 9 and 0 <= summary["fraction"] <= 1 and "leave-one-model-out" in summary["what"]
    jsonschema.validate(document("validation", **doc, one_run_offset_summary={}), SCHEMA)


def test_rows_unprojected_carry_no_band():
    runs = rows(Efficiency(gemm_max=0.5))
    report = validate_runs(runs, fake_projector)
    report = replace(report, rows=(replace(report.rows[0], projected_tokens_per_sec_per_gpu=None, error_pct=None),
                                   *report.rows[1:]))
    banded = with_bands(report, runs, ErrorBands(rows=(), table={}), sensitivity=lambda run: FLAT)
    assert banded.rows[0].band is None and banded.coverage.n == 8
    assert coverage(banded.rows) == banded.coverage


def test_error_rows_take_each_held_out_rows_class():
    runs = rows(Efficiency(gemm_max=0.5))
    report = validate_runs(runs, fake_projector)
    found = error_rows(report.rows, runs, "fixture.csv")
    assert [r.source for r in found] == [f"fixture.csv row {i}" for i in range(9)]
    assert found[0].error_pct == pytest.approx(report.rows[0].error_pct)
    assert found[0].band_class == class_of(runs[0].model, runs[0].execution, runs[0].system)
    assert {r.holdout for r in found} == {"model"}  # a model held out: evidence for any projection
    assert {r.holdout for r in error_rows(report.rows, runs, "mlperf.csv", "submission")} == {"submission"}
