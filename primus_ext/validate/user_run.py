"""``--calibrate-from``: one measured run of the user's own -> a workload offset per group.

The file is a CSV in the layout of ``measured_throughput.csv`` or a JSON object (or list of objects)
with the same keys; ``tokens_per_sec_per_gpu`` may be replaced by ``step_time_s`` (then
``gbs * seq_len / (step_time_s * num_gpus)``). Each run is projected like a validation row; its
measured/projected ratio is the offset applied to the validation rows of the same
model x GPU x precision.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

from primus_ext.errors import Problem, RecipeError
from primus_ext.validate.archs import ArchRow
from primus_ext.validate.run import Projector, RowResult, ValidationReport, _result, summarize
from primus_ext.validate.runs import REQUIRED_RUN_COLUMNS, RunRow, run_of


def _rows(path: Path) -> list[dict[str, str]]:
    from primus_ext.files import InputRefused, load_json, read_input
    from primus_ext.validate.csvio import MAX_CSV_BYTES

    try:
        text = read_input(path, max_bytes=MAX_CSV_BYTES, what="run file").decode("utf-8")
    except InputRefused as err:
        raise RecipeError(problems=[Problem(path=str(path), message=str(err))]) from None
    except OSError as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"cannot read: {err.strerror}")]) from None
    except UnicodeDecodeError as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"not UTF-8 text ({err.reason})",
                                            fix="give the run file as UTF-8 CSV or JSON")]) from None
    if path.suffix.lower() == ".json":
        try:
            data = load_json(text)
        except ValueError as err:  # not JSON, nested too deep, an integer of over 4 300 digits
            raise RecipeError(problems=[Problem(path=str(path), message=f"invalid JSON: {err}")]) from None
        items = data if isinstance(data, list) else [data]
        if not all(isinstance(item, dict) for item in items):
            raise RecipeError(problems=[Problem(path=str(path), message="expected an object or a list of objects")])
        rows = [{key: "" if item.get(key) is None else str(item.get(key)) for key in
                 (*REQUIRED_RUN_COLUMNS, "step_time_s", "tflops_per_gpu")} for item in items]
    else:
        rows = list(csv.DictReader(text.splitlines()))
    for row in rows:
        if not row.get("tokens_per_sec_per_gpu") and row.get("step_time_s"):
            try:
                step, gpus = float(row["step_time_s"]), float(row["num_gpus"])
                tokens = float(row["gbs"]) * float(row["seq_len"]) / (step * gpus)
            except (KeyError, ValueError, ZeroDivisionError):
                raise RecipeError(problems=[Problem(
                    path=str(path), message="step_time_s needs numeric gbs, seq_len and num_gpus",
                    fix="give tokens_per_sec_per_gpu, or gbs / seq_len / num_gpus with step_time_s")]) from None
            row["tokens_per_sec_per_gpu"] = str(tokens)
    missing = sorted({c for row in rows for c in REQUIRED_RUN_COLUMNS if c not in row})
    if missing or not rows:
        raise RecipeError(problems=[Problem(path=str(path), message=f"missing fields {missing or 'all'}",
                                            fix="use the measured_throughput.csv columns")])
    return rows


def read_user_runs(path: str | Path, archs: dict[str, ArchRow]) -> list[RunRow]:
    path = Path(path)
    runs = [run_of(i, row, archs) for i, row in enumerate(_rows(path))]
    bad = [Problem(path=f"{path}:run {r.index}", message=r.skipped_reason) for r in runs if r.model is None]
    if bad:
        raise RecipeError(problems=bad, source=str(path), what="unusable runs in")
    return runs


def apply_user_offsets(report: ValidationReport, user_runs: list[RunRow], projector: Projector) -> ValidationReport:
    """The validation rows of each user run's group, rescaled by that run's measured/projected offset."""
    offsets: dict[str, float] = {}
    for run in user_runs:
        anchor = _result(run, projector(run))
        offsets[anchor.group] = run.measured_tokens_per_sec_per_gpu / (anchor.projected_tokens_per_sec_per_gpu or 1.0)
    rows: list[RowResult] = []
    for row in report.rows:
        if row.error_pct is None or row.group not in offsets:
            continue
        projected = (row.projected_tokens_per_sec_per_gpu or 0.0) * offsets[row.group]
        error = (projected - row.measured_tokens_per_sec_per_gpu) / row.measured_tokens_per_sec_per_gpu * 100
        rows.append(replace(row, projected_tokens_per_sec_per_gpu=projected, error_pct=error))
    return ValidationReport(rows=tuple(rows), summary=summarize(rows), label="offset from the user's run")
