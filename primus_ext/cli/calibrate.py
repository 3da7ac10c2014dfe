"""``primus-ext calibrate``: read real training logs, compare them with the projection, store the correction.

    primus-ext calibrate RECIPE train.log --cluster mi355x --nodes 1        # compare, store a calibration record
    primus-ext calibrate RECIPE run1.log run2.log --follow-log             # runs of other layouts of the model
    primus-ext calibrate RECIPE train.log --dry-run --json -               # compare only, JSON to stdout
    primus-ext calibrate RECIPE-verify-top                                 # the logs of a tune --verify-top folder
    primus-ext calibrate --list                                            # the records in the timing store

Logs are read as Megatron-LM, Primus, Megatron-Bridge, NeMo 2 and the built-in trainer write them
(``primus_ext.logs``): warm-up and outliers are dropped and the step time is the median of the stable segment.
The log's argument dump must agree with the recipe on layout, batch, model size and GPU count (every difference
is listed with its fix; ``--follow-log`` projects the layout and batch the log ran instead). The record is
stored in the timing store (``--store``, else the default one), and from then on ``project``, ``tune`` and
``train --projection-only`` apply it: exactly to this workload, and with a wider band to nearby configurations
of the same model on the same GPU type (``--uncalibrated`` there turns it off). Exit codes: 0 stored (or
compared, ``--dry-run``), 2 unreadable log, mismatched recipe, or no physical correction fits.

Given a ``tune --verify-top`` folder instead of RECIPE, the manifest names the recipe and each candidate's log:
one record is fitted across the candidates that ran (``cli.calibrate_folder``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from primus_ext.calibration.compare import LogComparison
    from primus_ext.calibration.record import CalibrationRecord


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibrate", help="compare real training logs with the projection; store the correction")
    p.add_argument("recipe", nargs="?", help="the experiment YAML the logged run used, or a tune --verify-top folder")
    p.add_argument("inputs", nargs="*", metavar="LOG|key=value",
                   help="training logs (files, or a folder of *.log) and Megatron argument overrides")
    p.add_argument("--cluster", help="hardware profile of the run (e.g. mi355x, h100); default from the recipe")
    p.add_argument("--nodes", type=int, help="node count of the run; default from the recipe")
    p.add_argument("--config-root", action="append", default=[], metavar="DIR",
                   help="folder searched for model/module presets (repeatable)")
    p.add_argument("--store", metavar="FILE", help="timing store: layer costs read, calibration record written")
    p.add_argument("--device", help="whose measurements to read from the store (default: this machine)")
    p.add_argument("--accept-scaled", action="store_true", help="also use down-scaled store entries")
    p.add_argument("--compute", choices=("store", "analytic"), default="store",
                   help="layer costs of the projection compared: the store with roofline fallback, or roofline only")
    p.add_argument("--analytic", action="store_true", help="same as --compute analytic")
    p.add_argument("--follow-log", action="store_true",
                   help="project the layout and batch each log ran (instead of refusing a recipe that differs)")
    p.add_argument("--dry-run", action="store_true", help="compare only; store nothing")
    p.add_argument("--json", metavar="OUT", help="write the comparison as JSON ('-': stdout, the JSON only)")
    p.add_argument("--list", action="store_true", help="list the calibration records in the store and exit")
    p.add_argument("--forget", action="store_true", help="remove the records of RECIPE's model (all without RECIPE)")
    p.set_defaults(func=run)


def _split_inputs(items: list[str]) -> tuple[list[Path], list[str]]:
    logs, overrides = [], []
    for item in items:
        path = Path(item)
        if "=" in item and not path.exists():
            overrides.append(item)
        elif path.is_dir():
            found = sorted(path.glob("*.log"))
            if not found:
                from primus_ext.errors import PrimusExtError

                raise PrimusExtError(f"{item}: a folder without *.log files (give the training logs themselves)")
            logs.extend(found)
        else:
            logs.append(path)
    return logs, overrides


def _list(args: argparse.Namespace) -> int:
    from primus_ext.calibration import load_records

    records = load_records(args.store)
    if not records:
        print("no calibration records (primus-ext calibrate RECIPE LOG stores one)")
        return 0
    for r in records:
        c = r.correction
        memory = f", memory x{c.memory_factor:.3f}" if c.memory_factor else ""
        print(f"{r.describe()}\n    kernels x{c.kernel_factor:.3f} + {c.overhead_s * 1e3:.1f} ms/step"
              f"{' (whole step)' if c.scope == 'step' else ''}{memory}, spread {c.spread:.1%}; {r.workload.precision}")
    return 0


def _forget(args: argparse.Namespace) -> int:
    from primus_ext.calibration.workload import Workload
    from primus_ext.measure.store import TimingStore, default_store_path

    model = None
    if args.recipe:
        from primus_ext.recipe import load_recipe

        recipe = load_recipe(args.recipe, [], cluster=args.cluster, nodes=args.nodes, config_roots=args.config_root)
        model = Workload.of(recipe.model, recipe.execution, recipe.system).model
    path = Path(args.store) if args.store else default_store_path()
    if not path.exists():
        print("no calibration records")
        return 0
    with TimingStore(path, device="any", versions="any") as store:
        n = store.forget_calibrations(model=model)
    print(f"removed {n} calibration record(s) from {path}")
    return 0


def run(args: argparse.Namespace) -> int:
    from primus_ext.files import check_outputs
    from primus_ext.results import check_json_out

    if args.list:
        return _list(args)
    if args.forget:
        return _forget(args)
    if not args.recipe:
        from primus_ext.errors import PrimusExtError

        raise PrimusExtError("calibrate needs RECIPE and at least one LOG (or --list / --forget)")
    check_json_out(args.json)
    check_outputs(("--json", args.json), inputs=(args.recipe, *(i for i in args.inputs if "=" not in i)))
    if Path(args.recipe).is_dir():  # a tune --verify-top folder: its manifest names the recipe and the logs
        from primus_ext.cli.calibrate_folder import folder_jobs

        base, jobs, skipped = folder_jobs(args, Path(args.recipe))
        for line in skipped:
            print(f"skipped {line}", file=sys.stderr)
        return _conclude(args, base, _compare_all(args, base, jobs, skip_unreadable=True))
    logs, overrides = _split_inputs(list(args.inputs))
    if not logs:
        from primus_ext.errors import PrimusExtError

        raise PrimusExtError("no training log given: primus-ext calibrate RECIPE LOG [LOG ...]")

    def load(extra: list[str]) -> Any:
        from primus_ext.recipe import load_recipe

        return load_recipe(args.recipe, [*overrides, *extra], cluster=args.cluster, nodes=args.nodes,
                           config_roots=args.config_root)

    base = load([])
    loader: Loader = lambda extra: load(extra) if extra else base  # noqa: E731 (the base, loaded once)
    return _conclude(args, base, _compare_all(args, base, [(path, loader) for path in logs]))


Loader = Callable[[list[str]], Any]
"""Loads the recipe a log ran, with extra ``key=value`` overrides (``--follow-log``)."""


def _compare_all(args: argparse.Namespace, base: Any, jobs: list[tuple[Path, Loader]], *,
                 skip_unreadable: bool = False) -> list[LogComparison]:
    """Each log against the projection of the recipe its loader gives. An unreadable log is an error (exit 2),
    or with ``skip_unreadable`` said and left out (a verify-top candidate whose run failed)."""
    from primus_ext.calibration.compare import compare_log, mismatches
    from primus_ext.cli.project import _costs
    from primus_ext.errors import PrimusExtError, Problem, RecipeError
    from primus_ext.logs import LogError, read_log

    read, problems = [], []
    for path, loader in jobs:
        try:
            read.append((path, loader, read_log(path)))
        except LogError as err:
            if skip_unreadable:
                print(f"skipped {path}: {err}", file=sys.stderr)
                continue
            problems.append(Problem(path=str(path), message=str(err), fix="give a training log of the run"))
    if problems:
        raise RecipeError(problems=problems, source="(training logs)")
    comparisons = []
    fresh = args.store is not None and not Path(args.store).exists()  # the record will create it: nothing to read
    costs = None if fresh and args.compute == "store" else _costs(args, base)
    for path, loader, log in read:
        recipe = loader([])
        found, follow = mismatches(recipe, log)
        for flag in log.flags:
            print(f"warning: {path}: {flag}", file=sys.stderr)
        if found and not args.follow_log:
            problems.extend(Problem(path=f"{path}: {p.path}", value=p.value, message=p.message, fix=p.fix)
                            for p in found)
            continue
        if found:
            recipe = loader(follow)
        comparisons.append(compare_log(recipe, log, costs, path=str(path), followed=follow if found else ()))
        left = comparisons[-1].mismatches
        if left:
            problems.extend(Problem(path=f"{path}: {p.path}", value=p.value, message=p.message, fix=p.fix)
                            for p in left)
    if problems:
        raise RecipeError(problems=problems, source=f"{args.recipe} (against the logged runs)")
    if not comparisons:
        raise PrimusExtError("no log could be compared")
    return comparisons


def _conclude(args: argparse.Namespace, recipe: Any, comparisons: list[LogComparison]) -> int:
    from primus_ext.calibration.compare import fit_record
    from primus_ext.calibration.correction import CorrectionError
    from primus_ext.calibration.record import save_record
    from primus_ext.report.calibration_table import format_calibration
    from primus_ext.results import emit_json, tables_to_stderr

    record: CalibrationRecord | None = None
    refused = stored = None
    try:
        record = fit_record(comparisons, cluster=comparisons[0].projection.system.name)
    except CorrectionError as err:
        refused = str(err)
    if record is not None and not args.dry_run:
        stored = str(save_record(record, args.store))
    with tables_to_stderr(args.json):
        print(format_calibration(comparisons, record, stored=stored, refused=refused))
    if args.json:
        emit_json(_document(recipe, comparisons, record, stored, refused), args.json)
    if refused:
        print(f"not stored: {refused}", file=sys.stderr)
        return 2
    return 0


def _document(recipe: Any, comparisons: list[LogComparison], record: CalibrationRecord | None, stored: str | None,
              refused: str | None) -> dict[str, Any]:
    from primus_ext.calibration.apply import NEARBY_SPREAD
    from primus_ext.results import document
    from primus_ext.results.projection import recipe_fields

    p = comparisons[0].projection
    applies = []
    if record is not None:
        applies = [f"exactly: {record.workload.label}",
                   f"nearby (band +{NEARBY_SPREAD:.0%}): {p.model.name} in {record.workload.precision} on "
                   f"{record.workload.gpu}, any layout or batch"]
    return document("calibration", model=p.model.name, cluster=p.system.name, gpu=p.system.gpu.name,
                    nodes=p.system.num_nodes, world_size=p.system.world_size,
                    runs=[c.to_dict() for c in comparisons], record=None if record is None else record.to_dict(),
                    stored_in=stored, refused=refused, applies_to=applies, **recipe_fields(recipe))
