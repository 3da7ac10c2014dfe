"""Same figures before and after a refactor: every user-facing JSON of two trees, compared value by value.

    python benchmarks/same_figures.py capture OUT_DIR [--repo TREE]   # the documents of TREE (default: this checkout)
    python benchmarks/same_figures.py compare BEFORE_DIR AFTER_DIR     # every differing value, with its relative size

``capture`` runs, in TREE with ``PYTHONPATH=TREE`` and a fresh cache: ``validate`` over ../shared/validation (the
published runs and MLPerf, when present), ``ci ci/suite.yaml``, ``project`` and ``project --memory-only`` of every
shipped recipe, and three tuner runs (Mixtral-8x7B exhaustive, DeepSeek-V3 TPE 300 seed 1, Llama-3.1-70B
exhaustive), each ``--json``. ``compare`` ignores wall times and the schema version, reads a tuner configuration's
short labels (before schema 2) as the recipe's names; it prints one line per differing value
(``path: before -> after, relative difference``) and the count per document (benchmarks/RESULTS.md "One arithmetic":
issue 55's check). 2-3 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "validation"
TIMING_KEYS = {"wall_s", "elapsed_s", "search_s", "cpu_s", "schema_version"}
"""Keys whose values are the machine's time (or the document format's version), not a figure."""


def renamed(doc: object, key: str = "") -> object:
    """``doc`` with a tuner configuration's short axis labels (``tp``, ``mbs``: before schema 2) read as the axis
    names (``tune.axes``), so that only values are compared."""
    from primus_ext.tune.axes import axis_name, canonical

    if isinstance(doc, dict):
        doc = canonical(doc) if key == "config" else doc
        return {k: renamed(v, k) for k, v in doc.items()}
    if isinstance(doc, list):
        return [renamed(v, key) for v in doc]
    return axis_name(doc) if key == "axis" and isinstance(doc, str) else doc


def commands(tree: Path) -> dict[str, list[str]]:
    """Document name -> its ``primus-ext`` arguments (without ``--json``)."""
    out: dict[str, list[str]] = {}
    if (SHARED / "measured_throughput.csv").is_file():
        out["validate"] = ["validate", str(SHARED / "measured_throughput.csv"),
                           "--archs", str(SHARED / "model_archs.csv"), "--hardware", str(SHARED / "hardware_specs.csv")]
        out["mlperf"] = ["validate", str(SHARED / "mlperf_training.csv")]
    out["ci"] = ["ci", "ci/suite.yaml"]
    for recipe in sorted((tree / "recipes").glob("*.yaml")):
        out[f"project-{recipe.stem}"] = ["project", f"recipes/{recipe.name}"]
        out[f"memory-{recipe.stem}"] = ["project", f"recipes/{recipe.name}", "--memory-only"]
    out["tune-mixtral"] = ["tune", "recipes/mixtral_8x7B-pretrain.yaml", "--strategy", "exhaustive"]
    out["tune-dsv3"] = ["tune", "recipes/deepseek_v3-pretrain.yaml", "--strategy", "tpe", "--budget", "300",
                        "--seed", "1"]
    out["tune-l70"] = ["tune", "recipes/llama3.1_70B-pretrain.yaml", "--strategy", "exhaustive"]
    return out


def capture(tree: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(tree), PRIMUS_EXT_CACHE=tempfile.mkdtemp(prefix="same-figures-"))
    for name, args in commands(tree).items():
        done = subprocess.run([sys.executable, "-m", "primus_ext", *args, "--json", str(out / f"{name}.json")],
                              cwd=tree, env=env, capture_output=True, text=True, check=False)
        print(f"{name}: exit {done.returncode}", flush=True)


def differences(before: object, after: object, path: str = "") -> list[tuple[str, str, float | None]]:
    """(path, what differs, relative size for numbers) of every value that is not equal."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [d for key in sorted(set(before) | set(after), key=str) if key not in TIMING_KEYS
                for d in (differences(before[key], after[key], f"{path}/{key}") if key in before and key in after
                          else [(f"{path}/{key}", "only on one side", None)])]
    if isinstance(before, list) and isinstance(after, list):
        if len(before) != len(after):
            return [(path, f"{len(before)} items -> {len(after)}", None)]
        return [d for k, (x, y) in enumerate(zip(before, after, strict=True))
                for d in differences(x, y, f"{path}[{k}]")]
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (before, after))
    if numbers and before != after:
        return [(path, f"{before} -> {after}", abs(before - after) / max(abs(before), abs(after)))]
    return [] if before == after else [(path, f"{str(before)[:60]!r} -> {str(after)[:60]!r}", None)]


def compare(before: Path, after: Path) -> int:
    changed = 0
    for first in sorted(before.glob("*.json")):
        second = after / first.name
        if not second.is_file():
            print(f"{first.name}: missing after")
            changed += 1
            continue
        found = differences(renamed(json.loads(first.read_text())), renamed(json.loads(second.read_text())))
        changed += bool(found)
        if found:
            print(f"{first.name}: {len(found)} values differ")
        for where, what, rel in found[:6]:
            print(f"    {where}: {what}" + (f"  (relative {rel:.2g})" if rel is not None else ""))
    print(f"{changed} of {len(list(before.glob('*.json')))} documents differ")
    return 1 if changed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    cap = sub.add_parser("capture")
    cap.add_argument("out", type=Path)
    cap.add_argument("--repo", type=Path, default=ROOT)
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("before", type=Path)
    cmp_.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.what == "capture":
        capture(args.repo.resolve(), args.out)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
