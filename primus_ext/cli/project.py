"""``primus-ext project``: project step time, tok/s/GPU, MFU and memory of a recipe on a cluster.

    primus-ext project recipes/llama3.1_8B-pretrain.yaml
    primus-ext project recipes/deepseek_v3-pretrain.yaml --cluster h100 --nodes 128 --analytic
    primus-ext project recipes/llama3.1_70B-pretrain.yaml tensor_model_parallel_size=8 --store timings.sqlite
    primus-ext project recipes/mixtral_8x7B-pretrain.yaml --json out.json      # JSON document to a file
    primus-ext project recipes/qwen3_30B_A3B-pretrain.yaml --memory-only

Layer costs come from the timing store (``--store FILE``, or the default store when it exists) and
fall back to the analytic roofline per layer kind; ``--analytic`` uses the roofline only. The report
says which source each layer kind used. Invalid recipes exit with code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("project", help="project step time, tok/s/GPU, MFU and memory of a recipe")
    parser.add_argument("recipe", help="experiment YAML (Primus format) or flat Megatron-argument YAML")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="Megatron argument overrides")
    parser.add_argument("--cluster", help="hardware profile (e.g. h100, mi300x, gb200); default from the recipe")
    parser.add_argument("--nodes", type=int, help="node count; default from the recipe, else 1")
    parser.add_argument("--config-root", action="append", default=[], metavar="DIR",
                        help="folder searched for model/module presets (repeatable)")
    parser.add_argument("--store", metavar="FILE", help="timing store (SQLite) with measured layer costs")
    parser.add_argument("--device", help="whose measurements to read from the store (default: this machine)")
    parser.add_argument("--accept-scaled", action="store_true",
                        help="also use down-scaled (CPU-sized) store entries for their target shapes")
    parser.add_argument("--analytic", action="store_true", help="analytic roofline costs only (ignore any store)")
    parser.add_argument("--memory-only", action="store_true", help="print the memory estimate only")
    parser.add_argument("--timeline", action="store_true", help="include every pipeline op in the JSON")
    parser.add_argument("--json", nargs="?", const="-", metavar="OUT",
                        help="print JSON instead of tables (to OUT when given, else stdout)")
    parser.set_defaults(func=run)


def _costs(args: argparse.Namespace) -> Any:
    if args.analytic:
        return None
    from primus_ext.measure.store import TimingStore, default_store_path

    path = args.store
    if path is None:
        if not default_store_path().exists():
            return None
        path = default_store_path()
    return TimingStore(path, device=args.device, accept_scaled=args.accept_scaled)


def _emit(text: str, out: str | None) -> None:
    if out in (None, "-"):
        print(text)
        return
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")
    print(f"wrote {out}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from primus_ext.recipe import load_recipe

    recipe = load_recipe(args.recipe, args.overrides, cluster=args.cluster, nodes=args.nodes,
                         config_roots=args.config_root)
    model, execution, system = recipe.model, recipe.execution, recipe.system
    if args.memory_only:
        from primus_ext.model.memory import estimate_memory
        from primus_ext.report.memory_table import format_memory_table, memory_to_dict

        memory = estimate_memory(model, execution, system)
        if args.json:
            _emit(json.dumps(memory_to_dict(memory), indent=2, default=str), args.json)
        else:
            print(format_memory_table(memory))
        return 0

    from primus_ext.projection import project
    from primus_ext.report.projection_table import format_projection, projection_to_dict

    costs = _costs(args)
    projection = project(model, execution, system, costs)
    if args.json:
        doc = projection_to_dict(projection, timeline=args.timeline)
        doc["recipe"] = recipe.source
        _emit(json.dumps(doc, indent=2, default=str), args.json)
    else:
        print(format_projection(projection))
        for warning in recipe.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return 0
