"""``primus-ext compare A B``: two projections side by side (two recipes, or one recipe under two override sets).

    primus-ext compare recipes/llama3.1_70B-pretrain.yaml recipes/llama3.1_405B-pretrain.yaml
    primus-ext compare recipes/llama3.1_70B-pretrain.yaml "pipeline_model_parallel_size=4 micro_batch_size=2"
    primus-ext compare "recipes/x.yaml tensor_model_parallel_size=4" "recipes/x.yaml tensor_model_parallel_size=8"
    primus-ext compare recipes/deepseek_v3-pretrain.yaml "recipes/deepseek_v3-pretrain.yaml" --nodes-b 128 \\
        --html compare.html
    primus-ext compare recipes/llama3.1_70B-pretrain.yaml "micro_batch_size=2" --json - | jq .rows

Each side is one argument: a recipe path, optionally followed by ``key=value`` overrides (quote the
argument). A side B of overrides only is side A's recipe and overrides with B's on top. ``--cluster``,
``--nodes`` and ``--schedule`` apply to both sides, ``--cluster-b`` / ``--nodes-b`` / ``--schedule-b`` to B only;
without them each side's target is found as ``project`` finds it (``primus_ext.session``). Layer costs and
calibration are ``project``'s: the timing store (``--store FILE``, else the default one when it exists) with the
roofline for what it lacks, and a stored calibration record that applies (``--analytic``: roofline only;
``--uncalibrated``: ignore records), so a side shows the figure ``project`` prints for it. Prints a table (figure,
A, B, change from A to B,
judged better / worse where the direction is clear); ``--html FILE`` writes one self-contained page with the
table and both full reports side by side; ``--json OUT`` both projections and the rows as the result schema's
``comparison`` document (``primus_ext.results``; ``-``: stdout, the table then on stderr). Exit 0; 2 when a side
is not a valid recipe.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass
from typing import Any

from primus_ext.argtypes import MAX_NODE_FLAG, int_in
from primus_ext.cli._args import add_calibration_arguments, add_cost_arguments, session_of


@dataclass(frozen=True, kw_only=True)
class Side:
    """One side of the comparison: a recipe file and its overrides."""

    recipe: str
    overrides: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        name = self.recipe.rsplit("/", 1)[-1].removesuffix(".yaml")
        return " ".join((name, *self.overrides))


def parse_sides(a: str, b: str) -> tuple[Side, Side]:
    """``"RECIPE [key=value ...]"`` twice; a B of overrides only extends A (see the module docstring)."""
    from primus_ext.errors import Problem, RecipeError

    def split(text: str, name: str) -> list[str]:
        try:
            words = shlex.split(text)
        except ValueError as err:
            raise RecipeError(problems=[Problem(path=name, value=text, message=f"cannot split the argument: {err}",
                                                fix="quote it as one shell word: \"RECIPE key=value ...\"")]) from None
        if not words:
            raise RecipeError(problems=[Problem(path=name, value=text, message="empty side",
                                                fix="give a recipe path and optionally key=value overrides")])
        return words

    wa, wb = split(a, "A"), split(b, "B")
    if "=" in wa[0]:
        raise RecipeError(problems=[Problem(path="A", value=a, message="side A must start with a recipe path",
                                            fix="primus-ext compare RECIPE \"key=value ...\"")])
    side_a = Side(recipe=wa[0], overrides=tuple(wa[1:]))
    if "=" in wb[0]:
        return side_a, Side(recipe=side_a.recipe, overrides=(*side_a.overrides, *wb))
    return side_a, Side(recipe=wb[0], overrides=tuple(wb[1:]))


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare", help="two projections side by side (two recipes, or one recipe under two override sets)",
        description=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", metavar="A", help='side A: "RECIPE [key=value ...]" (quoted when it has overrides)')
    parser.add_argument("b", metavar="B", help='side B: "RECIPE [key=value ...]", or "key=value ..." on top of A')
    parser.add_argument("--cluster", help="hardware profile of both sides; default from each recipe")
    parser.add_argument("--nodes", type=int_in(1, MAX_NODE_FLAG),
                        help="node count of both sides; default from each recipe")
    parser.add_argument("--cluster-b", help="hardware profile of side B only")
    parser.add_argument("--nodes-b", type=int_in(1, MAX_NODE_FLAG), help="node count of side B only")
    parser.add_argument("--schedule", metavar="NAME",
                        help="pipeline schedule of both sides (e.g. dualpipe: a what-if no framework key runs); "
                             "default from each recipe")
    parser.add_argument("--schedule-b", metavar="NAME", help="pipeline schedule of side B only")
    parser.add_argument("--config-root", action="append", default=[], metavar="DIR",
                        help="folder searched for model/module presets (repeatable)")
    add_cost_arguments(parser)
    add_calibration_arguments(parser)
    parser.add_argument("--html", metavar="FILE", help="also write the comparison as one self-contained HTML page")
    parser.add_argument("--json", metavar="OUT", help="also write both projections and the rows as JSON, the result "
                        "schema's comparison document ('-': stdout, the JSON only; the table goes to stderr)")
    parser.set_defaults(func=run)


def project_side(side: Side, session: Any, *, cluster: str | None = None, nodes: int | None = None,
                 config_roots: tuple[str, ...] = (), schedule: str | None = None) -> tuple[Any, Any]:
    """One side's recipe and projection through ``session`` (``primus_ext.session``: ``project``'s figure)."""
    recipe = session.load(side.recipe, side.overrides, cluster=cluster, nodes=nodes, config_roots=config_roots,
                          schedule=schedule)
    return recipe, session.project(recipe)


def run(args: argparse.Namespace) -> int:
    from primus_ext.files import check_outputs, write_output
    from primus_ext.report.compare import compare_rows, format_compare
    from primus_ext.report.html import ReportInputs, render_compare_html
    from primus_ext.results import check_json_out, emit_json, tables_to_stderr

    check_json_out(args.json)
    side_a, side_b = parse_sides(args.a, args.b)
    check_outputs(("--html", args.html), ("--json", args.json),  # before any work
                  inputs=(side_a.recipe, side_b.recipe))
    session, roots = session_of(args, calibrated=not args.uncalibrated), tuple(args.config_root)
    recipe_a, a = project_side(side_a, session, cluster=args.cluster, nodes=args.nodes, config_roots=roots,
                               schedule=args.schedule)
    recipe_b, b = project_side(side_b, session, cluster=args.cluster_b or args.cluster,
                               nodes=args.nodes_b or args.nodes, config_roots=roots,
                               schedule=args.schedule_b or args.schedule)
    labels = (side_a.label, side_b.label)
    with tables_to_stderr(args.json):  # with --json -, stdout carries the JSON only
        print(format_compare(compare_rows(a, b), labels))
        for label, recipe in zip(labels, (recipe_a, recipe_b), strict=True):
            print(f"{label}: {session.target_line(recipe)}")
        for label, projection in zip(labels, (a, b), strict=True):  # which stored record changed a side's figures
            for note in projection.notes:
                if note.startswith("calibrated (") or "a calibration record of" in note:
                    print(f"{label}: {note}")
    for label, recipe in zip(labels, (recipe_a, recipe_b), strict=True):
        for warning in recipe.warnings:
            print(f"warning ({label}): {warning}", file=sys.stderr)
    if args.html:
        inputs = tuple(ReportInputs(recipe=s.recipe, overrides=s.overrides, cluster=p.system.name,
                                    warnings=tuple(r.warnings)) for s, p, r in ((side_a, a, recipe_a),
                                                                                 (side_b, b, recipe_b)))
        write_output(args.html, render_compare_html(a, b, labels=labels, inputs=inputs), label="--html")
        print(f"wrote {args.html}", file=sys.stderr)
    if args.json:
        from primus_ext.results.compare import comparison_document

        emit_json(comparison_document(a, b, labels=labels, recipes=(recipe_a, recipe_b),
                                      overrides=(side_a.overrides, side_b.overrides)), args.json)
    return 0
