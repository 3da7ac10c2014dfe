"""``--projection-only`` for Primus's ``primus-cli train <suite>`` (``patches/primus-train-projection-only.patch``).

    primus-cli train pretrain --config EXP.yaml [--key value ...] --projection-only \\
        [--projection-cluster mi300x] [--projection-nodes 4] [--projection-costs analytic|store|measured]

The patched ``primus/cli/subcommands/train.py`` calls two functions::

    add_gate_args(suite_parsers)                     # register_subcommand: the options, on every suite
    raise SystemExit(run_gate(args, overrides))      # first thing in run(), when args.projection_only

``run_gate`` loads the same experiment YAML and command-line overrides (``--key value`` as Primus
passes them on) with primus-ext, projects, prints the report, writes projection.json / .html /
_timeline.png into the experiment directory (``workspace/work_group/user_name/exp_name``, or
``--projection-out``) and returns 0 (fits) / 2 (illegal, every reason printed) / 3 (projected out of
memory) / 4 (over the capacity within the memory model's error: it may or may not fit; ``--projection-strict``: a
peak inside the memory margin too; ``model.memory.gate``). It runs inside ``primus-cli``'s argument handling:
before Primus builds its runtime, imports a backend or initialises ``torch.distributed``.

Cluster and nodes: ``--projection-cluster`` / ``--projection-nodes``, else the recipe's ``# primus-ext:``
comment (or ``primus_ext:`` block), else ``$PRIMUS_EXT_CLUSTER`` / ``$NNODES``; the cluster then from the
experiment's ``configs/<GPU>/`` folder, else this machine's GPUs (``recipe.target``: nothing naming it exits 2). Presets
(``model: llama3.1_8B.yaml``) resolve in the Primus checkout that runs the command (and in
``--projection-config-root`` folders).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from primus_ext.argtypes import nonnegative_float
from primus_ext.launcher.hook import CLUSTER_ENV, STRICT_HELP, gate_choice, project_experiment
from primus_ext.launcher.projection_only import EXIT_ILLEGAL
from primus_ext.recipe.presets import is_primus_root

SUITE_MODULES: Mapping[str, str] = {"pretrain": "pre_trainer", "posttrain": "post_trainer"}
"""``train`` suite -> the experiment module Primus trains for it (``run_train_module(module_name=...)``)."""

def add_gate_args(suite_parsers: argparse._SubParsersAction) -> None:
    """Add the ``--projection-*`` options to every suite parser of ``primus-cli train`` (once each)."""
    seen: set[int] = set()
    for parser in suite_parsers.choices.values():
        if id(parser) in seen:  # an alias maps to the same parser
            continue
        seen.add(id(parser))
        add_suite_args(parser)


def add_suite_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of one suite parser (names cannot clash with Primus's or Megatron's)."""
    group = parser.add_argument_group("primus-ext projection")
    group.add_argument("--projection-only", action="store_true",
                       help="project step time and memory of this experiment with primus-ext, write the reports "
                            "into the experiment directory, exit 0 (fits) / 2 (illegal) / 3 (out of memory) / "
                            "4 (over capacity within the memory model's error) without training")
    group.add_argument("--projection-strict", action="store_true", help=STRICT_HELP)
    group.add_argument("--projection-cluster", default=None, metavar="PROFILE",
                       help="hardware profile of the run (default: the recipe's # primus-ext comment, then "
                            f"${CLUSTER_ENV}, its configs/<GPU>/ folder, this machine's GPUs)")
    group.add_argument("--projection-nodes", type=int, default=None, metavar="N",
                       help="nodes of the run (default: the recipe's primus_ext block, then $NNODES)")
    group.add_argument("--projection-costs", choices=["analytic", "store", "measured"], default="store",
                       help="layer costs: roofline, timing store (+roofline), or measure what is missing")
    group.add_argument("--projection-store", default=None, metavar="FILE", help="timing store file (SQLite)")
    group.add_argument("--projection-scale", type=nonnegative_float, default=1.0,
                       help="measure at this scale (< 1 on CPU) with --projection-costs measured")
    group.add_argument("--projection-out", default=None, metavar="DIR",
                       help="folder for projection.json/.html (default: the experiment directory)")
    group.add_argument("--projection-config-root", action="append", default=[], metavar="DIR",
                       help="extra folder with Primus presets (repeatable; the running checkout is searched first)")
    return parser


def primus_root() -> Path | None:
    """The checkout of the ``primus`` package in use, when it holds Primus's presets."""
    module = sys.modules.get("primus")
    where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", [])), None)
    if where is None:
        return None
    root = Path(where).resolve()
    root = root.parent.parent if root.name == "__init__.py" else root.parent
    return root if is_primus_root(root) else None


def run_gate(args: argparse.Namespace, overrides: Sequence[str] | None, *, stream: TextIO | None = None,
             env: Mapping[str, str] | None = None) -> int:
    """Project ``args.config`` with ``overrides`` (Primus's unknown arguments); returns 0 / 2 / 3 / 4."""
    from primus_ext.launcher.hook import overrides_from_argv

    out = stream or sys.stdout
    suite = getattr(args, "suite", None)
    if suite not in SUITE_MODULES:
        print(f"error: --projection-only supports the train suites {sorted(SUITE_MODULES)}, not {suite!r}",
              file=out)
        return EXIT_ILLEGAL
    root = primus_root()
    roots = [*([root] if root is not None else []), *args.projection_config_root]
    return project_experiment(args.config, overrides_from_argv(list(overrides or [])),
                              cluster=args.projection_cluster, nodes=args.projection_nodes, costs=gate_choice(args),
                              config_roots=roots, out_dir=args.projection_out, stream=out, env=env,
                              module=SUITE_MODULES[suite], strict=args.projection_strict)

