"""``primus-ext calibrate --scope cluster``: a record of the cluster's environment from logs of one or more models.

    primus-ext calibrate --scope cluster llama.yaml llama.log --cluster mi355x --nodes 1      # one log: links alone
    primus-ext calibrate --scope cluster llama.yaml llama.log dsv2.yaml dsv2.log --cluster mi355x --nodes 1
    primus-ext calibrate --scope cluster A.yaml a.log --cluster-label rack-3 --factors scaleup_link,overlap
    primus-ext calibrate --list            # model and cluster records;  --forget --scope cluster: remove cluster ones

Each RECIPE is followed by the logs of its runs (and its ``key=value`` overrides); a new ``.yaml`` starts the next
model. Every log is checked against its recipe as ``calibrate`` checks one (``--follow-log`` likewise) and compared
with the projection on the profile as shipped. The fit (``calibration.cluster_fit``: which factors, identifiability)
and the record (``calibration.cluster``: what "the same cluster" is, replacement) are documented there. Refused (exit
2, nothing stored): recipes on different profiles, a fit that is not identifiable or ends at its range's edge, and,
unless ``--force``, a factor outside its plausible range (``calibration.environment``: scale-up links slower than a
PCIe 3.0 x16 link, scale-out slower than 10 Gb/s Ethernet per GPU, kernels beyond x1/3..x3).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from primus_ext.errors import PrimusExtError

RECIPE_SUFFIXES = (".yaml", ".yml")


def groups_of(recipe: str, inputs: list[str]) -> list[tuple[str, list[Path], list[str]]]:
    """(recipe, logs, overrides) per model: a ``.yaml`` input starts the next one."""
    from primus_ext.cli.calibrate_logs import split_inputs as _split_inputs

    groups: list[tuple[str, list[str]]] = [(recipe, [])]
    for item in inputs:
        if Path(item).suffix in RECIPE_SUFFIXES and "=" not in item:
            groups.append((item, []))
        else:
            groups[-1][1].append(item)
    out = []
    for path, items in groups:
        logs, overrides = _split_inputs(items)
        if not logs:
            raise PrimusExtError(f"{path}: no training log follows it (RECIPE LOG [LOG ...] [RECIPE LOG ...])")
        out.append((path, logs, overrides))
    return out


def run_cluster(args: argparse.Namespace) -> int:
    from primus_ext.calibration.workload import Workload, fingerprint
    from primus_ext.cli._args import session_of
    from primus_ext.cli.calibrate_logs import compare_all as _compare_all
    from primus_ext.cli.calibrate_logs import layer_costs
    from primus_ext.files import check_outputs
    from primus_ext.results import check_json_out

    if not args.recipe:
        raise PrimusExtError("calibrate --scope cluster needs RECIPE LOG [RECIPE LOG ...]")
    if Path(args.recipe).is_dir():
        raise PrimusExtError(f"{args.recipe}: a tune --verify-top folder holds one model's runs; calibrate it without "
                             "--scope cluster")
    check_json_out(args.json)
    check_outputs(("--json", args.json))
    comparisons, recipes = [], []
    session = session_of(args)  # the one session: each recipe's target, the layer costs, the cluster label
    for path, logs, overrides in groups_of(args.recipe, list(args.inputs)):
        def load(extra: list[str], path: str = path, overrides: list[str] = overrides) -> Any:
            return session.load(path, [*overrides, *extra], cluster=args.cluster, nodes=args.nodes,
                                config_roots=args.config_root)

        base = load([])
        recipes.append(base)
        comparisons += _compare_all(args, session, base, [(log, lambda extra, load=load, base=base: load(extra)
                                                           if extra else base) for log in logs])
    profiles = sorted({r.system.name for r in recipes})
    if len(profiles) > 1:
        raise PrimusExtError(f"the recipes target {', '.join(profiles)}: a cluster record is of one cluster (one "
                             "profile); give --cluster, or calibrate each cluster on its own")
    system = recipes[0].system
    runs = [_run(c, Workload, fingerprint) for c in comparisons]
    record, refused, stored = _fit(args, comparisons, runs, layer_costs(session, system), system,
                                   label=session.cluster_label())
    _report(args, recipes[0], comparisons, record, stored, refused)
    if refused:
        print(f"not stored: {refused}", file=sys.stderr)
        return 2
    return 0


def _run(c: Any, workload: Any, fingerprint: Any) -> Any:
    from primus_ext.calibration.cluster_fit import ClusterRun

    p = c.projection
    return ClusterRun(name=c.path, measured_s=c.measured.step_s, spread=c.measured.spread,
                      configuration=fingerprint([workload.model_key(p.model), fingerprint(p.execution),
                                                 p.system.world_size]))


def _fit(args: argparse.Namespace, comparisons: list[Any], runs: list[Any], costs: Any, system: Any, *,
         label: str) -> tuple[Any, str | None, str | None]:
    """(record or None, why refused or None, where stored or None); ``label``: the record's cluster label."""
    from primus_ext.calibration.cluster import ClusterRecord, ClusterRun, save_cluster_record
    from primus_ext.calibration.cluster_fit import fit_environment
    from primus_ext.calibration.correction import CorrectionError
    from primus_ext.calibration.environment import apply_environment, implausible, profile_value
    from primus_ext.calibration.record import costs_of, now
    from primus_ext.projection import evaluate

    def step_of(i: int, values: Any) -> float:
        p = comparisons[i].projection
        return evaluate(p.model, p.execution, apply_environment(p.system, values), costs).step_time_s

    gpu = system.gpu
    try:
        fit = fit_environment(runs, step_of, gpu, factors=args.factors)
    except CorrectionError as err:
        return None, str(err), None
    notes = []
    problems = implausible(fit.values, gpu)
    if problems and not args.force:
        return None, "; ".join(problems) + "; --force stores it anyway", None
    notes += [f"stored with --force: {p}" for p in problems]
    kind = costs_of({f"{i}:{k}": v for i, c in enumerate(comparisons) for k, v in c.projection.sources.items()})
    if kind != "analytic" and "kernels" in fit.values:
        notes.append("some layer costs were measured (timing store): the kernel factor scales the roofline's only")
    record = ClusterRecord(
        profile=system.name, gpu=gpu.name, label=label, values=fit.values,
        profile_values={n: profile_value(n, gpu) for n in fit.values}, standard_errors=fit.standard_errors,
        held=fit.held, rule=fit.rule, date=now(), notes=tuple(notes),
        costs=kind,
        runs=tuple(ClusterRun(log=str(Path(c.path).resolve()) if c.path else "", model=c.projection.model.name,
                              configuration=r.configuration, measured_s=c.measured.step_s, before_s=before,
                              after_s=after, spread=c.measured.spread, iterations=c.measured.iterations)
                   for c, r, before, after in zip(comparisons, runs, fit.before_s, fit.after_s, strict=True)))
    if args.dry_run:
        return record, None, None
    try:
        return record, None, str(save_cluster_record(record, args.store, replace=args.force))
    except CorrectionError as err:  # RecordKept: a record on more configurations
        return record, str(err), None


def _report(args: argparse.Namespace, recipe: Any, comparisons: list[Any], record: Any, stored: str | None,
            refused: str | None) -> None:
    from primus_ext.report.calibration_table import format_run
    from primus_ext.report.cluster_table import applies_to, format_cluster
    from primus_ext.results import document, emit_json, tables_to_stderr
    from primus_ext.results.projection import recipe_fields

    with tables_to_stderr(args.json):
        blocks = [format_run(c) for c in comparisons]
        if record is not None:
            blocks.append(format_cluster(record, recipe.system.gpu, stored=stored, refused=refused))
        print("\n\n".join(blocks))
        if recipe.target is not None:
            print(recipe.target.describe(recipe.system, recipe.nodes_source))
    if args.json:
        p = comparisons[0].projection
        doc = document("calibration", scope="cluster", model=", ".join(sorted({c.projection.model.name
                                                                               for c in comparisons})),
                       cluster=p.system.name, gpu=p.system.gpu.name, nodes=p.system.num_nodes,
                       world_size=p.system.world_size, runs=[c.to_dict() for c in comparisons],
                       record=None if record is None else record.to_dict(), stored_in=stored, refused=refused,
                       applies_to=[] if record is None else [applies_to(record, stored)], **recipe_fields(recipe))
        emit_json(doc, args.json)


def list_clusters(args: argparse.Namespace) -> list[str]:
    """``calibrate --list``'s cluster block."""
    from primus_ext.calibration.cluster import load_cluster_records
    from primus_ext.measure.store import default_store_path
    from primus_ext.report.cluster_table import list_lines

    return list_lines(load_cluster_records(args.store), str(args.store or default_store_path()))


def forget_clusters(args: argparse.Namespace) -> int:
    """``calibrate --forget --scope cluster [--cluster P] [--cluster-label L]``."""
    from primus_ext.calibration.cluster import forget_cluster_records, load_cluster_records
    from primus_ext.hardware import canonical_name
    from primus_ext.measure.store import default_store_path

    profile = canonical_name(args.cluster) if args.cluster else None
    label = args.cluster_label
    path = args.store or default_store_path()
    for r in load_cluster_records(args.store, profile=profile):
        if label is None or r.label == label:
            print(f"forgetting {r.describe()}: {r.source()}")
    n = forget_cluster_records(args.store, profile=profile, label=label)
    print(f"removed {n} cluster record(s) from {path}")
    return 0
