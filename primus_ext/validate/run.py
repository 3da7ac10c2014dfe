"""Project every measured row and compare: the ``ValidationReport`` behind ``primus-ext validate``.

A *projector* maps one ``RunRow`` (model / execution / system specs) to projected tokens/s/GPU. The
default uses the analytic projection (``primus_ext.projection.evaluate`` over the roofline cost
provider); tests and calibration pass their own. A projector signals a row it cannot project by
raising ``PrimusExtError``; the row is then listed as skipped with that reason.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from primus_ext.errors import INTERNAL_ERRORS, PrimusExtError
from primus_ext.validate.ceiling import p90_floor, spearman_ceiling
from primus_ext.validate.runs import RunRow
from primus_ext.validate.stats import kendall_tau_b, percentile, spearman

Projector = Callable[[RunRow], float]


def once_per_configuration(projector: Projector) -> Projector:
    """``projector`` called once per distinct (model, execution, system) of the rows it is given; a row repeating
    another's configuration gets the same figure, or the same refusal, without a second projection. A projector
    reads only those three specs, so this changes no figure; it bounds the work of a CSV that repeats one run
    (the measured development set repeats 37 of its 146 configurations; a 2 000-row copy of one row projected 2 000
    times took 4.8 CPU-s, and ``--fit`` over it 77; issue 56)."""
    seen: dict[tuple, float | BaseException] = {}

    def project(run: RunRow) -> float:
        key = run.configuration
        if key not in seen:
            try:
                seen[key] = projector(run)
            except (PrimusExtError, *INTERNAL_ERRORS) as err:
                seen[key] = err
        found = seen[key]
        if isinstance(found, BaseException):
            raise found.with_traceback(None)  # not the frames of every earlier raise
        return found

    return project

MIN_GROUP_ROWS = 3
"""Rank correlations are reported for model x GPU x precision groups of at least this many rows."""


@dataclass(frozen=True, kw_only=True)
class RowBand:
    """A row's band in tokens/s/GPU: the band ``project`` prints for it (``validate.bands``: per side the wider of the
    sensitivity band and its class's measured error), the error taken from the other models' rows only."""

    low: float
    high: float
    inside: bool
    """The measured value lies in [low, high]."""
    evidence: dict
    """``projection.error_bands.Evidence.to_dict()``: the class, the level the evidence was pooled at, n."""

    def to_dict(self) -> dict:
        return {"low": self.low, "high": self.high, "unit": "tokens_per_s_per_gpu", "inside": self.inside,
                "evidence": self.evidence}


@dataclass(frozen=True, kw_only=True)
class Coverage:
    """How often the measured value falls inside its row's band: overall, per class (family | type) and per level."""

    n: int
    inside: int
    by_class: dict[str, tuple[int, int]] = field(default_factory=dict)
    """``family | type`` -> (rows, rows inside)."""
    by_level: dict[str, tuple[int, int]] = field(default_factory=dict)
    """The evidence's level (``error_bands.LEVELS`` or ``none``) -> (rows, rows inside)."""

    @property
    def fraction(self) -> float:
        return self.inside / self.n if self.n else math.nan

    def to_dict(self) -> dict:
        def part(pairs: dict[str, tuple[int, int]]) -> dict:
            return {k: {"n": n, "inside": i, "fraction": i / n} for k, (n, i) in pairs.items()}

        return {"n": self.n, "inside": self.inside, "fraction": self.fraction if self.n else None,
                "by_class": part(self.by_class), "by_level": part(self.by_level),
                "what": "rows whose measured tokens/s/GPU lies inside their band; each band's measured error taken "
                        "from the other models' rows (leave-one-model-out), the nominal 80 % interval"}


@dataclass(frozen=True, kw_only=True)
class RowResult:
    index: int
    model: str
    gpu: str
    num_gpus: int
    precision: str
    measured_tokens_per_sec_per_gpu: float
    projected_tokens_per_sec_per_gpu: float | None = None
    error_pct: float | None = None
    """Signed: (projected - measured) / measured * 100."""
    skipped_reason: str = ""
    config: str = ""
    """The row's specs as read (model, execution, system): rows sharing it get one projection from any
    function of the specs (``ceiling``); empty = distinct from every other row."""
    band: RowBand | None = None
    """Set by ``validate.bands.with_bands`` on a projected row."""

    @property
    def group(self) -> str:
        return f"{self.model} | {self.gpu} | {self.precision}"


@dataclass(frozen=True, kw_only=True)
class ModelErrors:
    """One model's projected rows: how many, the median signed error (its bias), the median and max |error|."""

    n: int
    median_error_pct: float
    median_abs_error_pct: float
    max_abs_error_pct: float


@dataclass(frozen=True, kw_only=True)
class Summary:
    n_projected: int
    n_skipped: int
    median_abs_error_pct: float
    p90_abs_error_pct: float
    max_abs_error_pct: float
    spearman_by_group: dict[str, float] = field(default_factory=dict)
    kendall_by_group: dict[str, float] = field(default_factory=dict)
    spearman_ceiling_by_group: dict[str, float] = field(default_factory=dict)
    """The best rho any projection reaches that gives rows of one configuration one value."""
    p90_floor_abs_error_pct: float = math.nan
    """A lower bound of the p90 any such projection can have (``ceiling.p90_floor``)."""
    mean_abs_log_error: float = math.nan
    """Mean |log(projected / measured)|: what the calibration minimises (``calibrate.mean_abs_log``)."""
    n_above_20_pct: int = 0
    """Rows whose |error| exceeds 20 % (the p90 target of issue 6)."""
    by_model: dict[str, ModelErrors] = field(default_factory=dict)
    """Per model, worst median |error| first: which models the error comes from."""


@dataclass(frozen=True, kw_only=True)
class ValidationReport:
    rows: tuple[RowResult, ...]
    summary: Summary
    label: str = ""
    """What produced the projections (e.g. "analytic, calibrated profiles", "leave-one-model-out")."""
    coverage: Coverage | None = None
    """How often the rows' bands hold their measured value (``validate.bands.with_bands``)."""

    def worst(self, n: int = 10) -> list[RowResult]:
        scored = [r for r in self.rows if r.error_pct is not None]
        return sorted(scored, key=lambda r: -abs(r.error_pct or 0.0))[:n]

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "rows": [
                {
                    "index": r.index,
                    "model": r.model,
                    "gpu": r.gpu,
                    "num_gpus": r.num_gpus,
                    "precision": r.precision,
                    "measured_tokens_per_s_per_gpu": r.measured_tokens_per_sec_per_gpu,  # the result schema's name
                    "projected_tokens_per_s_per_gpu": r.projected_tokens_per_sec_per_gpu,
                    "error_pct": r.error_pct,
                    "skipped_reason": r.skipped_reason or None,
                    **({"band": r.band.to_dict()} if r.band is not None else {}),
                }
                for r in self.rows
            ],
            "summary": {
                "n_projected": self.summary.n_projected,
                "n_skipped": self.summary.n_skipped,
                "median_abs_error_pct": self.summary.median_abs_error_pct,
                "p90_abs_error_pct": self.summary.p90_abs_error_pct,
                "max_abs_error_pct": self.summary.max_abs_error_pct,
                "spearman_by_group": _finite(self.summary.spearman_by_group),
                "kendall_by_group": _finite(self.summary.kendall_by_group),
                "spearman_ceiling_by_group": _finite(self.summary.spearman_ceiling_by_group),
                "p90_floor_abs_error_pct": self.summary.p90_floor_abs_error_pct,
                "mean_abs_log_error": self.summary.mean_abs_log_error,
                "n_above_20_pct": self.summary.n_above_20_pct,
                "by_model": {name: vars(m) for name, m in self.summary.by_model.items()},
                **({"band_coverage": self.coverage.to_dict()} if self.coverage is not None else {}),
            },
        }


def _finite(by_group: dict[str, float]) -> dict[str, float | None]:
    """A rank statistic per group with NaN (a group whose values are all equal: no ranking) as null: JSON has no
    NaN."""
    return {group: None if math.isnan(value) else value for group, value in by_group.items()}


def _result(run: RunRow, projected: float | None, reason: str = "") -> RowResult:
    error = None
    if projected is not None and run.measured_tokens_per_sec_per_gpu > 0:
        error = (projected - run.measured_tokens_per_sec_per_gpu) / run.measured_tokens_per_sec_per_gpu * 100.0
    return RowResult(
        index=run.index, model=run.model_name, gpu=run.gpu, num_gpus=run.num_gpus,
        precision=run.execution.precision if run.execution else run.precision_label,
        measured_tokens_per_sec_per_gpu=run.measured_tokens_per_sec_per_gpu,
        projected_tokens_per_sec_per_gpu=projected, error_pct=error,
        skipped_reason=reason or run.skipped_reason,
        config=repr((run.model, run.execution, run.system)) if run.model is not None else "",
    )


def project_rows(runs: Iterable[RunRow], projector: Projector) -> list[RowResult]:
    """Project each usable row; rows the projector refuses are skipped with its reason, rows it fails on with the
    error (``INTERNAL_ERRORS``: said as an internal error to report)."""
    results = []
    projector = once_per_configuration(projector)
    for run in runs:
        if run.model is None:
            results.append(_result(run, None))
            continue
        try:
            projected = projector(run)
        except PrimusExtError as err:
            results.append(_result(run, None, f"projection refused: {str(err).splitlines()[-1].strip(' -')}"))
            continue
        except INTERNAL_ERRORS as err:
            results.append(_result(run, None, f"internal error ({type(err).__name__}: {err}): the projection failed "
                                              "on this row; please report it"))
            continue
        results.append(_result(run, projected))
    return results


def summarize(rows: Sequence[RowResult]) -> Summary:
    errors = [abs(r.error_pct) for r in rows if r.error_pct is not None]
    groups: dict[str, list[RowResult]] = defaultdict(list)
    for r in rows:
        if r.error_pct is not None:
            groups[r.group].append(r)
    rho, tau, ceiling = {}, {}, {}
    for name, members in sorted(groups.items()):
        if len(members) < MIN_GROUP_ROWS:
            continue
        measured = [m.measured_tokens_per_sec_per_gpu for m in members]
        projected = [m.projected_tokens_per_sec_per_gpu or 0.0 for m in members]
        rho[name] = spearman(measured, projected)
        tau[name] = kendall_tau_b(measured, projected)
        ceiling[name] = spearman_ceiling(measured, [_config(m) for m in members])
    scored = [r for r in rows if r.error_pct is not None]
    return Summary(
        n_projected=len(errors),
        n_skipped=sum(1 for r in rows if r.error_pct is None),
        median_abs_error_pct=percentile(errors, 50),
        p90_abs_error_pct=percentile(errors, 90),
        max_abs_error_pct=max(errors) if errors else math.nan,
        spearman_by_group=rho,
        kendall_by_group=tau,
        spearman_ceiling_by_group=ceiling,
        p90_floor_abs_error_pct=p90_floor([r.measured_tokens_per_sec_per_gpu for r in scored],
                                          [_config(r) for r in scored]),
        mean_abs_log_error=(sum(abs(math.log1p(r.error_pct / 100.0)) for r in scored) / len(scored)  # type: ignore[operator]
                            if scored else math.nan),
        n_above_20_pct=sum(1 for e in errors if e > 20.0),
        by_model=errors_by_model(scored),
    )


def errors_by_model(rows: Sequence[RowResult]) -> dict[str, ModelErrors]:
    """``ModelErrors`` of each model's projected rows, the model with the largest median |error| first."""
    by: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.error_pct is not None:
            by[r.model].append(r.error_pct)
    out = {name: ModelErrors(n=len(errs), median_error_pct=percentile(errs, 50),
                             median_abs_error_pct=percentile([abs(e) for e in errs], 50),
                             max_abs_error_pct=max(abs(e) for e in errs))
           for name, errs in by.items()}
    return dict(sorted(out.items(), key=lambda kv: (-kv[1].median_abs_error_pct, kv[0])))


def _config(row: RowResult) -> str:
    return row.config or f"row {row.index}"


def validate_runs(runs: Sequence[RunRow], projector: Projector, *, label: str = "") -> ValidationReport:
    rows = project_rows(runs, projector)
    return ValidationReport(rows=tuple(rows), summary=summarize(rows), label=label)


def analytic_projector(run: RunRow) -> float:
    """Projected tokens/s/GPU of a row from the analytic projection (roofline costs, never a stored calibration:
    ``primus_ext.session.Session.analytic``)."""
    from primus_ext.session import Session

    assert run.model is not None and run.execution is not None and run.system is not None
    return Session.analytic().evaluate(run.model, run.execution, run.system).tokens_per_s_per_gpu
