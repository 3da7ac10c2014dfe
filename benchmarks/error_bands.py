"""Write ``primus_ext/projection/error_bands.yaml``: the projection's held-out error per class (issue 53).

Run from the repository root (``../shared/validation`` beside it)::

    python benchmarks/error_bands.py [--jobs N] [--out FILE]
    python benchmarks/error_bands.py --from-json CV_MEASURED.json CV_MLPERF.json    # reuse validate --cv outputs

Rows: ``measured_throughput.csv`` cross-validated leave-one-model-out (``validate --cv``: each model's rows projected
with efficiencies fitted on the other models' rows; ~10 to 40 minutes on 2 cores) and ``mlperf_training.csv``
leave-one-submission-out (``validate --cv --holdout submission``: one model, Llama 2 70B LoRA, so a model cannot be
held out there; AMD boards fitted on AMD rows only: these rows are kept with ``holdout: submission`` and counted in no
class, ``projection.error_bands.EVIDENCE_HOLDOUT``), and the two real Primus logs on 8 x MI355X (``logs/``, their
recipes in ``tests/support/recipes``, projected on the shipped profiles: no fit saw them or their models; the only
AMD runs of models other than Llama 2 70B, issue 52). ``--from-json`` reads the ``cross_validation`` rows of the JSON
those two commands write (``--json``) instead of rerunning them. Each held-out row's signed error goes into the file
with its class (``projection.error_bands.class_of``), and the per-level quantiles beside them
(``error_bands.file_dict``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VALIDATION = REPO.parent / "shared" / "validation"
OUT = REPO / "primus_ext" / "projection" / "error_bands.yaml"
SOURCES = ("measured_throughput.csv", "mlperf_training.csv")
HOLDOUT = {"measured_throughput.csv": "model", "mlperf_training.csv": "submission"}


def _runs(name: str):
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.hardware_csv import read_hardware
    from primus_ext.validate.runs import read_runs

    return read_runs(VALIDATION / name, read_archs(VALIDATION / "model_archs.csv"),
                     read_hardware(VALIDATION / "hardware_specs.csv"))


def _cross_validated(name: str, runs, jobs: int):
    """The held-out rows of ``name``: by model, or by submission for the MLPerf file."""
    from primus_ext.validate.crossval import leave_one_model_out
    from primus_ext.validate.holdout import leave_one_out
    from primus_ext.validate.run import analytic_projector

    def say(done: int, total: int, group: str) -> None:
        print(f"  {name}: {done}/{total} folds (left out {group})", file=sys.stderr, flush=True)

    if HOLDOUT[name] == "model":
        return leave_one_model_out(runs, analytic_projector, jobs=jobs, progress=say).rows
    return leave_one_out(runs, analytic_projector, by="submission", progress=say).rows


def _from_json(path: Path):
    """The ``cross_validation`` rows of a ``validate --cv --json`` document."""
    from primus_ext.validate.run import RowResult

    doc = json.loads(path.read_text(encoding="utf-8"))
    return [RowResult(index=r["index"], model=r["model"], gpu=r["gpu"], num_gpus=r["num_gpus"],
                      precision=r["precision"], measured_tokens_per_sec_per_gpu=r["measured_tokens_per_s_per_gpu"],
                      projected_tokens_per_sec_per_gpu=r["projected_tokens_per_s_per_gpu"], error_pct=r["error_pct"])
            for r in doc["cross_validation"]["rows"]]


def log_error_rows() -> list:
    """The two MI355X Primus logs' errors, each projected uncalibrated from its recipe on the shipped profile."""
    from amd_calibration import log_rows

    from primus_ext.projection.error_bands import ErrorRow, class_of
    from primus_ext.validate.run import analytic_projector, validate_runs

    logs = log_rows()
    report = validate_runs(logs, analytic_projector, label="the MI355X logs")
    out = []
    for run, result in zip(logs, report.rows, strict=True):
        assert result.error_pct is not None and run.model is not None and run.execution is not None
        assert run.system is not None
        name = next(a.partition(" ")[2] for a in run.assumptions if a.startswith("log "))
        out.append(ErrorRow(model=run.model_name, band_class=class_of(run.model, run.execution, run.system),
                            error_pct=result.error_pct, source=f"logs/{name}", gpu=run.gpu, gpus=run.num_gpus))
    return out


def generate(jobs: int, from_json: list[Path] | None) -> tuple[list, str, dict]:
    """The error rows of both files and of the logs, the command that reproduces them, and each file's held-out
    report."""
    from primus_ext.validate.bands import error_rows
    from primus_ext.validate.run import ValidationReport, summarize

    rows, reports = [], {}
    for i, name in enumerate(SOURCES):
        runs = _runs(name)
        results = _from_json(from_json[i]) if from_json else _cross_validated(name, runs, jobs)
        rows += error_rows(results, runs, name, HOLDOUT[name])
        reports[name] = (ValidationReport(rows=tuple(results), summary=summarize(results), label=name), runs)
    rows += log_error_rows()
    command = ("python -m primus_ext validate ../shared/validation/measured_throughput.csv --cv --json A.json; "
               "python -m primus_ext validate ../shared/validation/mlperf_training.csv --cv --holdout submission "
               "--json B.json; python benchmarks/error_bands.py --from-json A.json B.json "
               "(= python benchmarks/error_bands.py)")
    return rows, command, reports


def print_coverage(rows, reports: dict) -> None:
    """How often the held-out rows fall inside their band (``validate.bands``: each row's projection held out, its
    band's error from the other models' rows)."""
    from primus_ext.projection.error_bands import ErrorBands, summarise
    from primus_ext.validate.bands import coverage_lines, with_bands

    bands = ErrorBands(rows=tuple(rows), table=summarise(rows))
    for name, (report, runs) in reports.items():
        print(f"\n{name}, held out ({HOLDOUT[name]}):")
        print("\n".join(coverage_lines(with_bands(report, runs, bands))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)), help="folds at a time")
    parser.add_argument("--from-json", nargs=2, type=Path, metavar=("MEASURED", "MLPERF"),
                        help="the JSON of `validate measured_throughput.csv --cv` and of `validate mlperf_training.csv "
                             "--cv --holdout submission`")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    import yaml

    from primus_ext.files import write_output
    from primus_ext.projection.error_bands import file_dict

    rows, command, reports = generate(args.jobs, args.from_json)
    data = file_dict(rows, date=datetime.date.today().isoformat(), command=command)
    header = ("# The projection's held-out error per class (issue 53): written by benchmarks/error_bands.py, never by "
              "hand.\n# Read by primus_ext/projection/error_bands.py (the band project prints; validate's coverage).\n")
    text = yaml.safe_dump(data, sort_keys=False, width=120, default_flow_style=None)
    write_output(args.out, header + text, label="--out")
    for key, s in data["classes"].items():
        print(f"{key:<40} n {s['n']:>3}  p10 {s['error_pct_p10']:+7.1f} %  p90 {s['error_pct_p90']:+7.1f} %")
    print(f"wrote {args.out} ({len(rows)} rows)")
    print_coverage(rows, reports)
    return 0


if __name__ == "__main__":
    sys.exit(main())
