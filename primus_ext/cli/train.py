"""``primus-ext train``: the training command, with a projection gate, pre-launch tuning and short runs.

    primus-ext train --config recipes/llama3.1_8B-pretrain.yaml --projection-only             # project, exit
    primus-ext train --config RECIPE tensor_model_parallel_size=2 --projection-only --scale 0.0625  # measured
    primus-ext train --config RECIPE --auto-tune --out tuned.yaml --projection-only         # tune, project
    primus-ext train --config RECIPE --auto-tune --apply                                      # tune, launch
    primus-ext train --config RECIPE                            # launch via Primus / Megatron-LM if found
    primus-ext train --config RECIPE --train-iters 6 --scale 0.03 --nproc 2 --verify   # built-in short run

Same experiment YAML and ``key=value`` overrides as Primus's ``train pretrain``.

``--projection-only`` measures what the timing store lacks (with ``--scale`` on CPU; on a GPU at full
size), projects, prints the report and writes projection.json / .html / _timeline.png into the
experiment's directory (``{workspace}/{work_group}/{user_name}/{exp_name}``; ``--workspace`` overrides
it, ``--html`` the page's path). Exit codes (``model.memory.gate``, as ``project``'s): 0 projected to fit (inside
the 5 % memory margin: a warning), 2 illegal configuration (every reason printed), 3 projected out of memory, 4
over the capacity by at most the memory model's error (it may or may not fit: not for an unattended launch);
``--strict``: inside the margin exits 4 too. Without ``--scale`` on CPU it uses stored full-size costs
where present and the analytic roofline elsewhere (``--analytic``: roofline only).

Launching: ``--launcher auto`` delegates to Primus (``primus-cli``) or Megatron-LM (``pretrain_gpt.py``)
when found and says which; ``--train-iters N`` (or ``--launcher builtin``) runs the built-in megatron-core
trainer on ``--nproc`` local ranks with the model shrunk by ``--scale``; ``--verify`` also projects that
same run and writes measured vs projected (verify.json and the HTML report).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from primus_ext.argtypes import MAX_BUDGET, MAX_ITERS, MAX_NODE_FLAG, MAX_RANKS, int_in
from primus_ext.cli._args import nonnegative_float


def register(subparsers: argparse._SubParsersAction) -> None:
    from primus_ext.cli.project import EXITS, STRICT_HELP

    p = subparsers.add_parser("train", help="train a recipe (or --projection-only: project it and exit 0/2/3/4)",
                              epilog=f"with --projection-only, {EXITS}")
    p.add_argument("--config", required=True, metavar="RECIPE", help="experiment YAML (Primus) or flat Megatron YAML")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="Megatron argument overrides")
    p.add_argument("--cluster", help="hardware profile of the run; default from the recipe")
    p.add_argument("--nodes", type=int_in(1, MAX_NODE_FLAG), help="node count of the run; default from the recipe")
    p.add_argument("--config-root", action="append", default=[], metavar="DIR", help="preset folder (repeatable)")
    p.add_argument("--projection-only", action="store_true", help="project, write the reports, exit 0/2/3/4")
    p.add_argument("--strict", action="store_true", help=f"with --projection-only: {STRICT_HELP}")
    costs = p.add_mutually_exclusive_group()
    costs.add_argument("--analytic", action="store_true", help="analytic roofline costs only")
    costs.add_argument("--scale", type=nonnegative_float,
                       help="measure missing layers at this scale (e.g. 0.0625 on CPU); "
                       "with --train-iters: shrink the trained model by it")
    p.add_argument("--store", metavar="FILE", help="timing store (SQLite; default $PRIMUS_EXT_CACHE/timings.sqlite)")
    p.add_argument("--uncalibrated", action="store_true",
                   help="with --projection-only: ignore calibration records from real runs (primus-ext calibrate)")
    p.add_argument("--device", choices=["cpu", "cuda"], help="device to measure / train on (default: cuda if present)")
    p.add_argument("--workspace", metavar="DIR", help="folder for the reports (default: the experiment's directory)")
    p.add_argument("--html", metavar="FILE", help="path of the HTML report (default: <workspace>/projection.html)")
    tune = p.add_argument_group("pre-launch tuning")
    tune.add_argument("--auto-tune", action="store_true", help="run the tuner first and use its best configuration")
    where = tune.add_mutually_exclusive_group()
    where.add_argument("--apply", action="store_true", help="rewrite the recipe in place (backup .bak)")
    where.add_argument("--out", metavar="FILE", help="write the tuned copy here (default <recipe>.tuned.yaml)")
    tune.add_argument("--strategy", choices=("auto", "exhaustive", "tpe", "llm"), default="auto")
    tune.add_argument("--budget", type=int_in(1, MAX_BUDGET), default=100, help="projections the tuner may spend")
    run = p.add_argument_group("launching")
    run.add_argument("--launcher", choices=("auto", "primus", "megatron", "builtin"), default="auto")
    run.add_argument("--nproc", type=int_in(1, MAX_RANKS), help="local ranks (default: GPUs present, else 2)")
    run.add_argument("--train-iters", type=int_in(1, MAX_ITERS),
                     help="short run of N iterations with the built-in trainer")
    run.add_argument("--verify", action="store_true", help="project the short run too; write measured vs projected")
    p.set_defaults(func=run_command)


def _auto_tune(args: argparse.Namespace) -> tuple[int, str]:
    """Run ``primus-ext tune`` in-process; returns (exit code, recipe path to use afterwards)."""
    from primus_ext.cli import tune as tune_cli

    target = args.config if args.apply else (args.out or str(Path(args.config).with_suffix("")) + ".tuned.yaml")
    parser = argparse.ArgumentParser(prog="primus-ext")
    tune_cli.register(parser.add_subparsers())
    argv = ["tune", args.config, "--strategy", args.strategy, "--budget", str(args.budget)]
    argv += ["--apply"] if args.apply else ["--out", target]
    for flag, value in (("--cluster", args.cluster), ("--nodes", args.nodes), ("--store", args.store)):
        if value is not None:
            argv += [flag, str(value)]
    argv += ["--analytic"] if args.analytic else []
    argv += ["--uncalibrated"] if args.uncalibrated else []
    argv += [x for root in args.config_root for x in ("--config-root", root)]
    namespace = parser.parse_args(argv)
    code = tune_cli.run(namespace)
    # only a file this run wrote is the tuned recipe (a leftover from an earlier run is not)
    return code, target if getattr(namespace, "written", None) else args.config


GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")
"""Device files a GPU needs on Linux: the NVIDIA driver's control node, ROCm's amdkfd, WSL's GPU bridge. Without
any of them torch.cuda.is_available() is False, and importing torch to ask (seconds) is skipped."""


def _device(args: argparse.Namespace) -> str:
    if args.device:
        return args.device
    if sys.platform == "linux" and not any(os.path.exists(path) for path in GPU_DEVICE_FILES):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _workspace(args: argparse.Namespace, config: str) -> Path:
    from primus_ext.launcher.projection_only import experiment_dir

    return Path(args.workspace) if args.workspace else experiment_dir(config)


def _as_written(args: argparse.Namespace, config: str, session: Any) -> Any:
    """After auto-tune, the recipe it started from (shown beside the tuned one in the HTML report); else None."""
    if config == args.config:
        return None
    return session.load(args.config, args.overrides, cluster=args.cluster, nodes=args.nodes,
                        config_roots=args.config_root)


def _projection_only(args: argparse.Namespace, config: str) -> int:
    """``--projection-only``: one session from the cost flags (``--analytic``; ``--scale``, or a GPU here, measures what
    the store lacks: at full size on a GPU; else the store), the recipe loaded and projected by it."""
    from primus_ext.cli._progress import LayerProgress, PhaseLine
    from primus_ext.files import check_outputs
    from primus_ext.launcher.projection_only import REPORT_PHASES, projection_only
    from primus_ext.report.projection_table import format_projection
    from primus_ext.session import Session, cost_choice

    phases = PhaseLine("projection-only", ("checking for a GPU", *REPORT_PHASES))  # stderr: no silent seconds
    with phases:
        compute = "analytic" if args.analytic else "store"
        if not args.analytic:
            phases("checking for a GPU")
            if args.scale is not None or _device(args) == "cuda":  # on a GPU: measure what is missing at full size
                compute = "measured"
                phases.close()  # the layer measurement draws its own line
        session = Session(cost_choice(compute=compute, store=args.store, scale=args.scale or 1.0,
                                      measure_on=args.device, uncalibrated=args.uncalibrated))
        recipe = session.load(config, args.overrides, cluster=args.cluster, nodes=args.nodes,
                              config_roots=args.config_root)  # the target: primus_ext.session's one rule
        check_outputs(("--html", args.html))  # against the recipe's presets too, before measuring
        outcome = projection_only(recipe, out_dir=_workspace(args, config), session=session,
                                  overrides=args.overrides, html_path=Path(args.html) if args.html else None,
                                  progress=LayerProgress(), baseline=_as_written(args, config, session), phase=phases,
                                  strict=args.strict)
    print(format_projection(outcome.projection))
    if recipe.target is not None:
        print(recipe.target.describe(recipe.system, recipe.nodes_source))
    for line in outcome.measured:
        print(f"measured {line}", file=sys.stderr)
    for warning in recipe.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for reason in outcome.reasons:
        print(f"out of memory: {reason}", file=sys.stderr)
    if outcome.note:  # exit 4 (over capacity within the model's error; --strict: inside the margin), or a warning
        print(outcome.note, file=sys.stderr)
    for kind, path in outcome.files.items():
        print(f"wrote {kind}: {path}", file=sys.stderr)
    return outcome.exit_code


def _builtin(args: argparse.Namespace, recipe: Any, config: str) -> int:
    from primus_ext.cli._progress import LayerProgress, ProgressLine, clock
    from primus_ext.launcher.short_run import check_fits, local_target, verify_short_run
    from primus_ext.launcher.trainer import run_training

    device = _device(args)
    nproc = args.nproc or (_gpu_count() if device == "cuda" else 2)
    target = local_target(recipe, scale=args.scale or 1.0, nproc=nproc, device=device)
    for shrink in target.shrinks:
        print(shrink, file=sys.stderr)
    need = check_fits(target)  # refuses (exit 2) before minutes of measuring and training
    iters = args.train_iters or int(recipe.megatron_args.get("train_iters") or 10)
    where = "RAM" if device == "cpu" else "per GPU"
    print(f"built-in trainer: {target.model.name}, {nproc} x {device} ranks, {iters} iterations, "
          f"~{need / 1024**3:.1f} GiB {where} by the memory model", file=sys.stderr)
    training = ProgressLine("training", iters, label=f"starting {nproc} ranks")
    if not args.verify:
        with training:  # the Megatron-format lines wait until the progress line is closed
            result = run_training(target.model, target.execution, world_size=nproc, iters=iters, device=device,
                                  log=False, progress=lambda done, _n, step_s: training.update(
                                      done, label=f"iteration {done}", unit_s=step_s))
        _print_log(result)
        print(json.dumps(result.as_dict(), indent=2))
        return 0
    from primus_ext.files import write_output
    from primus_ext.launcher.projection_only import write_reports

    def projected(projection: Any, _fabric: str) -> None:
        print(f"projected {projection.step_time_s * 1e3:9.2f} ms/step for this run on this machine ({iters} "
              f"iterations: ~{clock(iters * projection.step_time_s)} after the ranks start)", file=sys.stderr)
        training.expected = projection.step_time_s
        training.__enter__()

    try:
        verify = verify_short_run(target, iters=iters, store=args.store, progress=LayerProgress(),
                                  on_projection=projected, notice=lambda text: print(text, file=sys.stderr),
                                  log=False, on_step=lambda done, _n, step_s: training.update(
                                      done, label=f"iteration {done}", unit_s=step_s))
    finally:
        training.close()
    _print_log(verify.training)
    doc = verify.as_dict()
    folder = _workspace(args, config)
    files = write_reports(verify.projection, folder, recipe=recipe, overrides=args.overrides,
                          html_path=Path(args.html) if args.html else None, verify=doc,
                          extra={"costs": "measured here (short-run verification)"})
    from primus_ext.results import dumps
    from primus_ext.results.projection import verify_document  # the result schema's "verify" document

    record = verify_document(doc, training=verify.training.as_dict(), recipe=recipe)
    write_output(folder / "verify.json", dumps(record) + "\n")
    print(f"measured  {doc['measured_step_s'] * 1e3:9.2f} ms/step (spread {doc['measured_spread']:.0%}, "
          f"{doc['measured_steps']} steps)\nprojected {doc['projected_step_s'] * 1e3:9.2f} ms/step  "
          f"error {doc['error_pct']:+.1f}%")
    print(f"collectives priced with: {doc['fabric']}", file=sys.stderr)
    if doc["measured_collective_s"] is None:
        print("communication: not timed (host clocks time gloo collectives; GPU runs only report the step)",
              file=sys.stderr)
    elif doc["projected_exposed_comm_s"] is not None:
        print(f"communication: measured {doc['measured_collective_s'] * 1e3:.2f} ms/step inside collectives "
              f"({doc['measured_skew_s'] * 1e3:.2f} waiting for a peer), projected exposed "
              f"{doc['projected_exposed_comm_s'] * 1e3:.2f} ms")
    print(f"wrote {folder / 'verify.json'}, {files['html']}", file=sys.stderr)
    return 0


def _print_log(result: Any) -> None:
    """The run's iteration lines in Megatron's format (``TrainResult.log_lines``) on stderr, after the progress
    line: ``2> train.log`` keeps them for ``primus-ext calibrate RECIPE train.log``."""
    sys.stderr.write("".join(f"{line}\n" for line in result.log_lines()))
    sys.stderr.flush()


def _gpu_count() -> int:
    import torch

    return max(1, torch.cuda.device_count())


def run_command(args: argparse.Namespace) -> int:
    import subprocess
    import warnings

    from primus_ext.launcher.trainer.plan import QUIET_WARNINGS

    for text in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=f".*{text}.*", category=UserWarning)
    from primus_ext.files import check_outputs
    from primus_ext.session import Session

    check_outputs(("--html", args.html), ("--out", getattr(args, "out", None)),  # before tuning or measuring
                  inputs=(args.config,))
    config = args.config
    if args.auto_tune:
        code, config = _auto_tune(args)
        if code:
            return code
        print(f"auto-tune: continuing with {config}", file=sys.stderr)
    if args.projection_only:
        return _projection_only(args, config)
    if args.strict:  # a gate's flag: a launch is not gated by it (said, not ignored)
        from primus_ext.errors import Problem, RecipeError

        raise RecipeError(problems=[Problem(path="--strict", value=True, message="--strict sets the exit code of "
                                            "the projection gate; without --projection-only nothing is gated",
                                            fix="add --projection-only (exit 4: do not launch), or drop --strict")])
    recipe = Session().load(config, args.overrides, cluster=args.cluster, nodes=args.nodes,
                            config_roots=args.config_root)  # the target: primus_ext.session's one rule
    check_outputs(("--html", args.html))  # against the recipe's presets too, before training
    if args.train_iters or args.verify or args.launcher == "builtin":
        return _builtin(args, recipe, config)
    from primus_ext.errors import Problem, RecipeError
    from primus_ext.launcher.delegate import find_launcher, launch_command

    found = find_launcher(args.launcher)
    if found is None:
        raise RecipeError(problems=[Problem(
            path="--launcher", value=args.launcher,
            message="neither Primus (primus-cli / the primus package) nor Megatron-LM (pretrain_gpt.py via "
                    "$MEGATRON_LM_PATH, PATH or megatron.training) was found",
            fix="install one of them, or run the built-in trainer: --train-iters N [--scale F --nproc 2]")])
    command = launch_command(found, recipe, args.overrides, nproc=args.nproc or _gpu_count(),
                             nnodes=recipe.system.num_nodes)
    from primus_ext.recipe.secrets import hide_text

    print(f"launching with {found.kind} ({found.how}):\n  {hide_text(command.shell(), recipe.hidden)}",
          file=sys.stderr)
    if command.dropped:
        from primus_ext.launcher.megatron_cli import dropped_lines

        print(f"not passed to Megatron-LM ({len(command.dropped)} keys without a flag its parser accepts):",
              file=sys.stderr)
        print("\n".join(f"  {hide_text(line, recipe.hidden)}" for line in dropped_lines(command.dropped)),
              file=sys.stderr)
    import os

    return subprocess.run(command.argv, env={**os.environ, **command.env}, check=False).returncode
