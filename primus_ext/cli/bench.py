"""``primus-ext bench``: measure a recipe's per-rank layer kinds into the timing store.

    primus-ext bench recipes/llama3.1_8B-pretrain.yaml                       # CPU: auto scale
    primus-ext bench recipes/mixtral_8x7B-pretrain.yaml --scale 0.0625 --reps 5 --json
    primus-ext bench RECIPE tensor_model_parallel_size=2 --out store.sqlite --export h200.jsonl
    primus-ext bench RECIPE --import h200.jsonl          # merge another machine's store first
    primus-ext bench RECIPE --fabric                     # also sweep in-node collectives

Only what the store lacks for this device, library versions and scale is measured (``--force``
re-measures). Failed layers are recorded with their reason and reported; the others still run;
the exit code is 1 when any layer failed. Sources say where a number comes from, e.g.
``measured:cpu@scale=0.125``: a CPU timing is never presented as a GPU one.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from primus_ext.argtypes import MAX_ITERS, MAX_NODE_FLAG, int_in
from primus_ext.cli._args import nonnegative_float


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="measure real megatron-core layers of a recipe into the timing store")
    p.add_argument("recipe", help="experiment YAML (Primus format) or flat Megatron-argument YAML")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="Megatron argument overrides")
    p.add_argument("--cluster", help="hardware profile of the target run; default from the recipe")
    p.add_argument("--nodes", type=int_in(1, MAX_NODE_FLAG), help="node count of the target run")
    p.add_argument("--scale", type=nonnegative_float,
                   help="shrink hidden/seq/experts by this factor (default: 1 on GPU, "
                   "on CPU the largest power of 1/2 that keeps the recipe in seconds)")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when present")
    p.add_argument("--reps", type=int_in(1, MAX_ITERS), default=10, help="timed repetitions per layer (default 10)")
    p.add_argument("--warmup", type=int_in(0, MAX_ITERS), default=2, help="untimed warm-up iterations (default 2)")
    p.add_argument("--timeout", type=nonnegative_float, default=120.0,
                   help="seconds per layer before giving up (default 120)")
    p.add_argument("--out", metavar="FILE", help="SQLite store (default $PRIMUS_EXT_CACHE/timings.sqlite)")
    p.add_argument("--import", dest="import_path", metavar="FILE", help="merge a JSON-lines export first")
    p.add_argument("--export", metavar="FILE", help="write the whole store as JSON lines afterwards")
    p.add_argument("--force", action="store_true", help="re-measure entries already in the store")
    p.add_argument("--wgrad", action="store_true",
                   help="also time an input-grad-only backward to split off the weight-grad part")
    p.add_argument("--no-spawn", action="store_true", help="never start extra ranks (per-rank sizes, no comm)")
    p.add_argument("--fabric", action="store_true", help="also sweep in-node collectives into the store")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import warnings

    from primus_ext.measure.quiet import MEGATRON_NOTES

    for text in MEGATRON_NOTES:
        warnings.filterwarnings("ignore", message=f".*{text}.*", category=UserWarning)
    from primus_ext.cli._progress import LayerProgress
    from primus_ext.files import check_outputs
    from primus_ext.measure.runner import MeasureOptions, measure_many
    from primus_ext.measure.scale import default_scale
    from primus_ext.measure.shims import resolve_device
    from primus_ext.measure.store import TimingStore
    from primus_ext.model.layers import rank_shapes
    from primus_ext.recipe import load_recipe

    check_outputs(("--out", args.out), ("--export", args.export),  # before any measurement
                  inputs=(args.recipe, args.import_path))
    recipe = load_recipe(args.recipe, args.overrides, cluster=args.cluster, nodes=args.nodes)
    check_outputs(("--out", args.out), ("--export", args.export))  # against its presets too, still before measuring
    shapes = bench_shapes(rank_shapes(recipe.model, recipe.execution))
    device = resolve_device(args.device)
    scale = args.scale if args.scale is not None else default_scale(shapes.values(), device.type)
    if not 0 < scale <= 1:
        from primus_ext.errors import Problem, RecipeError

        raise RecipeError(problems=[Problem(path="--scale", message="scale must be in (0, 1]", value=scale,
                                            fix="e.g. --scale 0.125")])
    with TimingStore(args.out) as store:
        if args.import_path:
            print(f"imported {store.import_(args.import_path)} entries from {args.import_path}", file=sys.stderr)
        missing = [s for s in shapes.values() if args.force or store.entry(s, scale=scale) is None]
        opts = MeasureOptions(warmup=args.warmup, reps=args.reps, timeout_s=args.timeout,
                              spawn=not args.no_spawn, split_wgrad=args.wgrad)
        for m in measure_many(missing, scale=scale, device=device, opts=opts,
                              progress=LayerProgress()):
            store.record(m)
        fabric_failures: list[str] = []
        if args.fabric:
            from primus_ext.measure.fabric import fabric_sweep

            try:
                points, fabric_failures = fabric_sweep(device=device)
                store.record_fabric(points)
            except ValueError as err:  # e.g. a one-GPU machine: no in-node link to sweep
                fabric_failures = [str(err)]
        rows = [(kind, store.entry(s, scale=scale, ok_only=False)) for kind, s in shapes.items()]
        if args.export:
            print(f"exported {store.export(args.export)} entries to {args.export}", file=sys.stderr)
    if args.json:
        print(json.dumps({"recipe": args.recipe, "scale": scale, "layers": [_jsonable(k, r) for k, r in rows],
                          "fabric_failures": fabric_failures}, indent=2))
    else:
        print(format_table(rows, scale, store.path))
        for failure in fabric_failures:
            print(f"fabric: {failure}")
    return 0 if all(r is not None and r["status"] == "ok" for _, r in rows) else 1


def bench_shapes(shapes: dict[str, Any]) -> dict[str, Any]:
    """The recipe's layer kinds (without LoRA: ``model.lora.trained_in_full``), plus the plain variant of a
    recomputed dense/MoE layer: the projection mixes both when only some layers recompute
    (``recompute_num_layers``)."""
    from dataclasses import replace

    from primus_ext.model.kinds.registry import get_kind
    from primus_ext.model.lora import trained_in_full

    out: dict[str, Any] = {}
    for kind, shape in shapes.items():
        shape = trained_in_full(shape)  # a LoRA run is priced from the fully trained layer (model.lora)
        if get_kind(kind).recomputable and shape.recompute != "none":
            out[kind] = replace(shape, recompute="none", recompute_modules=())
            mods = f" {'+'.join(shape.recompute_modules)}" if shape.recompute_modules else ""
            out[f"{kind} (recompute {shape.recompute}{mods})"] = shape
        else:
            out[kind] = shape
    return out


_COLUMNS = ("kind", "fwd ms", "bwd ms", "wgrad ms", "recomp ms", "spread", "params", "saved MiB", "source")


def _cells(kind: str, r: dict[str, Any] | None) -> list[str]:
    if r is None:
        return [kind, "-", "-", "-", "-", "-", "-", "-", "not measured"]
    if r["status"] != "ok":
        return [kind, "-", "-", "-", "-", "-", "-", "-", f"FAILED: {r['reason']}"]
    spread = max(r["fwd_spread"], r["bwd_spread"])
    wgrad = "-" if r["wgrad_ms"] is None else f"{r['wgrad_ms']:.2f}"
    return [kind, f"{r['fwd_ms']:.2f}", f"{r['bwd_ms']:.2f}", wgrad, f"{r['recompute_ms']:.2f}", f"{spread:.0%}",
            f"{r['params']:,}", f"{r['saved_bytes'] / 2**20:.1f}", r["source"]]


def format_table(rows: list[tuple[str, dict[str, Any] | None]], scale: float, path: Any) -> str:
    """The bench table: one line per layer kind, then the notes of the entries."""
    cells = [list(_COLUMNS)] + [_cells(k, r) for k, r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_COLUMNS))]
    last = len(_COLUMNS) - 1
    lines = ["  ".join(c[i].ljust(widths[i]) if i in (0, last) else c[i].rjust(widths[i])
                       for i in range(len(_COLUMNS))) for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = sorted({n for _, r in rows if r for n in json.loads(r["notes"] or "[]")})
    lines += [f"scale {scale:g}; per micro-batch, one rank; store {path}"] + [f"note: {n}" for n in notes]
    return "\n".join(lines)


def _jsonable(kind: str, r: dict[str, Any] | None) -> dict[str, Any]:
    if r is None:
        return {"kind": kind, "status": "missing"}
    out = {k: v for k, v in r.items() if k not in ("shape_json", "target_json", "notes")}
    out["notes"] = json.loads(r["notes"] or "[]")
    out["shape"] = json.loads(r["shape_json"])
    return {**out, "kind": kind}
