"""The band as a measured error: per class of projection, the signed error cross-validation measured on published runs.

    cls = class_of(model, execution, system)          # BandClass(family="hopper", kind="dense", precision="fp8", ...)
    evidence = shipped().evidence(cls)                 # Evidence: level, n, the 80 % interval of the signed error
    evidence.factors()                                 # (low, high) as factors of the projected tokens/s/GPU, or None
    shipped().without("Llama3-70B").evidence(cls)      # the same from the other models' rows only (validate's coverage)

A class is GPU family x model type (dense / moe / hybrid) x precision x scale bucket (GPUs). Where a class has fewer
than ``MIN_ROWS`` rows its evidence is pooled upward (``LEVELS``: family x type x precision, then family x type, then
all rows) and the interval is widened to the extremes of the most specific of its family's levels that has rows, so a
pooled band never hides the error of the rows it does have. A class whose family has no row of its type takes the
type's error on the other families (all rows where the type has too few), and says so: a GPU family's first MoE
projection is not better known than the MoE projections measured elsewhere (issue 52). Only a type without any row
keeps the sensitivity band.

Only errors measured with the model held out are evidence (``ErrorRow.holdout``): rows of one configuration held out
one submission at a time (MLPerf's Llama 2 70B LoRA, every MLPerf row) measure how alike runs of that configuration
are, not how far a projection of another model lands, so the file keeps them for the record and no class counts them.

The rows live in ``error_bands.yaml`` beside it, written by ``benchmarks/error_bands.py`` from ``validate --cv``
(leave-one-model-out on ``shared/validation/measured_throughput.csv``), leave-one-submission-out on
``mlperf_training.csv`` and the two real MI355X logs; never by hand. The per-class quantiles written beside them are
for the reader: ``load_bands`` summarises the rows itself. Signed error =
(projected - measured) / measured, so a measured value ``M = P / (1 + e)``: the interval ``[e10, e90]`` of the error
is the band ``[P / (1 + e90), P / (1 + e10)]``.
"""

from __future__ import annotations

import typing
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from primus_ext.errors import Problem, RecipeError

if TYPE_CHECKING:
    from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

BANDS_FILE = Path(__file__).with_name("error_bands.yaml")
ModelKind = Literal["dense", "moe", "hybrid"]
MODEL_TYPES: tuple[ModelKind, ...] = typing.get_args(ModelKind)
"""A band class's model type (the whole model's, not a layer kind's: ``kind_of``)."""
QUANTILES = (10.0, 90.0)
"""The band is the 80 % interval of the signed error (its 10th and 90th percentiles: asymmetric), issue 53."""
MIN_ROWS = 10
"""Fewest rows a level needs to give its own quantiles: with fewer, the 10th and 90th percentiles are the extreme rows
interpolated (``stats.percentile``, linear), not an interval; the level above is pooled instead."""
SCALE_EDGES = (64, 1024)
"""Scale buckets in GPUs: <= 64 (up to 8 nodes of 8 / one NVL72 rack: scale-up dominated), <= 1024, more (issue 53)."""
ERROR_DIGITS = 3
"""Decimals of a row's error in the file (its classes are summarised from the rows as written)."""
LEVELS = ("class", "family x type x precision", "family x type", "type", "all rows")
"""Where the evidence may come from, most specific first (``type``: the model type on every GPU family, the evidence
of a family without runs of that type; a family with some pools its own levels, then all rows, as issue 53 set)."""
Holdout = Literal["model", "submission"]
EVIDENCE_HOLDOUT: Holdout = "model"
"""The rows a class counts: those whose error was measured with their model held out of the fit."""


@dataclass(frozen=True, kw_only=True)
class BandClass:
    """What a projection's error is measured per: the GPU family, model type, precision and scale bucket."""

    family: str
    """The hardware profile's ``family`` (hopper, blackwell, cdna3, cdna4, ampere, ...; the GPU's name without one)."""
    kind: ModelKind
    precision: str
    """The GEMM precision (``ExecutionSpec.precision``: bf16, fp8, fp4, ...)."""
    scale: str
    """``<=64``, ``<=1024`` or ``>1024`` GPUs (``SCALE_EDGES``)."""

    def level_keys(self) -> tuple[str, str, str, str, str]:
        """The key of each of ``LEVELS``."""
        return (f"{self.family} | {self.kind} | {self.precision} | {self.scale}",
                f"{self.family} | {self.kind} | {self.precision}", f"{self.family} | {self.kind}",
                f"any | {self.kind}", "all")

    def describe(self) -> str:
        return f"{self.family} {self.kind} {self.precision}, {self.scale} GPUs"

    def to_dict(self) -> dict[str, str]:
        return {"family": self.family, "type": self.kind, "precision": self.precision, "scale": self.scale}


def scale_of(gpus: int) -> str:
    """The scale bucket of a run on ``gpus`` GPUs."""
    for edge in SCALE_EDGES:
        if gpus <= edge:
            return f"<={edge}"
    return f">{SCALE_EDGES[-1]}"


def kind_of(model: ModelSpec) -> ModelKind:
    """hybrid (Mamba layers), moe (routed experts) or dense."""
    if "M" in model.hybrid_layer_pattern:
        return "hybrid"
    return "moe" if model.is_moe else "dense"


def class_of(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec) -> BandClass:
    """The class a projection of ``model`` run as ``execution`` on ``system`` belongs to."""
    gpu = system.gpu
    return BandClass(family=gpu.family or gpu.name, kind=kind_of(model), precision=execution.precision,
                     scale=scale_of(system.world_size))


@dataclass(frozen=True, kw_only=True)
class ErrorRow:
    """One published run's held-out signed error, and its class."""

    model: str
    band_class: BandClass
    error_pct: float
    """(projected - measured) / measured x 100, the projection fitted without this row's model (or submission)."""
    source: str
    """Which row of which file (``measured_throughput.csv row 12``), or which log."""
    gpu: str = ""
    gpus: int = 0
    holdout: Holdout = "model"
    """What the fit that projected it left out: its ``model`` (evidence for any projection), or only its own
    ``submission`` (a configuration other runs of which were fitted on: kept, never counted in a class)."""


@dataclass(frozen=True, kw_only=True)
class ErrorStats:
    """One level key's rows: how many, the 10th / 90th percentile and the extremes of their signed error (%)."""

    n: int
    p10_pct: float
    p90_pct: float
    min_pct: float
    max_pct: float

    def to_dict(self) -> dict[str, float | int]:
        return {"n": self.n, "error_pct_p10": round(self.p10_pct, 2), "error_pct_p90": round(self.p90_pct, 2),
                "error_pct_min": round(self.min_pct, 2), "error_pct_max": round(self.max_pct, 2)}


def _percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default, ``validate.stats.percentile``: a module above this layer)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarise(rows: Iterable[ErrorRow]) -> dict[str, ErrorStats]:
    """Every level key's ``ErrorStats`` over the evidence among ``rows`` (``EVIDENCE_HOLDOUT``: a row counts in its
    class and each level above it)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.holdout != EVIDENCE_HOLDOUT:
            continue
        for key in row.band_class.level_keys():
            groups[key].append(row.error_pct)
    return {key: ErrorStats(n=len(errs), p10_pct=_percentile(errs, QUANTILES[0]),
                            p90_pct=_percentile(errs, QUANTILES[1]),
                            min_pct=min(errs), max_pct=max(errs))
            for key, errs in sorted(groups.items())}


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """The published runs behind a class's band: the level they were pooled at, how many, the signed-error interval."""

    band_class: BandClass
    level: str
    """One of ``LEVELS``, or ``none``: no published run of this model type, the band is the sensitivity band."""
    n: int
    """Rows at ``level`` (0 with ``none``)."""
    n_class: int
    """Rows of the class itself (its full key)."""
    family_rows: int = 0
    """Rows of the class's family and model type (0: its evidence is the type's on other families)."""
    low_pct: float | None = None
    """The signed error's lower end (10th percentile, or lower where the class's own rows reach further), %."""
    high_pct: float | None = None
    level_low_pct: float | None = None
    """The pooled level's own 10th percentile, before any widening (%)."""
    level_high_pct: float | None = None
    widened_to: int = 0
    """Rows of ``widened_by``, the most specific of its family's levels with rows, whose extremes the interval reaches
    past the pooled level's 10th / 90th percentiles (0: not widened)."""
    widened_by: str = ""

    @property
    def known(self) -> bool:
        return self.level != "none"

    def factors(self) -> tuple[float, float] | None:
        """The band as factors of the projected throughput, ``1 / (1 + high)`` .. ``1 / (1 + low)``; None: no
        evidence."""
        if self.low_pct is None or self.high_pct is None:
            return None
        return 1.0 / (1.0 + self.high_pct / 100.0), 1.0 / (1.0 + self.low_pct / 100.0)

    def sentence(self) -> str:
        """What the band rests on, in words (the console's and the JSON's ``what``)."""
        cls = self.band_class.describe()
        c = self.band_class
        if not self.known:
            return (f"no run measured with its model held out, of this class ({cls}) nor of any {c.kind} model: the "
                    "band is the sensitivity band only")
        where = ("of this class" if self.level == "class" else
                 f"pooled at {self.level} ({self.n_class} of this class)" if self.family_rows else
                 f"of {c.kind} models on other GPU families (none on {c.family} with its model held out)"
                 if self.level == "type" else
                 f"pooled at {self.level} (no {c.kind} run on {c.family} with its model held out, too few elsewhere)")
        text = (f"the 80 % interval of the held-out error ({self.level_low_pct:+.0f} % .. "
                f"{self.level_high_pct:+.0f} %) of {self.n} measured runs {where}")
        if self.widened_to:
            scope = "its class" if self.widened_by == "class" else f"its {self.widened_by}"
            text += (f", widened to {self.low_pct:+.0f} % .. {self.high_pct:+.0f} % by the "
                     f"{self.widened_to} run{'s' if self.widened_to > 1 else ''} of {scope}")
        return f"{text}, {cls}"

    def to_dict(self) -> dict[str, Any]:
        return {"class": self.band_class.to_dict(), "level": self.level, "n": self.n, "n_class": self.n_class,
                "n_family_type": self.family_rows, "error_pct_low": self.low_pct, "error_pct_high": self.high_pct}


def evidence_of(cls: BandClass, table: Mapping[str, ErrorStats], min_rows: int = MIN_ROWS) -> Evidence:
    """``cls``'s evidence in ``table`` (``summarise``'s): the most specific of its family's levels with ``min_rows``
    rows (else all rows), the interval widened to the extremes of the most specific of its family's levels that has
    rows; without a row of its family x type, the model type's on every family (else all rows); none without a row of
    its type."""
    keys = cls.level_keys()
    n_class = table[keys[0]].n if keys[0] in table else 0
    if keys[3] not in table:
        return Evidence(band_class=cls, level="none", n=0, n_class=n_class)
    own_level = next((i for i in range(3) if keys[i] in table), None)
    own = table[keys[own_level]] if own_level is not None else None
    # a family with runs of the type pools its own levels, then all rows; one without, the type on every family first
    chain = (0, 1, 2, 4) if own is not None else (3, 4)
    level, stats = LEVELS[-1], table[keys[-1]]
    for i in chain:
        if keys[i] in table and table[keys[i]].n >= min_rows:
            level, stats = LEVELS[i], table[keys[i]]
            break
    low, high = stats.p10_pct, stats.p90_pct
    if own is not None and stats is not own:
        low, high = min(low, own.min_pct), max(high, own.max_pct)
    widened = own is not None and own_level is not None and (low, high) != (stats.p10_pct, stats.p90_pct)
    return Evidence(band_class=cls, level=level, n=stats.n, n_class=n_class,
                    family_rows=table[keys[2]].n if keys[2] in table else 0, low_pct=low, high_pct=high,
                    level_low_pct=stats.p10_pct, level_high_pct=stats.p90_pct,
                    widened_to=own.n if widened and own is not None else 0,
                    widened_by=LEVELS[own_level] if widened and own_level is not None else "")


def widest(tokens: float, sensitivity: tuple[float, float], evidence: Evidence | None) -> tuple[float, float]:
    """The band of a projection of ``tokens`` tokens/s/GPU: per side the wider of its sensitivity band and its class's
    measured error (``evidence``; the sensitivity band alone without evidence)."""
    factors = None if evidence is None else evidence.factors()
    if factors is None:
        return sensitivity
    return min(sensitivity[0], tokens * factors[0]), max(sensitivity[1], tokens * factors[1])


@dataclass(frozen=True, kw_only=True)
class ErrorBands:
    """The shipped error rows and their per-level quantiles (``error_bands.yaml``)."""

    rows: tuple[ErrorRow, ...]
    table: Mapping[str, ErrorStats]
    date: str = ""
    command: str = ""
    min_rows: int = MIN_ROWS
    _without: dict[str, ErrorBands] = field(default_factory=dict, compare=False, repr=False)

    def evidence(self, cls: BandClass) -> Evidence:
        return evidence_of(cls, self.table, self.min_rows)

    def without(self, model: str) -> ErrorBands:
        """The same from the rows of every model but ``model`` (leave-one-model-out: a row's band never rests on its
        own model's errors)."""
        if model not in self._without:
            rows = tuple(r for r in self.rows if r.model != model)
            self._without[model] = ErrorBands(rows=rows, table=summarise(rows), date=self.date, command=self.command,
                                              min_rows=self.min_rows)
        return self._without[model]


def row_dict(row: ErrorRow) -> dict[str, Any]:
    """A row as the file holds it."""
    return {"source": row.source, "model": row.model, "gpu": row.gpu, "gpus": row.gpus, **row.band_class.to_dict(),
            "error_pct": round(row.error_pct, ERROR_DIGITS), "holdout": row.holdout}


def file_dict(rows: Sequence[ErrorRow], *, date: str, command: str, min_rows: int = MIN_ROWS) -> dict[str, Any]:
    """``error_bands.yaml``'s content for ``rows`` (what ``benchmarks/error_bands.py`` writes)."""
    ordered = sorted((replace(r, error_pct=round(r.error_pct, ERROR_DIGITS)) for r in rows), key=lambda r: r.source)
    return {"date": date, "command": command, "quantiles_pct": list(QUANTILES), "min_rows": min_rows,
            "levels": list(LEVELS), "error": "(projected - measured) / measured x 100, held out (cross-validation)",
            "evidence": f"rows with holdout {EVIDENCE_HOLDOUT} (their model left out of the fit); rows held out by "
                        "submission only (one configuration) are kept for the record, counted in no class",
            "classes": {key: s.to_dict() for key, s in summarise(ordered).items()},
            "rows": [row_dict(r) for r in ordered]}


def _broken(path: Path, message: str) -> RecipeError:
    return RecipeError(problems=[Problem(path=str(path), message=message,
                                         fix="regenerate it with python benchmarks/error_bands.py")])


def _row(entry: Mapping[str, Any]) -> ErrorRow:
    cls = BandClass(family=str(entry["family"]), kind=entry["type"], precision=str(entry["precision"]),
                    scale=str(entry["scale"]))
    if cls.kind not in MODEL_TYPES:
        raise ValueError(f"type {cls.kind!r} is not dense, moe or hybrid")
    holdout = entry.get("holdout", EVIDENCE_HOLDOUT)
    if holdout not in typing.get_args(Holdout):
        raise ValueError(f"holdout {holdout!r} is not model or submission")
    return ErrorRow(model=str(entry["model"]), band_class=cls, error_pct=float(entry["error_pct"]),
                    source=str(entry["source"]), gpu=str(entry.get("gpu", "")), gpus=int(entry.get("gpus", 0)),
                    holdout=holdout)


def _stats(entry: Mapping[str, Any]) -> ErrorStats:
    return ErrorStats(n=int(entry["n"]), p10_pct=float(entry["error_pct_p10"]), p90_pct=float(entry["error_pct_p90"]),
                      min_pct=float(entry["error_pct_min"]), max_pct=float(entry["error_pct_max"]))


@cache
def load_bands(path: Path = BANDS_FILE) -> ErrorBands:
    """``path`` read once (safe-loaded); a broken file is a ``RecipeError`` naming the entry and the fix."""
    import yaml

    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as err:
        raise _broken(path, f"error bands unreadable: {err}") from None
    if not (isinstance(data, dict) and isinstance(data.get("rows"), list) and isinstance(data.get("classes"), dict)):
        raise _broken(path, "no `rows:` list and `classes:` mapping")
    try:
        rows = tuple(_row(entry) for entry in data["rows"])
        for entry in data["classes"].values():
            _stats(entry)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise _broken(path, f"an entry is not a row or a class ({type(err).__name__}: {err})") from None
    # the classes are summarised from the rows, never trusted: a file of another layout (levels, holdout) cannot give
    # project one table and validate's leave-one-model-out another
    return ErrorBands(rows=rows, table=summarise(rows), date=str(data.get("date", "")),
                      command=str(data.get("command", "")), min_rows=int(data.get("min_rows", MIN_ROWS)))


def shipped() -> ErrorBands:
    """The package's error bands (``error_bands.yaml``), read once."""
    return load_bands(BANDS_FILE)


__all__ = ["BANDS_FILE", "EVIDENCE_HOLDOUT", "LEVELS", "MIN_ROWS", "BandClass", "ErrorBands", "ErrorRow", "ErrorStats",
           "Evidence", "Holdout", "class_of", "evidence_of", "file_dict", "load_bands", "shipped", "summarise",
           "widest"]
