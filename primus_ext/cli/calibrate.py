"""``primus-ext calibrate``: read real training logs, compare them with the projection, store the correction.

    primus-ext calibrate RECIPE train.log --cluster mi355x --nodes 1        # compare, store a calibration record
    primus-ext calibrate RECIPE run1.log run2.log --follow-log             # runs of other layouts of the model
    primus-ext calibrate RECIPE train.log --dry-run --json -               # compare only, JSON to stdout
    primus-ext calibrate RECIPE-verify-top                                 # the logs of a tune --verify-top folder
    primus-ext calibrate --list                                            # the records in the timing store
    primus-ext calibrate --scope cluster A.yaml a.log B.yaml b.log         # the cluster's links (+ kernels)

Logs are read as Megatron-LM, Primus, Megatron-Bridge, NeMo 2 and the built-in trainer write them
(``primus_ext.logs``): warm-up and outliers are dropped and the step time is the median of the stable segment.
What the log states must agree with the recipe: model size, precision, layout, global batch, sequence length, GPU
type and GPU count (every difference is listed with its fix; ``--follow-log`` projects the layout, batch and
sequence length the log ran instead; what the log does not state is assumed the recipe's and said; its configuration
dump is read in Megatron-LM's, Megatron-Bridge's and NeMo's formats, ``logs.dump``). Another GPU type or precision
is refused whatever the flags (``--force --follow-log`` included). Refused unless
``--force``: a log of warm-up iterations only, with fewer than 3 steady iterations or with most lines unusable, and
a kernel factor outside the plausible range (``calibration.correction.PLAUSIBLE_KERNEL_FACTOR``, x1/3 to x3,
stated with its reason). The record is stored in the timing store (``--store``, else the default one), and from
then on ``project``, ``compare``, ``tune`` and ``train --projection-only`` apply it: exactly to this workload, and
with a wider band to nearby configurations of the same model on the same GPU type, each naming it (source log,
date, factor; ``--uncalibrated`` there ignores it). A workload's record is replaced only by better-evidenced runs
(at least as many steady iterations, no larger spread; ``--force`` replaces it anyway); other workloads' records
stay side by side. ``--list`` shows every record (logs, date, factor, evidence), ``--forget RECIPE`` removes its
model's records (``--forget`` alone: all, cluster records included). Exit codes: 0 stored (or compared,
``--dry-run``), 2 unreadable log, mismatched recipe, a refused log or correction, or a better record kept.

``--scope cluster`` (``cli.calibrate_cluster``) stores a record of the cluster instead: its links, overlap and, from
logs of several models, kernel factor, applied to every model projected on that profile and ``--cluster-label``.
A model record is compared on the cluster record that applies when it is calibrated, and stores it: it is applied
on that environment later (``session.Session.environment``: the order).

Given a ``tune --verify-top`` folder instead of RECIPE, the manifest names the recipe and each candidate's log:
one record is fitted across the candidates that ran (``cli.calibrate_folder``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from primus_ext.argtypes import MAX_NODE_FLAG, int_in
from primus_ext.cli._args import add_cost_arguments, session_of
from primus_ext.cli.calibrate_logs import Loader, compare_all, split_inputs

if TYPE_CHECKING:
    from primus_ext.calibration.compare import LogComparison
    from primus_ext.calibration.record import CalibrationRecord


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibrate", help="compare real training logs with the projection; store the correction")
    p.add_argument("recipe", nargs="?", help="the experiment YAML the logged run used, or a tune --verify-top folder")
    p.add_argument("inputs", nargs="*", metavar="LOG|key=value",
                   help="training logs (files, or a folder of *.log) and Megatron argument overrides")
    p.add_argument("--cluster", help="hardware profile of the run (e.g. mi355x, h100); default from the recipe")
    p.add_argument("--nodes", type=int_in(1, MAX_NODE_FLAG), help="node count of the run; default from the recipe")
    p.add_argument("--config-root", action="append", default=[], metavar="DIR",
                   help="folder searched for model/module presets (repeatable)")
    add_cost_arguments(p)  # the store is also where the record is written
    p.add_argument("--follow-log", action="store_true",
                   help="project the layout and batch each log ran (instead of refusing a recipe that differs)")
    p.add_argument("--dry-run", action="store_true", help="compare only; store nothing")
    p.add_argument("--force", action="store_true",
                   help="store a correction outside the plausible range, from a warm-up-only or mostly unusable log, "
                        "or over a better-evidenced record of the same workload (never a log of another GPU type or "
                        "precision)")
    p.add_argument("--json", metavar="OUT", help="write the comparison as JSON ('-': stdout, the JSON only)")
    p.add_argument("--scope", choices=("model", "cluster"), default="model",
                   help="model: a record of RECIPE's model (default); cluster: a record of the cluster's links, "
                        "overlap and kernels for every model on it (give RECIPE LOG pairs of one or more models)")
    p.add_argument("--cluster-label", metavar="NAME",
                   help="which cluster of the profile (--scope cluster: the record's label; model scope: the cluster "
                        "record the comparison runs on); default $PRIMUS_EXT_CLUSTER_LABEL, else unlabelled")
    p.add_argument("--factors", metavar="LIST", type=lambda text: tuple(x for x in text.split(",") if x),
                   help="--scope cluster: the factors to fit (scaleup_link, scaleout_link, kernels, overlap; default: "
                        "as many as the logs have configurations, links first)")
    p.add_argument("--list", action="store_true", help="list the calibration records in the store and exit")
    p.add_argument("--forget", action="store_true", help="remove the records of RECIPE's model (all without RECIPE; "
                   "with --scope cluster: the cluster records of --cluster / --cluster-label, all without them)")
    p.set_defaults(func=run)


def _list(args: argparse.Namespace, clusters: list[str]) -> int:
    from primus_ext.calibration import load_records
    from primus_ext.measure.store import default_store_path

    path = args.store or default_store_path()
    records = load_records(args.store)
    for line in clusters:
        print(line)
    if not records:
        print(f"no {'per-model ' if clusters else ''}calibration records in {path} (primus-ext calibrate RECIPE LOG "
              "stores one)")
        return 0
    print(f"{len(records)} calibration record(s) in {path}; each changes every later projection of its model on its "
          "GPU type (exactly its own workload, nearby ones with a wider band):")
    for r in records:
        c = r.correction
        memory = f", memory x{c.memory_factor:.3f}" if c.memory_factor else ""
        print(f"{r.describe()}\n    kernels x{c.kernel_factor:.3f} + {c.overhead_s * 1e3:.1f} ms/step"
              f"{' (whole step)' if c.scope == 'step' else ''}{memory}; {r.workload.precision}, {r.costs} layer costs"
              f"\n    from {', '.join(r.logs) or 'unnamed logs'} ({r.date or 'undated'}): {r.evidence()}")
        if r.environment is not None:
            print(f"    fitted on the cluster record of {str(r.environment.get('date', ''))[:10]} "
                  f"({r.environment.get('profile')}, values {r.environment.get('values')}): applied on it")
        for note in r.notes:
            print(f"    note: {note}")
    print("undo: primus-ext calibrate --forget RECIPE (that model's records), --forget (all); "
          "or --uncalibrated on project / compare / tune to ignore them once")
    return 0


def _forget(args: argparse.Namespace) -> int:
    from primus_ext.calibration import load_records
    from primus_ext.calibration.workload import Workload
    from primus_ext.measure.store import TimingStore, default_store_path

    model = None
    if args.recipe:
        model = Workload.model_key(_model_of(args))
    path = Path(args.store) if args.store else default_store_path()
    if not path.exists():
        print(f"no calibration records ({path} does not exist)")
        return 0
    for r in load_records(path, model=model):
        print(f"forgetting {r.describe()}: {r.source()}")
    with TimingStore(path, device="any", versions="any") as store:
        n = store.forget_calibrations(model=model)
    print(f"removed {n} calibration record(s) from {path}")
    if model is None:  # --forget alone: every record, the cluster ones too
        from primus_ext.cli.calibrate_cluster import forget_clusters

        forget_clusters(args)
    return 0


def _model_of(args: argparse.Namespace) -> Any:
    """RECIPE's model (``--forget``): the architecture alone names its records, on any target (a recipe that states
    none is read on the ``cpu`` profile: the model does not depend on it)."""
    from primus_ext.errors import RecipeError

    session = session_of(args)

    def load(cluster: str | None) -> Any:
        return session.load(args.recipe, [], cluster=cluster, nodes=args.nodes, config_roots=args.config_root,
                            validate=False).model

    try:
        return load(args.cluster)
    except RecipeError as err:
        if args.cluster is not None or not any(p.path == "--cluster" for p in err.problems):
            raise
        return load("cpu")


def run(args: argparse.Namespace) -> int:
    from primus_ext.files import check_outputs
    from primus_ext.results import check_json_out

    if args.list:
        from primus_ext.cli.calibrate_cluster import list_clusters

        return _list(args, list_clusters(args))
    if args.forget:
        if args.scope == "cluster":
            from primus_ext.cli.calibrate_cluster import forget_clusters

            return forget_clusters(args)
        return _forget(args)
    if args.scope == "cluster":
        from primus_ext.cli.calibrate_cluster import run_cluster

        return run_cluster(args)
    if not args.recipe:
        from primus_ext.errors import PrimusExtError

        raise PrimusExtError("calibrate needs RECIPE and at least one LOG (or --list / --forget)")
    check_json_out(args.json)
    check_outputs(("--json", args.json), inputs=(args.recipe, *(i for i in args.inputs if "=" not in i)))
    session = session_of(args)  # the one session: the recipe's target, the cluster record, the layer costs
    if Path(args.recipe).is_dir():  # a tune --verify-top folder: its manifest names the recipe and the logs
        from primus_ext.cli.calibrate_folder import folder_jobs

        base, jobs, skipped = folder_jobs(args, session, Path(args.recipe))
        for line in skipped:
            print(f"skipped {line}", file=sys.stderr)
        cluster = _cluster_basis(session, base)
        return _conclude(args, base, compare_all(args, session, base, jobs, skip_unreadable=True,
                                                 environment=cluster), environment=cluster)
    logs, overrides = split_inputs(list(args.inputs))
    if not logs:
        from primus_ext.errors import PrimusExtError

        raise PrimusExtError("no training log given: primus-ext calibrate RECIPE LOG [LOG ...]")

    def load(extra: list[str]) -> Any:
        return session.load(args.recipe, [*overrides, *extra], cluster=args.cluster, nodes=args.nodes,
                            config_roots=args.config_root)

    base = load([])
    loader: Loader = lambda extra: load(extra) if extra else base  # noqa: E731 (the base, loaded once)
    cluster = _cluster_basis(session, base)
    return _conclude(args, base, compare_all(args, session, base, [(path, loader) for path in logs],
                                             environment=cluster), environment=cluster)


def _cluster_basis(session: Any, recipe: Any) -> Any:
    """The cluster record a model record's comparison runs on (that profile and ``--cluster-label``), or None."""
    found, note = session.cluster_record(recipe.system)
    if note:
        print(f"note: {note}", file=sys.stderr)
    if found is not None:
        print(f"compared on the cluster record {found.source(recipe.system.gpu)}: the model record is fitted over "
              "it, and applied on it", file=sys.stderr)
    return found


def _conclude(args: argparse.Namespace, recipe: Any, comparisons: list[LogComparison], *,
              environment: Any = None) -> int:
    from primus_ext.calibration.compare import fit_record
    from primus_ext.calibration.correction import CorrectionError
    from primus_ext.calibration.record import save_record
    from primus_ext.report.calibration_table import format_calibration
    from primus_ext.results import emit_json, tables_to_stderr

    record: CalibrationRecord | None = None
    refused = stored = None
    try:
        record = fit_record(comparisons, cluster=comparisons[0].projection.system.name, force=args.force)
        if environment is not None:
            from dataclasses import replace

            record = replace(record, environment=environment.to_dict())
        if not args.dry_run:
            stored = str(save_record(record, args.store, replace=args.force))
    except CorrectionError as err:  # no physical or plausible correction, or a better record kept (RecordKept)
        refused = str(err)
    with tables_to_stderr(args.json):
        print(format_calibration(comparisons, record, stored=stored, refused=refused))
        if recipe.target is not None:
            print(recipe.target.describe(recipe.system, recipe.nodes_source))
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
