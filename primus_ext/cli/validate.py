"""``primus-ext validate``: projected vs measured tokens/s/GPU over published runs.

    primus-ext validate ../shared/validation/measured_throughput.csv \
        [--archs ../shared/validation/model_archs.csv] [--hardware ../shared/validation/hardware_specs.csv] \
        [--json OUT] [--cv [--jobs N]] [--fit] [--calibrate-from MY_RUN.json]

``--cv`` adds leave-one-model-out cross-validation of the per-GPU calibration (one fit per held-out
model, each from the plain defaults, ``--jobs`` folds at a time: 10 minutes on 2 cores, 19 on one);
``--holdout submission|gpu`` holds out one row / one GPU type instead (``validate.holdout``: AMD boards fitted on
AMD rows only, ``validate.amd``; ``mlperf_training.csv``: 43 s);
``--fit`` fits the per-GPU efficiency parameters on all rows and prints the ``efficiency:`` blocks to paste
into the hardware profiles; ``--calibrate-from`` applies the workload offset of one measured run of your own
and reports the error it leaves.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

from primus_ext.argtypes import MAX_ROWS_SHOWN, int_in
from primus_ext.cli._args import positive_int


def _usable_cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="projected vs measured throughput on published runs",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("measurements", help="CSV in the layout of shared/validation/measured_throughput.csv")
    p.add_argument("--archs", help="CSV in the layout of shared/validation/model_archs.csv (default: model_archs.csv "
                                   "beside MEASUREMENTS)")
    p.add_argument("--hardware", help="CSV in the layout of shared/validation/hardware_specs.csv (default: "
                                      "hardware_specs.csv beside MEASUREMENTS, when there is one)")
    p.add_argument("--json", dest="json_out", metavar="OUT",
                   help="write rows and summary as JSON to OUT ('-': stdout, the JSON only; the tables go to stderr)")
    p.add_argument("--cv", action="store_true", help="leave-one-model-out cross-validation of the calibration "
                                                            "(one fit per model: ~10 min on 2 cores)")
    p.add_argument("--holdout", choices=("model", "submission", "gpu"), default="model",
                   help="with --cv: what a fold holds out: a model's rows (default), one row (one submission), or one "
                        "GPU type's rows (an AMD board then takes its family sibling's fit: validate.holdout)")
    p.add_argument("--moe-only", action="store_true",
                   help="with --cv: hold out only the MoE models (each fit still uses every other model's rows)")
    p.add_argument("--jobs", type=positive_int, default=_usable_cpus(),
                   help="with --cv: folds fitted in parallel processes (default: the CPUs this process may use)")
    p.add_argument("--fit", action="store_true", help="fit per-GPU efficiencies on all rows and print them")
    p.add_argument("--write-profiles", metavar="DIR",
                   help="with --fit: write the profiles with their fitted efficiency block into DIR "
                        "(use it as $PRIMUS_EXT_PROFILES, or primus_ext/hardware/profiles to ship them)")
    p.add_argument("--calibrate-from", help="one measured run of your own (CSV/JSON) -> workload offset")
    p.add_argument("--store", metavar="FILE",
                   help="also project the rows from the measured layers of this timing store (SQLite, or the "
                        ".jsonl of `bench --export`): the hybrid method, beside the analytic roofline on the same rows")
    p.add_argument("--store-device", metavar="NAME", help="with --store: whose entries (default: its one device)")
    p.add_argument("--store-gpu", metavar="PROFILE",
                   help="with --store: the hardware profile of that device (default: read from its name)")
    p.add_argument("--worst", type=int_in(0, MAX_ROWS_SHOWN), default=10,
                   help="how many worst rows to print (default 10)")
    p.set_defaults(func=run)


def _summary_lines(report, *, data_bounds: bool = True) -> list[str]:
    """The summary lines; ``data_bounds``: add the p90 floor and Spearman ceilings (bounds for projections
    that are functions of each row's configuration: not for the offset reports, which use other rows'
    measurements)."""
    s = report.summary
    floor = f"   (p90 floor of the data >= {s.p90_floor_abs_error_pct:.1f} %)" if data_bounds else ""
    lines = [f"{report.label or 'projection'}: {s.n_projected} rows projected, {s.n_skipped} skipped",
             f"  |error| median {s.median_abs_error_pct:.1f} %   p90 {s.p90_abs_error_pct:.1f} %   "
             f"max {s.max_abs_error_pct:.1f} %{floor}",
             f"  mean |log error| {s.mean_abs_log_error:.4f}   {s.n_above_20_pct} rows above 20 %"]
    if not s.n_projected:  # no error figures, not `nan %`
        return [lines[0], "  no row could be projected: no error to state (the reasons are listed)"]
    for group, rho in s.spearman_by_group.items():
        ceiling = s.spearman_ceiling_by_group.get(group, math.nan)
        bound = f"  (ceiling {ceiling:+.2f})" if data_bounds and not math.isnan(ceiling) else ""
        if math.isnan(rho):  # every measured (or projected) value of the group is equal: nothing to rank
            lines.append(f"  rank  {group:<42} spearman n/a  kendall n/a  (its rows' values are all equal: no order "
                         "to compare)")
            continue
        lines.append(f"  rank  {group:<42} spearman {rho:+.2f}  kendall {s.kendall_by_group[group]:+.2f}{bound}")
    return lines


def _model_lines(report) -> list[str]:
    """Per model, worst first: rows, median signed error (bias), median and max |error|."""
    lines = [f"  {'error by model':<26} {'rows':>4} {'median':>8} {'median |err|':>13} {'max |err|':>10}"]
    for name, m in report.summary.by_model.items():
        lines.append(f"  {name:<26} {m.n:>4} {m.median_error_pct:>+7.1f}% {m.median_abs_error_pct:>12.1f}% "
                     f"{m.max_abs_error_pct:>9.1f}%")
    return lines


def _reason_lines(report, only: str = "") -> list[str]:
    """The skipped rows' reasons (those starting with ``only``), most frequent first, with their counts."""
    counts = Counter(r.skipped_reason for r in report.rows
                     if r.error_pct is None and r.skipped_reason.startswith(only))
    return [f"  {count:>3} x {reason}" for reason, count in counts.most_common()]


def _open_measured(args: argparse.Namespace):
    """``--store``'s timing store and the profile of the GPU that measured it (``(None, None)`` without)."""
    from primus_ext.errors import PrimusExtError
    from primus_ext.hardware import load_gpu, profile_of_device
    from primus_ext.validate.measured import open_store

    if not args.store:
        given = [flag for flag, value in (("--store-device", args.store_device), ("--store-gpu", args.store_gpu))
                 if value]
        if given:
            raise PrimusExtError(f"{' and '.join(given)} without --store: name the timing store to read")
        return None, None
    store = open_store(args.store, args.store_device)
    profile = args.store_gpu or profile_of_device(store.device)
    if profile is None:
        raise PrimusExtError(f"--store {args.store}: no hardware profile is named by its device {store.device!r}: "
                             "name it with --store-gpu")
    return store, load_gpu(profile)


def _hybrid(runs, report, store, gpu) -> dict:
    """``--store``: the rows the store covers, projected from its measured layers and analytically."""
    from primus_ext.validate.measured import measured_projector
    from primus_ext.validate.run import ValidationReport, summarize, validate_runs

    hybrid = validate_runs(runs, measured_projector(store, gpu),
                           label=f"hybrid (layers measured on {store.device}, analytic communication)")
    covered = {r.index for r in hybrid.rows if r.error_pct is not None}
    same_rows = tuple(r for r in report.rows if r.index in covered)
    analytic = ValidationReport(rows=same_rows, summary=summarize(same_rows), label="analytic, same rows")
    print("\n" + "\n".join(_summary_lines(hybrid, data_bounds=False)))
    print("\n".join(_model_lines(hybrid)))
    print("\n".join(_summary_lines(analytic, data_bounds=False)))
    print("\n".join(_reason_lines(hybrid, only="projection refused")))
    return {"hybrid": hybrid.to_dict(), "hybrid_analytic_same_rows_summary": analytic.to_dict()["summary"]}


def _is_moe_row(run) -> bool:
    """``--moe-only``: a row of a model with routed experts (module level: the folds' worker processes pickle it)."""
    return run.model is not None and run.model.is_moe


def _progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from primus_ext.files import check_outputs
    from primus_ext.results import check_json_out, document, emit_json, tables_to_stderr

    check_json_out(args.json_out)
    beside = Path(args.measurements).parent  # the inputs _report reads, defaults included
    defaults = (args.archs or beside / "model_archs.csv", args.hardware or beside / "hardware_specs.csv")
    check_outputs(("--json", args.json_out), inputs=(args.measurements, *defaults))  # before any work
    if args.write_profiles:  # a fit takes a minute: its profile folder is checked before it (and again when written)
        from primus_ext.hardware import canonical_name, list_profiles, refuse_profile_targets

        refuse_profile_targets([Path(args.write_profiles) / f"{canonical_name(p)}.yaml" for p in list_profiles()])
    with tables_to_stderr(args.json_out):
        out = _report(args)
    emit_json(document("validation", **out), args.json_out)
    return 0


def _report(args: argparse.Namespace) -> dict:
    """Print the report; its JSON fields (the ``validation`` document's body)."""
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.bands import coverage_lines, with_bands
    from primus_ext.validate.hardware_csv import read_hardware
    from primus_ext.validate.offsets import one_run_offset
    from primus_ext.validate.run import analytic_projector, validate_runs
    from primus_ext.validate.runs import read_runs

    store, store_gpu = _open_measured(args)  # bad --store input fails before the projection runs
    beside = Path(args.measurements).parent
    archs = read_archs(args.archs or beside / "model_archs.csv")
    hardware = args.hardware or (beside / "hardware_specs.csv" if (beside / "hardware_specs.csv").is_file() else None)
    gpus = read_hardware(hardware) if hardware else None
    runs = read_runs(args.measurements, archs, gpus)
    if args.fit or args.cv:  # refused before the in-sample report: a fit's work grows with the configurations
        from primus_ext.errors import RecipeError
        from primus_ext.validate.distinct import fit_problem

        too_many = fit_problem(runs, str(args.measurements), _folds(args, runs) if args.cv else 0)
        if too_many is not None:
            raise RecipeError(problems=[too_many])
    sensitivities: dict = {}  # each row's sensitivity band, shared by the reports below (validate.bands)
    report = with_bands(validate_runs(runs, analytic_projector, label="analytic projection, profile efficiencies"),
                        runs, cache=sensitivities)
    print("\n".join(_summary_lines(report)))
    print("\n".join(_model_lines(report)))
    print("\n".join(coverage_lines(report)))
    print(f"\nworst {args.worst} rows (signed error = projected vs measured):")
    for r in report.worst(args.worst):
        print(f"  #{r.index:<4} {r.model:<20} {r.gpu:<7} {r.num_gpus:>5} GPUs {r.precision:<5} "
              f"measured {r.measured_tokens_per_sec_per_gpu:>9.0f}  projected "
              f"{r.projected_tokens_per_sec_per_gpu:>9.0f}  {r.error_pct:+6.1f} %")
    print("\nskipped rows:")
    print("\n".join(_reason_lines(report)))
    out = report.to_dict()
    if store is not None:
        out.update(_hybrid(runs, report, store, store_gpu))
    offset = one_run_offset(report)
    print("\n" + "\n".join(_summary_lines(offset, data_bounds=False)[:2]))
    out["one_run_offset_summary"] = offset.to_dict()["summary"]
    if args.calibrate_from:
        from primus_ext.validate.user_run import apply_user_offsets, read_user_runs

        user = apply_user_offsets(report, read_user_runs(args.calibrate_from, archs), analytic_projector)
        print("\n" + "\n".join(_summary_lines(user, data_bounds=False)[:2]))
        out["calibrated_from_user_run"] = user.to_dict()
    if args.fit:
        _fit(args, runs, out)
    if args.cv:
        _cross_validate(args, runs, out, sensitivities)
    return out


def _fit(args: argparse.Namespace, runs: list, out: dict) -> None:
    """``--fit``: the efficiency blocks per GPU family (AMD boards on AMD rows only), printed and in ``out``;
    ``--write-profiles``: the profiles with them."""
    from primus_ext.hardware import yaml_number
    from primus_ext.validate.amd import fit_amd, is_amd
    from primus_ext.validate.efficiency_fit import DEFAULT_PARAMS, fit_by_gpu
    from primus_ext.validate.run import analytic_projector

    fits = fit_by_gpu([r for r in runs if not is_amd(r)], analytic_projector, label=Path(args.measurements).name,
                      progress=_progress)  # AMD boards: on AMD rows only, each board on its own (validate.amd)
    amd_fits = fit_amd(runs, analytic_projector, label=Path(args.measurements).name, progress=_progress)
    for board, fit in amd_fits.items():
        print(f"# {board}: {fit.rows} AMD rows, {fit.configurations} configurations, knobs {', '.join(fit.knobs)}, "
              f"mean |log error| {fit.loss:.3f}")
        print("efficiency:")
        for key in ("gemm_max", "fp8_gemm_max", "attention"):
            print(f"  {key}: {yaml_number(getattr(fit.efficiency, key))}")
        print(f"  calibration: {fit.efficiency.calibration!r}")
        out.setdefault("amd_fits", {})[board] = {"gemm_max": fit.efficiency.gemm_max, "rows": fit.rows,
                                                 "fp8_gemm_max": fit.efficiency.fp8_gemm_max,
                                                 "attention": fit.efficiency.attention, "loss": fit.loss,
                                                 "configurations": fit.configurations, "knobs": list(fit.knobs)}
    print("\nfitted efficiency blocks per GPU family (profiles of a family share them):")
    for name, (eff, n, loss) in fits.items():
        values = {p.name: getattr(eff, p.name) for p in DEFAULT_PARAMS}
        print(f"# {name}: {n} rows, mean |log error| {loss:.3f}")
        print("efficiency:")
        for key, value in values.items():
            print(f"  {key}: {yaml_number(value)}")
        if eff.measured:
            print(f"  measured: {json.dumps(list(eff.measured))}")
        print(f"  calibration: {eff.calibration!r}")
        out.setdefault("fits", {})[name] = {**values, "measured": list(eff.measured), "rows": n, "loss": loss}
    if args.write_profiles:
        _write_fitted(args, runs, fits, amd_fits, out)


def _write_fitted(args: argparse.Namespace, runs: list, fits: dict, amd_fits: dict, out: dict) -> None:
    """``--write-profiles``: every profile of a fitted family (or of the pooled prior) with its fitted block."""
    from primus_ext.hardware import list_profiles, load_gpu, profile_text, write_profiles
    from primus_ext.validate.efficiency_fit import DEFAULT_PARAMS, fit_pooled
    from primus_ext.validate.run import analytic_projector
    from primus_ext.validate.stated import with_measured

    names = [p.name for p in DEFAULT_PARAMS]
    # families without enough rows of their own get the prior, unless their profile holds a calibration
    # of another origin (a user's); the CPU profile is the end-to-end check's, not a GPU's
    # (a profile stating validate.amd.POOLED_PRIOR follows that constant, as the AMD boards' start does)
    others = [p for p in list_profiles() if (load_gpu(p).family or p) not in fits and p != "cpu"
              and load_gpu(p).efficiency.calibration.startswith(("uncalibrated", "pooled prior"))
              and not load_gpu(p).efficiency.calibration.startswith("pooled prior: validate.amd.POOLED_PRIOR")]
    pooled = fit_pooled(runs, analytic_projector, label=Path(args.measurements).name,
                        progress=_progress) if others else None
    if pooled is not None:
        print(f"# pooled prior for {', '.join(others)}: {pooled[1]} rows, mean |log error| {pooled[2]:.3f}")
        out["pooled_prior"] = {**{n: getattr(pooled[0], n) for n in names}, "rows": pooled[1],
                               "loss": pooled[2], "profiles": others}
    texts = {}
    for profile in list_profiles():
        family = load_gpu(profile).family or profile
        chosen = fits[family][0] if family in fits else pooled[0] if pooled and profile in others else None
        if chosen is not None:
            own = load_gpu(profile).efficiency
            block, fields = with_measured(chosen, own), names
            if own.band > block.band:  # a GPU with no runs of its own states a wider band: kept
                block, fields = replace(block, band=own.band), [*names, "band"]
            texts[profile] = profile_text(profile, block, fields)
    for board, fit in amd_fits.items():  # the board's band (its held-out error) as its profile states it
        band = load_gpu(board).efficiency.band
        texts[board] = profile_text(board, replace(fit.efficiency, band=band),
                                    ["gemm_max", "fp8_gemm_max", "attention", "band"])
    for path in write_profiles(texts, Path(args.write_profiles)):
        print(f"wrote {path}")


def _folds(args: argparse.Namespace, runs: list) -> int:
    """How many fits ``--cv`` runs: one per held-out model (``--moe-only``: per MoE model), submission or GPU."""
    from primus_ext.validate.efficiency_fit import usable
    from primus_ext.validate.holdout import group_of

    if args.holdout == "model":
        return len({r.model_name for r in usable(runs) if not args.moe_only or _is_moe_row(r)})
    return len({group_of(r, args.holdout) for r in usable(runs)})


def _cross_validate(args: argparse.Namespace, runs: list, out: dict, sensitivities: dict) -> None:
    """``--cv``: the held-out figures (by model, submission or GPU), printed and in ``out``; each row's band from
    the other models' rows (``validate.bands``)."""
    from primus_ext.cli._progress import ProgressLine
    from primus_ext.validate.bands import coverage_lines, with_bands
    from primus_ext.validate.crossval import leave_one_model_out
    from primus_ext.validate.efficiency_fit import usable
    from primus_ext.validate.offsets import one_run_offset
    from primus_ext.validate.run import analytic_projector

    held_out = _is_moe_row if args.moe_only else None
    if args.holdout == "model":
        models = {r.model_name for r in usable(runs) if held_out is None or held_out(r)}
        with ProgressLine(f"cross-validation ({args.jobs} at a time)", len(models), label="fitting") as bar:
            cv = leave_one_model_out(runs, analytic_projector, jobs=args.jobs, held_out=held_out,
                                     progress=lambda done, _n, model: bar.update(done, label=f"left out {model}"))
    else:
        from primus_ext.validate.holdout import group_of, leave_one_out

        groups = {group_of(r, args.holdout) for r in usable(runs)}
        with ProgressLine(f"cross-validation by {args.holdout}", len(groups), label="fitting") as bar:
            cv = leave_one_out(runs, analytic_projector, by=args.holdout, progress=lambda done, _n, group:
                               bar.update(done, label=f"left out {group}"))
    cv = with_bands(cv, runs, cache=sensitivities)
    print("\n" + "\n".join(_summary_lines(cv)))
    print("\n".join(_model_lines(cv)))
    print("\n".join(coverage_lines(cv)))
    out["cross_validation"] = cv.to_dict()
    cv_offset = one_run_offset(cv)
    print("\n" + "\n".join(_summary_lines(cv_offset, data_bounds=False)[:2]))
    out["cross_validation_one_run_offset_summary"] = cv_offset.to_dict()["summary"]
