"""``primus-ext tune``: search a faster legal configuration with the projection as the oracle.

    primus-ext tune recipes/mixtral_8x22B-pretrain.yaml --cluster mi355x --nodes 4
    primus-ext tune recipes/deepseek_v3-pretrain.yaml --cluster h100 --nodes 128 --strategy exhaustive
    primus-ext tune RECIPE --strategy llm --llm openai/gpt-4o --budget 40 --log trials.jsonl
    primus-ext tune RECIPE --resume trials.jsonl --budget 80          # continue a logged search
    primus-ext tune RECIPE --pin tp=1,2 --pin recompute=none,block25,block50 --margin 0.05 --apply

The search goes legality -> memory pre-filter (``--margin``: fraction of HBM kept free) -> projection
(analytic roofline, or the timing store with ``--store``). ``--out FILE`` writes a tuned copy of the
recipe, ``--apply`` rewrites it in place (backup ``RECIPE.bak``); both print the diff and reload the
result to check it resolves to the tuned configuration. ``--json OUT`` writes everything (ranking,
best, gain, regret, Pareto front, sensitivity, notes) as the result schema's ``tune`` document
(``primus_ext.results``); ``--json -`` writes it to stdout and the tables to stderr. LLM keys come from the
environment only (e.g. ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``); they are never printed or logged.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from primus_ext.cli._args import nonnegative_float
from primus_ext.model.memory import DEFAULT_MARGIN

if TYPE_CHECKING:
    from primus_ext.errors import Problem
    from primus_ext.projection.evaluate import Costs
    from primus_ext.recipe import Recipe
    from primus_ext.specs import ExecutionSpec
    from primus_ext.tune.agent import SearchStats
    from primus_ext.tune.space import Space


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("tune", help="search a faster legal configuration (projection as the oracle)")
    p.add_argument("recipe", help="experiment YAML (Primus format) or flat Megatron-argument YAML")
    p.add_argument("--cluster", help="hardware profile (e.g. mi355x, h100); default from the recipe")
    p.add_argument("--nodes", type=int, help="node count; default from the recipe")
    p.add_argument("--config-root", action="append", default=[], metavar="DIR",
                   help="folder searched for model/module presets (repeatable)")
    p.add_argument("--strategy", choices=("exhaustive", "tpe", "llm"), default="tpe")
    p.add_argument("--budget", type=int, default=100, help="projections the strategy may spend (default 100)")
    p.add_argument("--llm", metavar="MODEL", help="litellm model string for --strategy llm (e.g. openai/gpt-4o)")
    p.add_argument("--llm-api-base", metavar="URL", help="OpenAI-compatible endpoint (e.g. a local server)")
    p.add_argument("--llm-timeout", type=nonnegative_float, default=60.0, metavar="S",
                   help="wall-clock deadline of one LLM call, to the reply's last byte (default 60)")
    p.add_argument("--llm-total", type=nonnegative_float, default=600.0, metavar="S",
                   help="wall-clock budget of all LLM calls; then tpe goes on (default 600)")
    p.add_argument("--margin", type=nonnegative_float, default=DEFAULT_MARGIN, metavar="F",
                   help=f"fraction of GPU memory kept free by the pre-filter (default {DEFAULT_MARGIN}; 0 to allow "
                        "the memory edge)")
    p.add_argument("--pin", action="append", default=[], metavar="AXIS=V[,V...]",
                   help="limit an axis to these values (repeatable); axes: tp etp pp vpp split cp ep mbs recompute "
                        "sharding precision tp_comm_overlap ep_overlap dp_overlap")
    p.add_argument("--seed", type=int, default=0)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--out", metavar="FILE", help="write a tuned copy of the recipe")
    out.add_argument("--apply", action="store_true",
                     help="rewrite the recipe in place (after a backup: RECIPE.bak, never replaced, then .bak.2 ...)")
    p.add_argument("--force", action="store_true", help="with --apply / --out: replace a read-only file")
    p.add_argument("--json", metavar="OUT",
                   help="write the full result as JSON ('-': stdout, the JSON only; the tables go to stderr)")
    p.add_argument("--log", metavar="FILE", help="append every trial to this JSON-lines log")
    p.add_argument("--resume", metavar="LOG", help="continue the search logged in LOG (and keep logging to it)")
    p.add_argument("--no-regret", action="store_true", help="skip the exhaustive reference for the regret")
    p.add_argument("--top", type=int, default=10, help="rows of the ranking to print")
    p.add_argument("--store", metavar="FILE",
                   help="timing store with measured layer costs (SQLite, or its JSON-lines export)")
    p.add_argument("--analytic", action="store_true", help="analytic roofline costs only (ignore any store)")
    p.set_defaults(func=run)


def _costs(args: argparse.Namespace, gpu_name: str) -> Costs:
    if args.analytic:
        return None
    from primus_ext.measure.store import default_store_path, store_for_target

    path = args.store or (default_store_path() if default_store_path().exists() else None)
    return None if path is None else store_for_target(path, gpu_name)


def run(args: argparse.Namespace) -> int:
    from primus_ext.results import emit_json, tables_to_stderr

    with tables_to_stderr(args.json):
        result = _search(args)
    if args.json:
        emit_json(result.document, args.json)
    if result.nothing_runs is not None:
        raise result.nothing_runs
    if args.out or args.apply:
        with tables_to_stderr(args.json):
            _write(args, result.recipe, result.best_execution)
    return 0


@dataclass(frozen=True, kw_only=True)
class _Searched:
    """What ``run`` needs of a finished search."""

    document: dict[str, Any]
    """The ``tune`` document (``primus_ext.results.tune``)."""
    recipe: Recipe
    best_execution: ExecutionSpec | None
    """The winner, None when nothing runs."""
    nothing_runs: Exception | None
    """Why nothing runs (raised after the JSON is written), when ``best_execution`` is None."""


def _search(args: argparse.Namespace) -> _Searched:
    """Search, print the tables; the result."""
    from primus_ext.errors import Problem, RecipeError
    from primus_ext.recipe import load_recipe
    from primus_ext.report.tune_table import format_tune
    from primus_ext.tune.agent import SearchContext, TrialLog, read_log
    from primus_ext.tune.oracle import projection_oracle
    from primus_ext.tune.prefilter import MemoryFilter
    from primus_ext.tune.results import ENUMERABLE_MAX, tune
    from primus_ext.tune.space import build_space, parse_pins
    from primus_ext.tune.strategies import StrategyOptions

    if args.budget < 1 or not 0.0 <= args.margin < 1.0:
        raise RecipeError(problems=[Problem(path="--budget/--margin", value=(args.budget, args.margin),
                                            message="budget must be >= 1 and margin in [0, 1)")])
    _check_outputs(args)
    recipe = load_recipe(args.recipe, cluster=args.cluster, nodes=args.nodes, config_roots=args.config_root,
                         validate=False)
    space = build_space(recipe.model, recipe.execution, recipe.system, parse_pins(args.pin))
    header = {"recipe": str(args.recipe), "cluster": recipe.system.name, "nodes": recipe.system.num_nodes,
              "margin": args.margin, "pins": {k: list(v) for k, v in space.pins.items()}}
    log_path = args.resume or args.log
    previous = read_log(args.resume, expect=header) if args.resume else []
    costs = _costs(args, recipe.system.gpu.name)
    ctx = SearchContext(space=space, oracle=projection_oracle(recipe.model, recipe.system, costs),
                        prefilter=MemoryFilter(recipe.model, recipe.system, margin=args.margin),
                        budget=args.budget, log=TrialLog(log_path, header) if log_path else None,
                        detail=args.strategy != "exhaustive")
    ctx.seed(previous)
    candidates = None if args.no_regret else space.size()
    options = StrategyOptions(seed=args.seed, llm_model=args.llm, llm_api_base=args.llm_api_base,
                              llm_timeout_s=args.llm_timeout, llm_total_s=args.llm_total)
    try:
        result = tune(ctx, args.strategy, baseline=recipe.execution, options=options,
                      regret=not args.no_regret and (candidates or 0) <= ENUMERABLE_MAX, candidates=candidates)
    finally:
        if ctx.log is not None:
            ctx.log.close()
    launch = recipe.execution.launch
    environment = {"CUDA_DEVICE_MAX_CONNECTIONS": launch.cuda_device_max_connections,
                   "source": launch.connections_source, "framework": launch.framework,
                   "fsdp_sets_8": launch.framework == "primus" and launch.env_patches}
    print(format_tune(result, top=args.top))
    print(f"memory margin: {args.margin:.0%} of each GPU's HBM kept free"
          + (" (the default: context, NCCL buffers, workspaces and fragmentation are already in each peak; the "
             "margin is for what the model cannot see; --margin changes it)" if args.margin == DEFAULT_MARGIN else ""))
    print(f"launch environment checked: CUDA_DEVICE_MAX_CONNECTIONS={launch.cuda_device_max_connections} "
          f"({launch.connections_source}" + ("; Primus sets 8 for FSDP runs)" if environment["fsdp_sets_8"] else ")")
          + "; export another value before tuning to check against it")
    from primus_ext.results.tune import tune_document

    document = tune_document(result, recipe=recipe, margin=args.margin, launch_environment=environment)
    nothing = RecipeError(problems=[_nothing_runs(ctx.stats, space, recipe, args)]) if (
        result.best_execution is None) else None
    return _Searched(document=document, recipe=recipe, best_execution=result.best_execution, nothing_runs=nothing)


def _nothing_runs(stats: SearchStats, space: Space, recipe: Recipe, args: argparse.Namespace) -> Problem:
    """Why the search found nothing to project: the counts of illegal and over-memory candidates, and what to do."""
    from primus_ext.errors import Problem

    illegal = stats.illegal + stats.pruned_illegal
    memory = stats.rejected_by_prefilter + stats.pruned_by_prefilter
    system = recipe.system
    pins = f"; pinned: {', '.join(args.pin)}" if args.pin else ""
    where = f"{system.num_nodes} x {system.gpu.gpus_per_node} {system.gpu.name}"
    counted = (f": {illegal} illegal, {memory} over the memory limit (margin {args.margin:.0%})"
               if illegal + memory else f": the {args.strategy} search proposed none that is legal and fits")
    return Problem(
        path="--nodes", value=system.num_nodes,
        message=f"no configuration of the search space ({space.size()} candidates) runs on {where}{counted}{pins}; "
                "nothing was written",
        fix="use more nodes (--nodes), a smaller --margin, or fewer --pin constraints"
            + ("; --strategy exhaustive counts why" if not illegal + memory else ""))


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse unwritable ``--out`` / ``--json`` / ``--log`` paths before the search spends its budget (a missing
    ``--resume`` log: ``agent.read_log``)."""
    from primus_ext.errors import RecipeError
    from primus_ext.files import output_problem
    from primus_ext.results import check_json_out

    check_json_out(args.json)
    problems = []
    outputs = (("--out", args.out), ("--apply", args.recipe if args.apply else None),
               ("--json", None if args.json == "-" else args.json), ("--log", args.log))
    problems += [p for flag, value in outputs if value and (p := output_problem(
        value, flag, replace_read_only=args.force and flag in ("--out", "--apply"))) is not None]
    if args.out and not problems:  # an existing --out is read for the diff: it must be text
        from pathlib import Path

        from primus_ext.recipe.rewrite import read_text

        try:
            if Path(args.out).is_file():
                read_text(Path(args.out))
        except RecipeError as err:
            problems += err.problems
    if problems:
        raise RecipeError(problems=problems)


def _write(args: argparse.Namespace, recipe: Recipe, tuned: ExecutionSpec) -> None:
    """Rewrite, then reload the written file to check it resolves to the tuned execution. A probe copy is written
    beside the target (relative ``extends`` and presets resolve from the target's folder, as they will for the
    real file) and removed again; ``args.written`` names the file written."""
    from pathlib import Path

    from primus_ext.errors import Problem, RecipeError
    from primus_ext.files import sweep, temp_path
    from primus_ext.recipe import load_recipe
    from primus_ext.recipe.rewrite import execution_changes, rewrite

    changes = execution_changes(recipe, tuned)
    cluster = {"cluster": recipe.system.name, "nodes": recipe.system.num_nodes}
    target = args.recipe if args.apply else args.out
    preview = rewrite(args.recipe, changes, out=target, cluster=cluster, dry_run=True, module=recipe.module,
                      force=args.force)
    if not preview.changed:
        print(f"{target}: already the tuned configuration, nothing to write")
        return
    probe = temp_path(Path(os.path.realpath(target)), "check.yaml")  # beside where it is written
    sweep(Path(os.path.realpath(target)))
    try:
        rewrite(args.recipe, changes, out=probe, cluster=cluster, module=recipe.module)
        reloaded = load_recipe(probe, cluster=args.cluster, nodes=args.nodes, config_roots=args.config_root)
    except RecipeError as err:
        reloaded, failure = None, "; ".join(f"{p.path}: {p.message}" for p in err.problems[:3])
    finally:
        for leftover in (probe, Path(str(probe) + ".bak")):
            leftover.unlink(missing_ok=True)
    if reloaded is None or reloaded.execution != tuned:
        moved = Path(target).resolve().parent != Path(args.recipe).resolve().parent
        why = f" (reloading it failed: {failure})" if reloaded is None else ""
        raise RecipeError(problems=[Problem(
            path=str(target), value=None,
            message=f"the rewritten recipe does not resolve to the tuned configuration{why}; nothing was written",
            fix=("write the tuned copy in the recipe's folder: its relative extends / presets resolve from there"
                 if moved else "report this; write the keys of the diff by hand"))])
    result = rewrite(args.recipe, changes, out=target, cluster=cluster, module=recipe.module, force=args.force)
    sys.stdout.write(result.diff)
    print(f"wrote {result.path}" + (f" (backup {result.backup})" if result.backup else ""))
    args.written = result.path
