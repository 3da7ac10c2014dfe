"""``primus-ext tune``: search a faster legal configuration with the projection as the oracle.

    primus-ext tune recipes/mixtral_8x22B-pretrain.yaml --cluster mi355x --nodes 4
    primus-ext tune recipes/deepseek_v3-pretrain.yaml --cluster h100 --nodes 128 --strategy exhaustive
    primus-ext tune RECIPE --strategy llm --llm openai/gpt-4o --budget 40 --log trials.jsonl
    primus-ext tune RECIPE --resume trials.jsonl --budget 80          # continue a logged search
    primus-ext tune RECIPE --pin tp=1,2 --pin recompute=none,block25,block50 --margin 0.05 --apply
    primus-ext tune RECIPE --max-changes 2   # among ties with the fastest, one changing at most 2 recipe keys

The search goes legality -> memory pre-filter (``--margin``: fraction of HBM kept free) -> projection
(``project``'s, with its cost flags: the timing store, ``--store`` or the default one when it exists, with the
roofline for what it lacks; ``--device`` / ``--accept-scaled`` which entries; ``--analytic`` the roofline only; the
stored calibration records of the model, ``--uncalibrated`` to ignore them; ``primus_ext.session``). ``--out FILE``
writes a tuned copy of the
recipe, ``--apply`` rewrites it in place (backup ``RECIPE.bak``); both print the diff and reload the
result to check it resolves to the tuned configuration. ``--json OUT`` writes everything (ranking,
best, gain, regret, Pareto front, sensitivity, notes) as the result schema's ``tune`` document
(``primus_ext.results``); ``--json -`` writes it to stdout and the tables to stderr. LLM keys come from the
environment only (e.g. ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``); they are never printed or logged.

Multi-fidelity (``primus_ext.launcher.verify_top``): ``--verify-top K`` writes the K best configurations as short-run
variants of the recipe into ``--verify-dir`` (default ``<recipe stem>-verify-top/`` beside it; ``candidate-N.yaml``
with ``--verify-iters`` iterations, every iteration logged, no checkpoints), a ``manifest.json`` and ``launch.sh``
(``launch.sh primus|megatron``: each run writes ``candidate-N.log``). After the runs, ``--resume-verify`` re-ranks
the folder's logs without searching again: measured vs projected ranks, the projection's selection regret and,
from three runs, Spearman's rank correlation (``--json``: the tune document with its ``verify_top`` field;
``primus_ext.launcher.verify_top.rerank(DIR)`` is the same re-ranking as a function). ``--verify-run local`` runs the
variants here instead, with the built-in trainer as ``train --verify`` does (``--verify-scale``,
``--verify-nproc``), against the projection of the same reduced runs::

    primus-ext tune RECIPE --verify-top 3 --verify-run local --verify-scale 0.0625 --verify-iters 6
    primus-ext tune RECIPE --verify-top 3 --verify-dir runs/ --resume-verify --json -
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from primus_ext.argtypes import MAX_BUDGET, MAX_ITERS, MAX_NODE_FLAG, MAX_RANKS, MAX_ROWS_SHOWN, MAX_SEED, int_in
from primus_ext.cli._args import add_calibration_arguments, add_cost_arguments, nonnegative_float, session_of
from primus_ext.launcher.verify_top.variants import DEFAULT_ITERS as DEFAULT_VERIFY_ITERS
from primus_ext.model.memory import DEFAULT_MARGIN
from primus_ext.tune.strategies import STRATEGIES

MIN_VERIFY_ITERS = 3
"""The log reader drops a run's first two iterations as warm-up (``primus_ext.logs.stats``)."""

if TYPE_CHECKING:
    from primus_ext.errors import Problem
    from primus_ext.recipe import Recipe
    from primus_ext.specs import ExecutionSpec
    from primus_ext.tune.agent import SearchStats
    from primus_ext.tune.space import Space


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("tune", help="search a faster legal configuration (projection as the oracle)")
    p.add_argument("recipe", help="experiment YAML (Primus format) or flat Megatron-argument YAML")
    p.add_argument("--cluster", help="hardware profile (e.g. mi355x, h100); default from the recipe")
    p.add_argument("--nodes", type=int_in(1, MAX_NODE_FLAG), help="node count; default from the recipe")
    p.add_argument("--config-root", action="append", default=[], metavar="DIR",
                   help="folder searched for model/module presets (repeatable)")
    p.add_argument("--strategy", choices=("auto", *STRATEGIES), default="auto",
                   help="auto (default): exhaustive when the space enumerates in ~15 s (75 000 candidates at the "
                        "measured 5 000/s), else tpe; the output's notes say which")
    p.add_argument("--max-changes", type=int_in(0, 10_000), metavar="N",
                   help="among the configurations tied with the fastest (inside its band), take the fastest that "
                        "changes at most N keys of the recipe (default: the recipe's own on a tie, else the fastest)")
    p.add_argument("--budget", type=int_in(1, MAX_BUDGET), default=100,
                   help=f"projections the strategy may spend (default 100, at most {MAX_BUDGET:,})")
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
                   help="limit an axis to these values (repeatable); an axis by its label or the recipe key it "
                        "sets: tp etp pp vpp schedule split cp ep mbs recompute sharding precision tp_comm_overlap "
                        "ep_overlap dp_overlap (tp = tensor_model_parallel_size, mbs = micro_batch_size, ...)")
    p.add_argument("--seed", type=int_in(0, MAX_SEED), default=0)
    out = p.add_mutually_exclusive_group()
    out.add_argument("--out", metavar="FILE", help="write a tuned copy of the recipe")
    out.add_argument("--apply", action="store_true",
                     help="rewrite the recipe in place (after a backup: RECIPE.bak, never replaced, then .bak.2 ...)")
    p.add_argument("--force", action="store_true", help="with --apply / --out: replace a read-only file; with "
                   "--verify-top: write into a non-empty --verify-dir (its old logs kept as candidate-N.log.bak)")
    p.add_argument("--json", metavar="OUT",
                   help="write the full result as JSON ('-': stdout, the JSON only; the tables go to stderr)")
    p.add_argument("--log", metavar="FILE", help="append every trial to this JSON-lines log")
    p.add_argument("--resume", metavar="LOG", help="continue the search logged in LOG (and keep logging to it)")
    p.add_argument("--no-regret", action="store_true", help="skip the exhaustive reference for the regret")
    p.add_argument("--top", type=int_in(0, MAX_ROWS_SHOWN), default=10, help="rows of the ranking to print")
    add_cost_arguments(p)
    add_calibration_arguments(p)
    verify = p.add_argument_group("multi-fidelity: short real runs of the K best (primus_ext.launcher.verify_top)")
    verify.add_argument("--verify-top", type=int_in(1, 64), metavar="K",
                        help="write short-run variants of the K best configurations, a manifest and launch.sh")
    verify.add_argument("--verify-dir", metavar="DIR", help="their folder (default <recipe stem>-verify-top beside "
                        "the recipe); a non-empty one needs --force")
    verify.add_argument("--verify-iters", type=int_in(1, MAX_ITERS), default=DEFAULT_VERIFY_ITERS, metavar="N",
                        help=f"iterations of each short run (default {DEFAULT_VERIFY_ITERS}; at least 3)")
    verify.add_argument("--verify-run", choices=("local",),
                        help="local: run each variant here with the built-in trainer (as train --verify) and re-rank")
    verify.add_argument("--verify-scale", type=nonnegative_float, default=1.0, metavar="F",
                        help="with --verify-run local: shrink the model by F (e.g. 0.0625 on CPU; default 1)")
    verify.add_argument("--verify-nproc", type=int_in(1, MAX_RANKS), metavar="N",
                        help="with --verify-run local: local ranks per run (default: each candidate's TP x PP x CP)")
    verify.add_argument("--resume-verify", action="store_true",
                        help="no search: re-rank the candidates in --verify-dir from the logs already there")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from primus_ext.results import emit_json, tables_to_stderr

    if args.resume_verify:
        return _resume_verify(args)
    with tables_to_stderr(args.json):
        result = _search(args)
        if args.verify_top and result.best_execution is not None:
            result.document["verify_top"] = _verify_top(args, result)
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
    ranked: tuple[Any, ...] = ()
    """The projected trials, best first (``tune.agent.Trial``)."""
    to_execution: Any = None
    """``Space.to_execution``: a trial's configuration as an ``ExecutionSpec``."""


def _search(args: argparse.Namespace) -> _Searched:
    """Search, print the tables; the result."""
    from primus_ext.cli._progress import ProgressLine
    from primus_ext.errors import Problem, RecipeError
    from primus_ext.files import check_outputs
    from primus_ext.report.tune_table import format_tune
    from primus_ext.tune.agent import SearchContext, TrialLog, read_log
    from primus_ext.tune.configure import PRIMUS_SCHEDULES
    from primus_ext.tune.prefilter import MemoryFilter
    from primus_ext.tune.run import ENUMERABLE_MAX, choose_strategy, tune
    from primus_ext.tune.space import build_space, parse_pins
    from primus_ext.tune.strategies import StrategyOptions

    if args.budget < 1 or not 0.0 <= args.margin < 1.0 or (args.max_changes or 0) < 0:
        raise RecipeError(problems=[Problem(path="--budget/--margin", value=(args.budget, args.margin),
                                            message="budget must be >= 1, margin in [0, 1) and --max-changes >= 0")])
    _check_outputs(args)
    session = session_of(args, calibrated=not args.uncalibrated)
    recipe = session.load(args.recipe, cluster=args.cluster, nodes=args.nodes, config_roots=args.config_root,
                          validate=False)
    check_outputs(("--out", args.out), ("--json", args.json),  # its presets too,
                  ("--log", args.log))  # before the search
    if args.out:
        _check_out_folder(args, recipe)
    space = build_space(recipe.model, recipe.execution, recipe.system, parse_pins(args.pin),
                        schedules=PRIMUS_SCHEDULES if recipe.module else ())  # zero bubble runs under Primus only
    header = {"recipe": str(args.recipe), "cluster": recipe.system.name, "nodes": recipe.system.num_nodes,
              "margin": args.margin, "pins": {k: list(v) for k, v in space.pins.items()}}
    log_path = args.resume or args.log
    candidates = None if args.no_regret and args.strategy != "auto" else space.size()
    strategy, chosen = (choose_strategy(candidates) if args.strategy == "auto" else (args.strategy, None))
    previous = read_log(args.resume, expect=header) if args.resume else []
    oracle = session.oracle(recipe)
    ctx = SearchContext(space=space, oracle=oracle,
                        prefilter=MemoryFilter(recipe.model, recipe.system, margin=args.margin,
                                               memory_factor=session.memory_factor(recipe)),
                        budget=args.budget, log=TrialLog(log_path, header) if log_path else None,
                        detail=strategy != "exhaustive")
    ctx.seed(previous)
    options = StrategyOptions(seed=args.seed, keep=max(1, args.verify_top or 1), llm_model=args.llm,
                              llm_api_base=args.llm_api_base,
                              llm_timeout_s=args.llm_timeout, llm_total_s=args.llm_total)
    bar = ProgressLine(f"tune {recipe.model.name}", args.budget, label="counting the candidates",
                       poll=lambda: ctx.spent).__enter__()  # projections spent of the budget, on stderr
    try:
        result = tune(ctx, strategy, baseline=recipe.execution, options=options,
                      regret=not args.no_regret and (candidates or 0) <= ENUMERABLE_MAX, candidates=candidates,
                      band=oracle.band, on_phase=lambda phase: _phase(bar, phase, min(ctx.spent, args.budget)),
                      max_changes=args.max_changes, changes=_key_changes(recipe, space))
        if chosen:
            result = dataclasses.replace(result, notes=(chosen, *result.notes))
    finally:
        bar.close()
        if ctx.log is not None:
            ctx.log.close()
    launch = recipe.execution.launch
    environment = {"CUDA_DEVICE_MAX_CONNECTIONS": launch.cuda_device_max_connections,
                   "source": launch.connections_source, "framework": launch.framework,
                   "fsdp_sets_8": launch.framework == "primus" and launch.env_patches}
    print(format_tune(result, top=args.top, gpu=recipe.system.gpu))
    print(f"memory margin: {args.margin:.0%} of each GPU's HBM kept free"
          + (" (the default: context, NCCL buffers, workspaces and fragmentation are already in each peak; the "
             "margin is for what the model cannot see; --margin changes it)" if args.margin == DEFAULT_MARGIN else ""))
    print(f"launch environment checked: CUDA_DEVICE_MAX_CONNECTIONS={launch.cuda_device_max_connections} "
          f"({launch.connections_source}" + ("; Primus sets 8 for FSDP runs)" if environment["fsdp_sets_8"] else ")")
          + "; export another value before tuning to check against it")
    from primus_ext.results.tune import tune_document

    document = tune_document(result, recipe=recipe, margin=args.margin, launch_environment=environment)
    print(session.target_line(recipe))
    line = session.calibration_line(recipe)
    if line:
        print(line)
        document["notes"] = [*document.get("notes", []), line]
    nothing = RecipeError(problems=[_nothing_runs(_counted(ctx, result, options), space, recipe, args)]) if (
        result.best_execution is None) else None
    return _Searched(document=document, recipe=recipe, best_execution=result.best_execution, nothing_runs=nothing,
                     ranked=result.ranked, to_execution=space.to_execution)


def _key_changes(recipe: Recipe, space: Space) -> Any:
    """A trial's count of recipe keys ``--apply`` would change (``recipe.rewrite.execution_changes``)."""
    from primus_ext.errors import RecipeError
    from primus_ext.recipe.rewrite import execution_changes

    def count(trial: Any) -> int:
        try:
            return len(execution_changes(recipe, space.to_execution(trial.config)))
        except RecipeError:  # a configuration the recipe's launcher cannot run: no count is small enough
            return 1 << 30
    return count


def _phase(bar: Any, phase: str, spent: int) -> None:
    """The progress line enters a phase of ``tune``: the estimate is the search's only (the budget's projections)."""
    bar.eta = phase.startswith("searching")
    bar.update(spent, label=phase)


def _counted(ctx: Any, result: Any, options: Any) -> SearchStats:
    """The counts of why nothing runs: the search's own, else the exhaustive reference's (the regret run), else an
    exhaustive pass made for them (a sampling search that found nothing has counted no rule): a refusal always says
    which rule excluded how many candidates."""
    stats = ctx.stats
    if stats.illegal + stats.pruned_illegal + stats.rejected_by_prefilter + stats.pruned_by_prefilter:
        return stats
    if result.exhaustive_stats is not None:
        return result.exhaustive_stats
    from primus_ext.tune.agent import SearchContext
    from primus_ext.tune.strategies import get_strategy

    reference = SearchContext(space=ctx.space, oracle=ctx.oracle, prefilter=ctx.prefilter, budget=ctx.budget,
                              detail=False)
    get_strategy("exhaustive")(reference, options)
    return reference.stats


def _nothing_runs(stats: SearchStats, space: Space, recipe: Recipe, args: argparse.Namespace) -> Problem:
    """Why the search found nothing to project: the counts of illegal and over-memory candidates, and what to do."""
    from primus_ext.errors import Problem

    illegal = stats.illegal + stats.pruned_illegal
    memory = stats.rejected_by_prefilter + stats.pruned_by_prefilter
    system = recipe.system
    pins = f"; pinned: {', '.join(args.pin)}" if args.pin else ""
    where = f"{system.num_nodes} x {system.gpu.gpus_per_node} {system.gpu.name}"
    rules = sorted(stats.excluded.items(), key=lambda kv: -kv[1])
    why = "; ".join(f"{n} by {rule}" for rule, n in rules[:6]) + ("; ..." if len(rules) > 6 else "")
    counted = (f": {illegal} illegal" + (f" (first rule failed: {why})" if why else "")
               + f", {memory} over the memory limit (margin {args.margin:.0%})"
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
    from primus_ext.files import input_problem, note_input, output_problem
    from primus_ext.results import check_json_out

    check_json_out(args.json)
    if args.verify_top is not None:
        _check_verify(args)
    elif args.verify_run or args.verify_dir or args.verify_nproc:
        from primus_ext.errors import Problem

        raise RecipeError(problems=[Problem(path="--verify-top", value=None,
                                            message="--verify-run / --verify-dir / --verify-nproc need --verify-top K",
                                            fix="e.g. --verify-top 3 (or --resume-verify to re-rank a folder)")])
    problems = []
    outputs = (("--out", args.out), ("--apply", args.recipe if args.apply else None),
               ("--json", args.json), ("--log", args.log))
    problems += [p for flag, value in outputs if value and (p := output_problem(
        value, flag, replace_read_only=args.force and flag in ("--out", "--apply"))) is not None]
    note_input(args.recipe)  # --apply rewrites it on purpose (with a backup); no other output may
    problems += [p for flag, value in outputs if value and flag != "--apply" and (p := input_problem(value, flag))]
    if args.out and not problems:  # an existing --out is read for the diff: it must be text
        from pathlib import Path

        from primus_ext.recipe.rewrite import read_text

        try:
            if Path(args.out).is_file():
                read_text(Path(args.out), note=False)  # an output, read for the diff: not an input
        except RecipeError as err:
            problems += err.problems
    if problems:
        raise RecipeError(problems=problems)


def _check_out_folder(args: argparse.Namespace, recipe: Recipe) -> None:
    """``--out`` in another folder than the recipe's: a copy of the recipe there must read the same presets and
    resolve to the same model and execution (relative presets resolve from the file's folder, and outside a Primus
    checkout from primus-ext's bundled ones), else exit 2 before the search rather than after it (``_write`` checks
    the tuned copy the same way)."""
    from pathlib import Path

    from primus_ext.errors import Problem, RecipeError
    from primus_ext.files import private_file
    from primus_ext.recipe import load_recipe

    source, target = Path(os.path.realpath(args.recipe)), Path(os.path.realpath(args.out))
    if source.parent == target.parent:
        return
    try:
        with private_file(target, source.read_bytes()) as probe:  # a fresh name claimed with O_EXCL
            there = load_recipe(probe, cluster=args.cluster, nodes=args.nodes, config_roots=args.config_root,
                                validate=False)
        differs = [what for what, same in (
            ("the presets read", there.preset_files[:-1] == recipe.preset_files[:-1]),
            ("the model", there.model == recipe.model), ("the execution", there.execution == recipe.execution))
            if not same]
        why = f"a copy there resolves {', '.join(differs)} differently" if differs else ""
    except RecipeError as err:
        why = "a copy there does not load: " + "; ".join(f"{p.path}: {p.message}" for p in err.problems[:2])
    if why:
        raise RecipeError(problems=[Problem(
            path="--out", value=args.out,
            message=f"{why} (its relative presets resolve from {target.parent}, not from {source.parent}); "
                    "nothing was searched or written",
            fix="write the tuned copy in the recipe's folder (or elsewhere in its Primus checkout), or pass "
                "--config-root with the Primus checkout whose presets the recipe reads")])


def _write(args: argparse.Namespace, recipe: Recipe, tuned: ExecutionSpec) -> None:
    """Rewrite, then reload the written file to check it resolves to the tuned execution. A probe copy is written
    beside the target (relative ``extends`` and presets resolve from the target's folder, as they will for the
    real file) and removed again; ``args.written`` names the file written."""
    from pathlib import Path

    from primus_ext.errors import Problem, RecipeError
    from primus_ext.files import private_file, real_path
    from primus_ext.recipe import load_recipe
    from primus_ext.recipe.rewrite import apply_changes, execution_changes, read_text, rewrite

    changes = execution_changes(recipe, tuned)
    cluster = {"cluster": recipe.system.name, "nodes": recipe.system.num_nodes}
    target = args.recipe if args.apply else args.out
    preview = rewrite(args.recipe, changes, out=target, cluster=cluster, dry_run=True, module=recipe.module,
                      force=args.force)
    if preview.current:  # the configuration and the target comment (cluster, nodes) are already the tuned ones
        print(f"{target}: already the tuned configuration for {cluster['nodes']} x {recipe.system.gpu.gpus_per_node} "
              f"{cluster['cluster']}, nothing to write")
        return
    text, _ = apply_changes(read_text(Path(args.recipe)), changes, path=str(args.recipe), cluster=cluster,
                            module=recipe.module)
    try:  # beside where it is written, at a fresh name claimed with O_EXCL
        with private_file(real_path(target), text.encode("utf-8")) as probe:
            reloaded = load_recipe(probe, cluster=args.cluster, nodes=args.nodes, config_roots=args.config_root)
    except RecipeError as err:
        reloaded, failure = None, "; ".join(f"{p.path}: {p.message}" for p in err.problems[:3])
    if reloaded is None or reloaded.execution != tuned:
        moved = real_path(target).parent != real_path(args.recipe).parent
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


def _verify_folder(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from primus_ext.launcher.verify_top import default_folder

    return Path(args.verify_dir) if args.verify_dir else default_folder(args.recipe)


def _check_verify(args: argparse.Namespace) -> None:
    """Refuse bad --verify-* values and an unusable folder before the search."""
    from primus_ext.errors import Problem, RecipeError
    from primus_ext.launcher.verify_top import check_folder

    bad = [Problem(path=flag, value=value, message=message, fix=fix) for flag, value, wrong, message, fix in (
        ("--verify-top", args.verify_top, args.verify_top < 1, "must be at least 1", "e.g. --verify-top 3"),
        ("--verify-iters", args.verify_iters, args.verify_iters < MIN_VERIFY_ITERS,
         f"must be at least {MIN_VERIFY_ITERS}: the log reader drops the first two iterations as warm-up",
         f"e.g. --verify-iters {DEFAULT_VERIFY_ITERS}"),
        ("--verify-nproc", args.verify_nproc, args.verify_nproc is not None and args.verify_nproc < 1,
         "must be at least 1", "leave it out: each candidate's TP x PP x CP"),
        ("--verify-scale", args.verify_scale, not 0 < args.verify_scale <= 1, "must be in (0, 1]",
         "e.g. --verify-scale 0.0625 on CPU")) if wrong]
    if bad:
        raise RecipeError(problems=bad)
    check_folder(_verify_folder(args), force=args.force)


def _verify_top(args: argparse.Namespace, searched: _Searched) -> dict[str, Any]:
    """Write the K best as short-run variants; with ``--verify-run local`` run them here; re-rank what has logs.
    Returns the tune document's ``verify_top`` field."""
    from primus_ext.launcher.verify_top import format_verify_top, pick_candidates, rerank, write_variants

    folder = _verify_folder(args)
    candidates = pick_candidates(searched.ranked, searched.to_execution, args.verify_top)
    manifest, variants = write_variants(searched.recipe, candidates, folder, iters=args.verify_iters,
                                        cluster=args.cluster, nodes=args.nodes, config_roots=args.config_root,
                                        tune_document=searched.document)
    print(f"wrote {len(candidates)} short-run variants ({args.verify_iters} iterations), manifest.json and launch.sh "
          f"to {folder}" + ("" if len(candidates) == args.verify_top else
                            f" (only {len(candidates)} legal configurations were projected)"))
    if args.verify_run != "local":
        result = rerank(folder)
        print(format_verify_top(result))
        print(f"run them: {folder / 'launch.sh'} primus|megatron; then re-rank: primus-ext tune {args.recipe} "
              f"--verify-dir {folder} --resume-verify")
        return result.to_dict()
    import torch

    from primus_ext.launcher.verify_top.local import run_local

    device = "cuda" if torch.cuda.is_available() else "cpu"
    run_local(folder, manifest, variants, iters=args.verify_iters, scale=args.verify_scale, nproc=args.verify_nproc,
              device=device, store=args.store, say=lambda text: print(text, file=sys.stderr))
    result = rerank(folder)
    print(format_verify_top(result))
    return result.to_dict()


def _resume_verify(args: argparse.Namespace) -> int:
    """``--resume-verify``: re-rank the folder's logs; ``--json`` writes the search's tune document from the manifest
    with this ``verify_top``."""
    from primus_ext.launcher.verify_top import format_verify_top, rerank
    from primus_ext.launcher.verify_top.variants import read_manifest
    from primus_ext.results import check_json_out, emit_json, tables_to_stderr

    check_json_out(args.json)
    folder = _verify_folder(args)
    with tables_to_stderr(args.json):
        result = rerank(folder)
        print(format_verify_top(result))
    if args.json:
        emit_json({**read_manifest(folder)["tune"], "verify_top": result.to_dict()}, args.json)
    return 0
