"""``primus-ext recipe show``: print the resolved model / execution / system specs of a recipe.

    primus-ext recipe show recipes/llama3.1_8B-pretrain.yaml
    primus-ext recipe show recipes/deepseek_v3-pretrain.yaml pipeline_model_parallel_size=16 --nodes 128
    primus-ext recipe show EXP.yaml --config-root /path/to/Primus --cluster mi300x --nodes 4 --json

Invalid recipes print every problem (key path, value, fix) without a traceback and exit with 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING, Any

from primus_ext.argtypes import MAX_NODE_FLAG, int_in

if TYPE_CHECKING:
    from primus_ext.recipe import Recipe


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("recipe", help="inspect recipes (Primus experiment or flat Megatron YAML)")
    actions = parser.add_subparsers(dest="recipe_command", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="print the resolved model / execution / system specs")
    show.add_argument("recipe", help="experiment YAML (Primus format) or flat Megatron-argument YAML")
    show.add_argument("overrides", nargs="*", metavar="key=value",
                      help="Megatron argument overrides; they win over the recipe")
    show.add_argument("--cluster", help="hardware profile (e.g. mi300x, h100, gb200); default from the recipe")
    show.add_argument("--nodes", type=int_in(1, MAX_NODE_FLAG), help="node count; default from the recipe, else 1")
    show.add_argument("--config-root", action="append", default=[], metavar="DIR",
                      help="folder searched for model/module presets, e.g. a Primus checkout (repeatable)")
    show.add_argument("--json", action="store_true", help="print JSON instead of tables")
    show.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from primus_ext.session import Session

    session = Session()  # the target: primus_ext.session's one rule
    recipe = session.load(args.recipe, args.overrides, cluster=args.cluster, nodes=args.nodes,
                          config_roots=args.config_root)
    if args.json:
        print(json.dumps(recipe.to_dict(), indent=2, default=str))
    else:
        print(format_recipe(recipe))
        print(session.target_line(recipe))
    return 0


def _pattern(flags: tuple[bool, ...]) -> str:
    """(F, F, F, T, ...) -> ``[0]*3+[1]*58`` (Megatron's moe_layer_freq expression)."""
    if not flags:
        return "-"
    runs: list[tuple[int, int]] = []
    for flag in flags:
        if runs and runs[-1][0] == int(flag):
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((int(flag), 1))
    return "+".join(f"[{value}]*{count}" for value, count in runs)


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, tuple) and value and all(isinstance(v, bool) for v in value):
        return _pattern(value)
    if isinstance(value, tuple | list):
        return ", ".join(map(str, value)) or "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _table(title: str, rows: list[tuple[str, Any]]) -> str:
    width = max(len(key) for key, _ in rows)
    lines = [title, "-" * len(title)]
    lines += [f"  {key:<{width}}  {_value(value)}" for key, value in rows]
    return "\n".join(lines)


def format_recipe(recipe: Recipe) -> str:
    """Three tables (model, execution, system), then warnings."""
    model, execution, system = recipe.model, recipe.execution, recipe.system
    model_rows = [(f.name, getattr(model, f.name)) for f in dataclasses.fields(model)]
    model_rows += [("(moe layers / dense layers)", f"{model.num_moe_layers} / {model.num_dense_layers}")]
    exec_rows = [(f.name, getattr(execution, f.name)) for f in dataclasses.fields(execution)]
    exec_rows += [
        ("(world size)", execution.world_size),
        ("(micro-batches per step)", execution.num_microbatches),
        ("(expert data-parallel size)", execution.expert_data_parallel_size),
    ]
    gpu = system.gpu
    system_rows = [
        ("cluster", system.name),
        ("gpu", gpu.name),
        ("num_nodes", system.num_nodes),
        ("gpus_per_node", gpu.gpus_per_node),
        ("world_size", system.world_size),
        ("scaleup_domain", system.scaleup_domain),
        ("bf16_dense_tflops", gpu.bf16_dense_tflops),
        ("fp8_dense_tflops", gpu.fp8_dense_tflops),
        ("hbm_gib", gpu.hbm_bytes / 2**30),
        ("hbm_bandwidth_tb_per_s", gpu.hbm_bandwidth_bytes_per_s / 1e12),
        ("scaleup_gb_per_s_per_direction", gpu.scaleup_bandwidth_bytes_per_s / 1e9),
        ("nic_gb_per_s_per_gpu", gpu.nic_bandwidth_bytes_per_s / 1e9),
    ]
    parts = [
        f"recipe {recipe.source}" + (f" ({recipe.exp_name})" if recipe.exp_name else ""),
        "",
        _table("model", model_rows),
        "",
        _table("execution", exec_rows),
        "",
        _table("system", system_rows),
    ]
    parts += ["", presets_line(recipe)]
    if recipe.warnings:
        parts += ["", "warnings:"] + [f"  - {w}" for w in recipe.warnings]
    return "\n".join(parts)


def presets_line(recipe: Recipe) -> str:
    """The files read, lowest precedence first, grouped by folder; and the Primus checkout found."""
    groups: list[tuple[str, list[str]]] = []
    for path in recipe.preset_files or (recipe.source,):
        folder, _, name = str(path).rpartition("/")
        if groups and groups[-1][0] == folder:
            groups[-1][1].append(name)
        else:
            groups.append((folder, [name]))
    root = f", presets of the Primus checkout at {recipe.config_root}" if recipe.config_root else ""
    lines = [f"read (lowest precedence first{root}):"]
    lines += [f"  {folder + '/' if folder else ''}: {', '.join(names)}" for folder, names in groups]
    return "\n".join(lines)
