"""Each validated row's band, and how often the bands hold the measured values (coverage).

    report = with_bands(report, runs)            # rows carry ``band`` (tokens/s/GPU), the report its ``coverage``
    report.coverage.fraction, report.coverage.by_class["hopper | dense"]
    rows = error_rows(cv_report.rows, runs, "measured_throughput.csv")   # benchmarks/error_bands.py's rows

A row's band is the one ``project`` prints for its configuration (``projection.error_bands.widest``: per side the
wider of the sensitivity band and its class's 80 % error interval), with one difference that keeps coverage honest:
the class's error comes from the shipped rows of every *other* model (``ErrorBands.without``: leave-one-model-out),
never from the row's own. The sensitivity band is taken at the row's specs as read (its profile's efficiencies) and
applied, as factors, to whatever projected the row (a cross-validation fold's fit included).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace

from primus_ext.errors import PrimusExtError
from primus_ext.projection.error_bands import ErrorBands, ErrorRow, Holdout, class_of, shipped, widest
from primus_ext.validate.run import Coverage, RowBand, RowResult, ValidationReport
from primus_ext.validate.runs import RunRow

Sensitivity = Callable[[RunRow], tuple[float, float] | None]
"""A row -> its sensitivity band as factors of its projected throughput (None: cannot be projected)."""


def analytic_sensitivity(run: RunRow) -> tuple[float, float] | None:
    """The sensitivity band of ``run``'s analytic projection (``projection.project.sensitivity_band``) as factors."""
    from primus_ext.projection import evaluate
    from primus_ext.projection.project import sensitivity_band

    assert run.model is not None and run.execution is not None and run.system is not None
    try:
        tokens = evaluate(run.model, run.execution, run.system).tokens_per_s_per_gpu
        low, high = sensitivity_band(run.model, run.execution, run.system)
    except PrimusExtError:
        return None
    return (low / tokens, high / tokens) if tokens > 0 else None


def row_band(row: RowResult, run: RunRow, bands: ErrorBands, factors: tuple[float, float]) -> RowBand | None:
    """``row``'s band: its projection widened per side by its sensitivity ``factors`` and by its class's error taken
    from the other models' rows of ``bands``; None when the row was not projected."""
    projected = row.projected_tokens_per_sec_per_gpu
    if projected is None or run.model is None or run.execution is None or run.system is None:
        return None
    evidence = bands.without(row.model).evidence(class_of(run.model, run.execution, run.system))
    low, high = widest(projected, (projected * factors[0], projected * factors[1]), evidence)
    measured = row.measured_tokens_per_sec_per_gpu
    return RowBand(low=low, high=high, inside=low <= measured <= high, evidence=evidence.to_dict())


def coverage(rows: Sequence[RowResult]) -> Coverage:
    """How many banded rows hold their measured value, overall, per ``family | type`` and per evidence level."""
    by_class: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    by_level: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        if r.band is None:
            continue
        cls = r.band.evidence["class"]
        for counts in (by_class[f"{cls['family']} | {cls['type']}"], by_level[r.band.evidence["level"]]):
            counts[0] += 1
            counts[1] += int(r.band.inside)
    banded = [r for r in rows if r.band is not None]
    return Coverage(n=len(banded), inside=sum(r.band.inside for r in banded if r.band is not None),
                    by_class={k: (n, i) for k, (n, i) in sorted(by_class.items())},
                    by_level={k: (n, i) for k, (n, i) in sorted(by_level.items())})


def with_bands(report: ValidationReport, runs: Sequence[RunRow], bands: ErrorBands | None = None,
               sensitivity: Sensitivity = analytic_sensitivity,
               cache: dict[tuple, tuple[float, float] | None] | None = None) -> ValidationReport:
    """``report`` with a band on each projected row and the coverage of those bands (``cache``: sensitivity factors by
    configuration, shared between the reports of one command: rows repeating a configuration share its factors)."""
    bands = bands if bands is not None else shipped()
    by_index = {r.index: r for r in runs}
    cache = {} if cache is None else cache
    rows = []
    for row in report.rows:
        run = by_index.get(row.index)
        if row.projected_tokens_per_sec_per_gpu is None or run is None or run.model is None:
            rows.append(row)
            continue
        key = run.configuration
        if key not in cache:
            cache[key] = sensitivity(run)
        factors = cache[key]
        rows.append(row if factors is None else replace(row, band=row_band(row, run, bands, factors)))
    return replace(report, rows=tuple(rows), coverage=coverage(rows))


def error_rows(results: Sequence[RowResult], runs: Sequence[RunRow], source: str,
               holdout: Holdout = "model") -> list[ErrorRow]:
    """The held-out rows of a cross-validation as the error bands' rows (``benchmarks/error_bands.py``); ``holdout``:
    what its folds left out (a row's model, or only its own submission: ``ErrorRow.holdout``)."""
    by_index = {r.index: r for r in runs}
    out = []
    for r in results:
        run = by_index.get(r.index)
        if r.error_pct is None or run is None or run.model is None or run.execution is None or run.system is None:
            continue
        out.append(ErrorRow(model=r.model, band_class=class_of(run.model, run.execution, run.system),
                            error_pct=r.error_pct, source=f"{source} row {r.index}", gpu=r.gpu, gpus=r.num_gpus,
                            holdout=holdout))
    return out


def coverage_lines(report: ValidationReport) -> list[str]:
    """The coverage summary, one line overall and one per class."""
    c = report.coverage
    if c is None or not c.n:
        return []
    lines = [f"  band coverage {c.inside}/{c.n} = {c.fraction:.0%} of rows inside their band (nominal 80 %; each "
             "band's error from the other models' rows)"]
    for name, (n, inside) in c.by_class.items():
        lines.append(f"    {name:<24} {inside:>3}/{n:<3} {inside / n:>5.0%}")
    levels = ", ".join(f"{level} {inside}/{n}" for level, (n, inside) in c.by_level.items())
    lines.append(f"    by evidence level: {levels}")
    return lines


__all__ = ["analytic_sensitivity", "coverage", "coverage_lines", "error_rows", "row_band", "with_bands"]
