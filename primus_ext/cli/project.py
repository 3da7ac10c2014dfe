"""``primus-ext project``: project step time, tok/s/GPU, MFU and memory of a recipe on a cluster.

    primus-ext project recipes/llama3.1_8B-pretrain.yaml
    primus-ext project recipes/deepseek_v3-pretrain.yaml --cluster h100 --nodes 128 --analytic
    primus-ext project recipes/llama3.1_70B-pretrain.yaml tensor_model_parallel_size=8 --store timings.sqlite
    primus-ext project recipes/mixtral_8x7B-pretrain.yaml --json out.json      # tables, and the JSON to a file
    primus-ext project recipes/mixtral_8x7B-pretrain.yaml --json -             # to stdout, nothing else there
    primus-ext project recipes/qwen3_30B_A3B-pretrain.yaml --memory-only
    primus-ext project recipes/deepseek_v3-pretrain.yaml --cluster h800 --nodes 256 --schedule dualpipe ...
    primus-ext project recipes/llama3.1_8B-pretrain.yaml --cluster h100 --nodes 1,2,4,8 --tokens 1e12   # a sweep

Layer costs (``--compute``): ``store`` (default) reads the timing store (``--store FILE``, or the default
store when it exists); ``measured`` first measures what the store lacks on this device (reduced scale
on CPU, ``--scale``; only for a target of this machine's own device unless ``--accept-scaled``: a CPU-sized
entry then stands in for its full-size shape, labelled ``measured:cpu@scale=...``); ``analytic`` uses the
roofline only. Layer kinds the store lacks fall back to the roofline. The report says which source each
layer kind used. A calibration record of real runs (``primus-ext calibrate``) in the store corrects the figures
of its workload, and of nearby configurations of the same model with a wider band; the report says so
(``--uncalibrated``: ignore it). ``--memory-only`` prints the memory verdict of the same projection (the record's
memory factor applied). Exit codes as the launcher gate's (``model.memory.gate``; ``--memory-only`` too): 0 fits
(inside the 5 % memory margin: a warning), 2 invalid input, 3 out of memory, 4 over the capacity by at most the
memory model's error (it may or may not fit: not for an unattended launch); ``--strict``: inside the margin exits 4
too. The JSON follows the one result schema (``primus_ext.results``: kinds ``projection``
and ``memory``).

``--nodes 1,2,4,8`` (a comma list) is a scaling sweep (``primus_ext.sweep``): each node count projected as
``project --nodes N`` would, in one table of tok/s/GPU, step, MFU, peak memory and verdict, and the GPU-hours (and
wall hours) to train ``--tokens`` (default 1e9); ``--json``: a ``sweep`` document. A node count the configuration
does not split at gets its row with the reason. Its exit code (``SWEEP_EXITS``): 0 when any node count projects
(memory verdicts are in the table, not the code), 2 when none does.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from primus_ext.argtypes import node_counts, positive_float
from primus_ext.cli._args import add_calibration_arguments, add_cost_arguments, nonnegative_float, session_of
from primus_ext.model.memory.estimate import MEMORY_ERROR

if TYPE_CHECKING:
    import torch

    from primus_ext.model.memory import Memory
    from primus_ext.recipe import Recipe
    from primus_ext.session import Session


STRICT_HELP = ("a peak inside the 5%% memory margin exits 4 too, as one over the capacity within the memory model's "
               "error (for a scheduler that launches unattended: exit 0 then means projected to fit, margin free)")
SWEEP_EXITS = ("A sweep (--nodes 1,2,4,8) exits 0 when at least one node count projects (the others' rows say why "
               "not; memory verdicts are in the table, not the exit code) and 2 when none does.")
SWEEP_REFUSES = ("--memory-only", "--strict", "--timeline", "--trace", "--html")
"""Options of one projection that a sweep does not take (``--nodes 1,2,4,8`` with one of them: exit 2)."""
EXITS = ("exit codes: 0 fits (a peak inside the 5% memory margin: a warning); 2 illegal input; 3 out of memory; 4 over "
         f"the capacity by at most the memory model's error ({MEMORY_ERROR:.1%}, model.memory.MEMORY_ERROR): it may or "
         "may not fit, do not launch it unattended; with --strict, a peak inside the margin exits 4 too. "
         + SWEEP_EXITS)
"""The codes of ``model.memory.gate``, as ``--help`` shows them (argparse does not %-format an epilog)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("project", help="project step time, tok/s/GPU, MFU and memory of a recipe",
                                   epilog=EXITS)
    parser.add_argument("recipe", help="experiment YAML (Primus format) or flat Megatron-argument YAML")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="Megatron argument overrides")
    parser.add_argument("--cluster", help="hardware profile (e.g. h100, mi300x, gb200); default from the recipe")
    parser.add_argument("--nodes", type=node_counts,
                        help="node count; default from the recipe, else 1. A comma list (1,2,4,8) is a scaling sweep: "
                             "one table, a row per node count")
    parser.add_argument("--tokens", type=positive_float, metavar="N",
                        help="with a sweep: the training size the GPU-hours are for (default 1e9)")
    parser.add_argument("--schedule", metavar="NAME",
                        help="project this pipeline schedule instead of the one the recipe's keys select (e.g. "
                             "dualpipe, dualpipev: what-ifs no framework key runs); default: the recipe's "
                             "`# primus-ext: {schedule: ...}` comment, else its keys")
    parser.add_argument("--config-root", action="append", default=[], metavar="DIR",
                        help="folder searched for model/module presets (repeatable)")
    add_cost_arguments(parser, measured=True)
    parser.add_argument("--scale", type=nonnegative_float, default=None,
                        help="with --compute measured: measure at this reduced scale (default: 1 on GPU, "
                             "a CPU-sized scale on CPU)")
    add_calibration_arguments(parser)
    parser.add_argument("--memory-only", action="store_true", help="print the memory estimate only")
    parser.add_argument("--strict", action="store_true", help=STRICT_HELP)
    parser.add_argument("--timeline", action="store_true", help="include every pipeline op in the JSON")
    parser.add_argument("--trace", metavar="FILE",
                        help="write the simulated step as a Chrome trace (JSON; open in ui.perfetto.dev)")
    parser.add_argument("--html", metavar="FILE", help="write the report as one self-contained HTML page")
    parser.add_argument("--json", metavar="OUT",
                        help="also write the result as JSON to OUT ('-': stdout, the JSON only, instead of the tables)")
    parser.set_defaults(func=run)


def measure_first(args: argparse.Namespace, session: Session, recipe: Recipe) -> None:
    """``--compute measured``: measure what the store lacks on this device (``Session.measure``; only for a target of
    this device unless ``--accept-scaled``), which the session then reads."""
    from primus_ext.measure.shims import resolve_device

    _same_device_or_accepted(resolve_device(None), recipe, args.accept_scaled)

    def progress(done: int, total: int, _shape: Any) -> None:
        print(f"\rmeasuring missing layers [{done}/{total}]", end="" if done < total else "\n",
              file=sys.stderr, flush=True)

    for line in session.measure(recipe, progress=progress):
        print(f"  {line}", file=sys.stderr)


def _same_device_or_accepted(device: torch.device, recipe: Recipe, accept: bool) -> None:
    """Timings of this machine price only its own device: another target needs ``--accept-scaled`` (then said)."""
    from primus_ext.errors import Problem, RecipeError
    from primus_ext.measure.runner import device_name
    from primus_ext.measure.store import device_matches

    here, target = device_name(device), recipe.system.gpu.name
    if device_matches(here, target):
        return
    if not accept:
        raise RecipeError(problems=[Problem(
            path="--compute", value="measured",
            message=f"this machine measures on {here}, but the target is {recipe.system.num_nodes} x "
                    f"{recipe.system.gpu.gpus_per_node} {target}: its timings would price another device's kernels",
            fix=f"measure on a {target} (primus-ext bench there, then --store), use --compute analytic, or pass "
                "--accept-scaled to use this machine's timings anyway (labelled in the output)")])
    print(f"warning: layer costs measured on {here} price the {target} target (--accept-scaled); each layer's "
          "source in the output says so", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from primus_ext.files import check_outputs, stream_of
    from primus_ext.results import check_json_out, emit_json

    check_json_out(args.json)
    if isinstance(args.nodes, tuple) or args.tokens is not None:
        return run_sweep(args)
    check_outputs(("--json", args.json), ("--html", args.html), ("--trace", args.trace),  # before any work
                  inputs=(args.recipe,))
    session = session_of(args, calibrated=not args.uncalibrated, scale=args.scale)  # target, costs, calibration
    recipe = session.load(args.recipe, args.overrides, cluster=args.cluster, nodes=args.nodes,
                          config_roots=args.config_root, schedule=args.schedule)
    if session.choice.mode == "measured":
        measure_first(args, session, recipe)
    if args.memory_only:
        return _memory_only(args, session, recipe)
    from primus_ext.report.projection_table import format_projection
    from primus_ext.results.projection import projection_document

    projection = session.project(recipe)
    if args.trace:
        from primus_ext.report.trace import write_trace

        write_trace(projection, args.trace)
    if args.html:
        from primus_ext.report.html import write_html

        write_html(projection, args.html, recipe=recipe, overrides=args.overrides)
    if stream_of(args.json) != 1:  # the tables, unless stdout is the JSON's (--json FILE keeps them)
        from primus_ext.cli.recipe import presets_line

        print(format_projection(projection))
        print(presets_line(recipe))
        print(session.target_line(recipe))
    for warning in recipe.warnings:  # on stderr, with --json - too
        print(f"warning: {warning}", file=sys.stderr)
    emit_json(projection_document(projection, recipe=recipe, timeline=args.timeline), args.json)
    return _exit_code(projection.memory, strict=args.strict)


def _memory_only(args: argparse.Namespace, session: Session, recipe: Recipe) -> int:
    """``--memory-only``: the memory verdict of the session's projection (calibrated as ``project`` prints it)."""
    from primus_ext.files import stream_of
    from primus_ext.report.memory_table import format_memory_table
    from primus_ext.results import emit_json
    from primus_ext.results.projection import memory_document

    projection = session.project(recipe, band=False)
    memory = projection.memory
    if stream_of(args.json) != 1:  # the tables, unless stdout is the JSON's
        from primus_ext.cli.recipe import presets_line

        print(format_memory_table(memory))
        for note in projection.notes:  # which stored record changed the peak
            if note.startswith(("calibrated (", "cluster environment")):
                print(note)
        print(presets_line(recipe))
        print(session.target_line(recipe))
    for warning in recipe.warnings:  # on stderr, with --json - too
        print(f"warning: {warning}", file=sys.stderr)
    emit_json(memory_document(memory, recipe=recipe), args.json)
    return _exit_code(memory, strict=args.strict)


def _exit_code(memory: Memory | None, *, strict: bool) -> int:
    """The gate's codes (``model.memory.gate``, as every launcher gate): 0 fits (inside the margin: a warning), 4 over
    the capacity within the model's error (``--strict``: inside the margin too), 3 out of memory; the reason on
    stderr with the figures (the report above is complete)."""
    from primus_ext.model.memory import EXIT_OUT_OF_MEMORY, gate_exit, gate_note

    code = gate_exit(memory, strict=strict)
    note = gate_note(memory, strict=strict)
    if note:
        print(note, file=sys.stderr)
    if code == EXIT_OUT_OF_MEMORY:
        print(f"out of memory: projected peak {memory.peak_bytes / 2**30:.1f} GiB > "
              f"{memory.capacity_bytes / 2**30:.1f} GiB per GPU (exit {code}, as train --projection-only)",
              file=sys.stderr)
    return code


def run_sweep(args: argparse.Namespace) -> int:
    """``--nodes 1,2,4,8``: the sweep's table (and ``sweep`` document); exit 0 when any node count projects, 2 (every
    reason listed) when none does."""
    from primus_ext.errors import Problem, RecipeError
    from primus_ext.files import check_outputs, stream_of
    from primus_ext.results import emit_json
    from primus_ext.sweep import DEFAULT_TOKENS, sweep

    flags = {"--memory-only": args.memory_only, "--strict": args.strict, "--timeline": args.timeline,
             "--trace": args.trace, "--html": args.html}
    assert tuple(flags) == SWEEP_REFUSES
    given = [flag for flag, value in flags.items() if value]
    problems = [Problem(path=flag, value="given", message="a sweep (--nodes with a comma list) does not take it",
                        fix=f"project one node count with {flag} (--nodes N), or drop {flag}") for flag in given]
    if not isinstance(args.nodes, tuple):
        problems.append(Problem(path="--tokens", value=args.tokens, message="states the training size of a sweep",
                                fix="give --nodes a comma list (e.g. --nodes 1,2,4,8), or drop --tokens"))
    if problems:
        raise RecipeError(problems=problems)
    check_outputs(("--json", args.json), inputs=(args.recipe,))  # before any work
    session = session_of(args, calibrated=not args.uncalibrated, scale=args.scale)

    def before(recipe: Recipe) -> None:
        if session.choice.mode == "measured":
            measure_first(args, session, recipe)

    result = sweep(session, args.recipe, args.overrides, nodes=args.nodes, cluster=args.cluster,
                   config_roots=args.config_root, schedule=args.schedule,
                   tokens=DEFAULT_TOKENS if args.tokens is None else args.tokens, before=before)
    first = result.first
    if first is None:
        raise RecipeError(problems=[Problem(path="--nodes", value=r.nodes, message=r.reason or "not projected",
                                            fix="choose node counts the configuration splits at")
                                    for r in result.rows])
    if stream_of(args.json) != 1:  # the table, unless stdout is the JSON's
        from primus_ext.cli.recipe import presets_line
        from primus_ext.report.sweep_table import format_sweep

        print(format_sweep(result))
        print(presets_line(first.recipe))
    for warning in sorted({w for r in result.rows if r.recipe is not None for w in r.recipe.warnings}):
        print(f"warning: {warning}", file=sys.stderr)
    from primus_ext.results.sweep import sweep_document

    emit_json(sweep_document(result), args.json)
    return 0
