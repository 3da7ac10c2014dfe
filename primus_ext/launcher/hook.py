"""``--projection-only`` for upstream launchers: Megatron-LM's ``pretrain_gpt.py`` and Primus's ``train``.

Megatron-LM (``pretrain_gpt.py``; ``patches/megatron-lm-pretrain_gpt.*.patch``)::

    from primus_ext.launcher.hook import megatron_gate
    pretrain(..., extra_args_provider=megatron_gate(add_modelopt_args if has_nvidia_modelopt else None), ...)
    args = parse_and_validate_args(extra_args_provider=megatron_gate(...), ...)   # core_v0.18 .. main

``extra_args_provider(inner=None)`` returns the function Megatron calls with its argparse parser: it
chains ``inner`` (a launcher's own provider), adds the ``--projection-*`` arguments and wraps the
parser's ``parse_known_args`` (``parse_args`` goes through it). A run with ``--projection-only``
projects the parsed configuration (``short_circuit``), prints the report, writes projection.json /
.html / _timeline.png, and exits: 0 when it fits, 2 when the configuration is illegal (with every
reason), 3 when it is projected to run out of memory, 4 when it is over the capacity by no more than the memory
model's error (it may or may not fit: not for an unattended launch; ``--projection-strict``: a peak inside the
memory margin exits 4 too; ``model.memory.gate``). Without the flag nothing changes.

``megatron_gate(inner)`` is that provider, plus: when ``--projection-only`` is on the command line it
parses right away with Megatron's own ``megatron.training.arguments.parse_args`` - at the call site,
before ``pretrain`` asserts CUDA (core_v0.13 .. v0.17 check ``torch.cuda.is_available()`` before they
parse) and before ``torch.distributed`` is initialised - so a projection also runs on a login node
without GPUs.

Primus (``primus-cli train pretrain --config EXP.yaml --projection-only``; ``primus_gate`` and
``patches/primus-train-projection-only.patch``)::

    from primus_ext.launcher.hook import project_experiment
    sys.exit(project_experiment(args.config, overrides_from_argv(overrides), cluster=..., nodes=...))

Under torchrun every rank parses the arguments: only global rank 0 prints, measures and writes; the
others compute the same exit code from the analytic / stored costs and exit quietly.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from primus_ext.argtypes import nonnegative_float
from primus_ext.errors import PrimusExtError, RecipeError
from primus_ext.launcher.projection_only import experiment_dir, projection_only
from primus_ext.recipe.target import CLUSTER_ENV
from primus_ext.session import CostChoice, Session, cost_choice

PER_LAYER_LISTS = ("cp_comm_type",)
"""Megatron-LM arguments with ``nargs='+'``: one value for every layer, or one value per layer."""

ArgsProvider = Callable[[argparse.ArgumentParser], argparse.ArgumentParser]

STRICT_HELP = ("with --projection-only: a peak inside the 5%% memory margin exits 4 too, as one over the capacity "
               "within the memory model's error (for a scheduler that launches unattended)")


def add_projection_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``--projection-*`` arguments (names cannot clash with Megatron-LM's or Primus's)."""
    group = parser.add_argument_group("primus-ext projection")
    group.add_argument("--projection-only", action="store_true",
                       help="project step time and memory of this configuration, write the reports, exit "
                            "(0 fits, 2 illegal, 3 out of memory, 4 over capacity within the memory model's "
                            "error) without training")
    group.add_argument("--projection-strict", action="store_true", help=STRICT_HELP)
    group.add_argument("--projection-cluster", default=None,
                       help=f"hardware profile of the run (default ${CLUSTER_ENV}, else this machine's GPUs; "
                            "nothing naming it exits 2)")
    group.add_argument("--projection-nodes", type=int, default=None,
                       help="nodes of the run (default: $WORLD_SIZE / GPUs per node, else $NNODES, else 1)")
    group.add_argument("--projection-out", default=None,
                       help="folder for projection.json/.html (default: --save, else ./output/projection)")
    group.add_argument("--projection-costs", choices=["analytic", "store", "measured"], default="store",
                       help="layer costs: roofline, timing store (+roofline), or measure what is missing")
    group.add_argument("--projection-store", default=None, help="timing store file (SQLite)")
    group.add_argument("--projection-scale", type=nonnegative_float, default=1.0,
                       help="measure at this scale (< 1 on CPU) with --projection-costs measured")
    return parser


def extra_args_provider(inner: ArgsProvider | None = None, *, stream: TextIO | None = None,
                        exit_fn: Callable[[int], Any] = sys.exit) -> ArgsProvider:
    """The function to pass as Megatron's ``pretrain(..., extra_args_provider=...)``."""

    def provider(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        if inner is not None:
            parser = inner(parser)
        add_projection_args(parser)
        original = parser.parse_known_args

        def parse_known_args(args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None):
            parsed, rest = original(args, namespace)
            if getattr(parsed, "projection_only", False):
                exit_fn(short_circuit(parsed, stream=stream))
            return parsed, rest

        parser.parse_known_args = parse_known_args  # type: ignore[method-assign]
        return parser

    return provider


PROJECTION_FLAG = "--projection-only"


def megatron_gate(inner: ArgsProvider | None = None, *, argv: Sequence[str] | None = None,
                  parse_args: Callable[[ArgsProvider], Any] | None = None, stream: TextIO | None = None,
                  exit_fn: Callable[[int], Any] = sys.exit) -> ArgsProvider:
    """What the patched ``pretrain_gpt.py`` passes as ``extra_args_provider`` (any Megatron-LM version).

    Returns ``extra_args_provider(inner)``. When ``argv`` (default ``sys.argv[1:]``) holds
    ``--projection-only``, first parses with ``parse_args`` (default: Megatron's
    ``megatron.training.arguments.parse_args``, called with the provider), whose wrapped
    ``parse_known_args`` projects and exits; without Megatron importable it leaves that to Megatron's
    own parse inside ``pretrain`` / ``parse_and_validate_args``."""
    provider = extra_args_provider(inner, stream=stream, exit_fn=exit_fn)
    if PROJECTION_FLAG not in (sys.argv[1:] if argv is None else argv):
        return provider
    if parse_args is None:
        try:
            from megatron.training.arguments import parse_args as megatron_parse_args
        except ImportError:
            return provider
        parse_args = megatron_parse_args
    parse_args(provider)  # exits through the wrapped parse_known_args
    return provider


def _global_rank(env: Mapping[str, str]) -> int:
    """torchrun's ``$RANK`` (else Slurm's ``$SLURM_PROCID``); 0 when neither is a number."""
    text = (env.get("RANK") or env.get("SLURM_PROCID") or "0").strip()
    return int(text) if text.isdigit() else 0


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    """``$name`` as a positive integer, ``None`` when unset or empty; raises ``RecipeError`` otherwise."""
    from primus_ext.errors import Problem, RecipeError

    text = env.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise RecipeError(problems=[Problem(path=f"${name}", value=text, message="expected a non-negative integer",
                                            fix=f"unset {name} or set it to a number")], source="environment")
    return int(text)


@dataclass(frozen=True, kw_only=True)
class ArgsRecipe:
    """A recipe built from an already-parsed Megatron namespace (what ``projection_only`` reads)."""

    model: Any
    execution: Any
    system: Any
    source: str = "megatron arguments"
    warnings: tuple[str, ...] = field(default_factory=tuple)
    target: Any = None
    """``recipe.target.Target``: the profile and where it was stated."""


def recipe_from_megatron_args(args: argparse.Namespace, *, env: Mapping[str, str] | None = None) -> ArgsRecipe:
    """Specs of a parsed Megatron namespace on the ``--projection-cluster``; raises ``RecipeError``."""
    from primus_ext.hardware import load_gpu, load_system
    from primus_ext.recipe import check
    from primus_ext.recipe.resolve import resolve_all
    from primus_ext.recipe.target import resolve_target

    env = os.environ if env is None else env
    found: list[Any] = []
    target = resolve_target(None, cluster=args.projection_cluster, block={}, env=env, problems=found)
    if target is None:
        raise _launcher_flags(RecipeError(problems=found, source="megatron arguments", what="invalid"))
    if target.source == "--cluster":
        target = replace(target, source="--projection-cluster")
    cluster = target.cluster
    nodes = args.projection_nodes
    if nodes is None:
        world = _env_int(env, "WORLD_SIZE")
        nodes = max(1, math.ceil(world / load_gpu(cluster).gpus_per_node)) if world else _env_int(env, "NNODES") or 1
    system = load_system(cluster, nodes)
    mapping = megatron_mapping(args)
    name = Path(str(mapping.get("load") or mapping.get("save") or "megatron")).name
    model, execution, problems, warnings = resolve_all(mapping, system, name=name)
    if not problems:  # legality only makes sense on well-formed specs
        problems = check(model, execution, system)
    if problems:
        raise RecipeError(problems=list(problems), source="megatron arguments", what="invalid")
    return ArgsRecipe(model=model, execution=execution, system=system, warnings=tuple(warnings), target=target)


def megatron_mapping(args: argparse.Namespace) -> dict[str, Any]:
    """The Megatron arguments of a parsed namespace as the recipe resolver reads them.

    Drops the ``--projection-*`` options; an argument Megatron takes per layer (``PER_LAYER_LISTS``)
    whose list holds one distinct value becomes that value (Megatron's default ``cp_comm_type`` is
    ``['p2p']``); a list of different values is left for the resolver to report."""
    mapping = {k: v for k, v in vars(args).items() if not k.startswith("projection_")}
    for key in PER_LAYER_LISTS:
        value = mapping.get(key)
        if isinstance(value, list | tuple) and value and len(set(value)) == 1:
            mapping[key] = value[0]
    return mapping


def short_circuit(args: argparse.Namespace, *, stream: TextIO | None = None,
                  env: Mapping[str, str] | None = None) -> int:
    """Project the parsed configuration, report, and return the exit code (0 / 2 / 3 / 4)."""
    env = os.environ if env is None else env
    out = stream or sys.stdout
    rank0 = _global_rank(env) == 0
    try:
        recipe = recipe_from_megatron_args(args, env=env)
    except PrimusExtError as err:
        if rank0:
            print(f"error: {err}", file=out)
        return err.exit_code
    choice = gate_choice(args)
    if not rank0 and choice.mode == "measured":  # rank 0 measures; the others read what it stored
        choice = replace(choice, mode="store")
    folder = Path(args.projection_out or getattr(args, "save", None) or "output/projection")
    return _report(recipe, Session(choice, env=env), folder if rank0 else None, out, quiet=not rank0,
                   strict=args.projection_strict)


def gate_choice(args: argparse.Namespace) -> CostChoice:
    """The launcher's ``--projection-costs`` / ``--projection-store`` / ``--projection-scale`` as the session's cost
    choice (``session.cost_choice``: the rule every command's flags go through)."""
    return cost_choice(compute=args.projection_costs, store=args.projection_store, scale=args.projection_scale)


def _report(recipe: Any, session: Session, folder: Path | None, out: TextIO, *, quiet: bool,
            overrides: Sequence[str] = (), strict: bool = False) -> int:
    from primus_ext.report.projection_table import format_projection

    try:
        outcome = projection_only(recipe, out_dir=folder, session=session, overrides=overrides, strict=strict)
    except PrimusExtError as err:
        if not quiet:
            print(f"error: {err}", file=out)
        return err.exit_code
    if not quiet:
        print(format_projection(outcome.projection), file=out)
        target = getattr(recipe, "target", None)
        if target is not None:
            line = target.describe(outcome.projection.system, getattr(recipe, "nodes_source", None))
            print(line.replace("--cluster to", "--projection-cluster to"),
                  file=out)
        for warning in getattr(recipe, "warnings", ()):
            print(f"warning: {warning}", file=out)
        for reason in outcome.reasons:
            print(f"out of memory: {reason}", file=out)
        if outcome.note:  # exit 4 (or the margin's warning), with the figures
            print(outcome.note, file=out)
        for kind, path in outcome.files.items():
            print(f"wrote {kind}: {path}", file=out)
    return outcome.exit_code


def overrides_from_argv(argv: Sequence[str]) -> list[str]:
    """Primus's command-line overrides (``--key value``, ``--key=value``, bare ``--flag``) as ``key=value``."""
    out: list[str] = []
    items = list(argv)
    i = 0
    while i < len(items):
        item = items[i]
        if not item.startswith("--"):
            i += 1
            continue
        key = item[2:]
        if "=" in key:
            out.append(key)
        elif i + 1 < len(items) and not items[i + 1].startswith("--"):
            out.append(f"{key}={items[i + 1]}")
            i += 1
        else:
            out.append(f"{key}=true")
        i += 1
    return out


def project_experiment(config: str | Path, overrides: Sequence[str] = (), *, cluster: str | None = None,
                       nodes: int | None = None, costs: CostChoice | None = None,
                       config_roots: Sequence[str | Path] = (), out_dir: str | Path | None = None,
                       module: str | None = None, strict: bool = False,
                       stream: TextIO | None = None, env: Mapping[str, str] | None = None) -> int:
    """Primus's side: project an experiment YAML (+ ``key=value`` overrides); returns 0 / 2 / 3 / 4 (``strict``:
    a peak inside the memory margin returns 4 too; ``model.memory.gate``).

    ``cluster`` / ``nodes`` default to the recipe's ``# primus-ext:`` comment (or block), then to
    ``$PRIMUS_EXT_CLUSTER`` / ``$NNODES``, then to the loader's defaults. ``config_roots``: extra
    folders for ``model:`` / ``config:`` presets (e.g. the Primus checkout that runs the gate). The
    reports go to ``out_dir``, default the experiment's directory (``experiment_dir``). ``costs``: the session's
    cost choice (``gate_choice`` of the launcher's flags; default: the store, calibrated)."""
    env = os.environ if env is None else env
    out = stream or sys.stdout
    rank0 = _global_rank(env) == 0
    session = Session(costs or CostChoice(), env=env)
    try:  # the target and the node count: the loader's one rule (recipe.target), from env
        recipe = session.load(config, overrides, cluster=cluster, nodes=nodes, config_roots=config_roots,
                              module=module)
    except RecipeError as err:
        if rank0:
            print(f"error: {_launcher_flags(err)}", file=out)
        return err.exit_code
    except PrimusExtError as err:
        if rank0:
            print(f"error: {err}", file=out)
        return err.exit_code
    if recipe.target is not None and recipe.target.source == "--cluster":
        recipe = replace(recipe, target=replace(recipe.target, source="--projection-cluster"))
    folder = (Path(out_dir) if out_dir is not None else experiment_dir(config, env=env)) if rank0 else None
    return _report(recipe, session, folder, out, quiet=not rank0, overrides=overrides, strict=strict)


def _launcher_flags(err: RecipeError) -> RecipeError:
    """``err`` with the command line's ``--cluster`` / ``--nodes`` named as the launcher's ``--projection-*``."""
    def named(text: str) -> str:
        return text.replace("--cluster", "--projection-cluster").replace("--nodes", "--projection-nodes")

    return RecipeError(problems=[replace(p, path=named(p.path), message=named(p.message),
                                         fix=named(p.fix) if p.fix else p.fix) for p in err.problems],
                       source=err.source)
