"""Every Primus experiment recipe through ``primus-ext project``, as a Primus user would run it: counts by class.

Run from the repository root::

    python benchmarks/primus_recipes.py                              # ../shared/primus_configs, MI300X + MI325X
    python benchmarks/primus_recipes.py --primus /path/to/Primus     # a full checkout (MI355X too)
    python benchmarks/primus_recipes.py --gpus MI300X --list         # one line per recipe
    python benchmarks/primus_recipes.py --nodes-from-hint            # re-run the 'needs N nodes' ones at N

Each ``examples/megatron/configs/<GPU>/**/*.yaml`` is projected through the real CLI entry
(``primus_ext.cli.main``, in this process; stdout and stderr captured) with ``--cluster`` from the GPU folder
and nothing else: presets resolve from the checkout the recipe sits in (no ``--config-root``), the node
count is the recipe's (or 1). Classes: ``projects`` (exit 0, 3 or 4; fits / over capacity from the code and the
printed verdict),
``refused: architecture`` (exit 2, a model family the projection cannot build), ``refused: needs N nodes``
(exit 2, the layout does not fit one node and the recipe names no node count), ``refused: other`` (exit 2,
every problem printed), ``crash`` (any other exit, or a traceback in the output). A recipe the tool projects
although it names an architecture key it refuses elsewhere would show up as ``projects`` with its model
family in ``--list``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = REPO.parent / "shared" / "primus_configs"
CLUSTERS = {"MI300X": "mi300x", "MI325X": "mi325x", "MI355X": "mi355x"}


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``primus-ext ARGV`` in this process: (exit code, stdout + stderr)."""
    from primus_ext.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except Exception as err:  # a crash is what this benchmark counts
            import traceback

            traceback.print_exc(file=out)
            code = f"crash: {type(err).__name__}"
    return code, out.getvalue()


def classify(code: int | str, text: str) -> tuple[str, str]:
    """(class, detail) of one run."""
    if not isinstance(code, int) or "Traceback (most recent call last)" in text:
        return "crash", str(code)
    if code in (0, 3, 4):  # 3: projected, out of memory; 4: over capacity, within the model's error (the gate's codes)
        verdict = "over capacity" if code in (3, 4) or re.search(r"DOES NOT FIT|out of memory", text) else "fits"
        return "projects", verdict
    if code != 2:
        return "crash", f"exit {code}"
    problems = [line.strip()[2:] for line in text.splitlines() if line.strip().startswith("- ")]
    if any("not modelled: primus-ext projects GPT-style" in p for p in problems):
        return "refused: architecture", next(p for p in problems if "not modelled" in p)
    hint = next((p for p in problems if p.startswith("nodes:") and "needs a multiple of" in p), None)
    if hint:
        return "refused: needs more nodes", hint
    return "refused: other", problems[0] if problems else text.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--primus", type=Path, default=DEFAULT_ROOT, help="a Primus checkout (or the shared mirror)")
    parser.add_argument("--gpus", default="MI300X,MI325X", help="GPU folders under examples/megatron/configs")
    parser.add_argument("--list", action="store_true", help="one line per recipe")
    parser.add_argument("--nodes-from-hint", action="store_true",
                        help="re-run each 'needs N nodes' recipe with --nodes N and count those too")
    args = parser.parse_args(argv)
    folder = args.primus / "examples" / "megatron" / "configs"
    recipes = [p for gpu in args.gpus.split(",") for p in sorted((folder / gpu).rglob("*.yaml"))]
    if not recipes:
        print(f"no recipes under {folder}/{{{args.gpus}}}", file=sys.stderr)
        return 2
    counts: Counter[str] = Counter()
    verdicts: Counter[str] = Counter()
    rerun: Counter[str] = Counter()
    start = time.perf_counter()
    for path in recipes:
        gpu = path.relative_to(folder).parts[0]
        base = ["project", str(path), "--cluster", CLUSTERS.get(gpu, gpu.lower())]
        cls, detail = classify(*run_cli(base))
        counts[cls] += 1
        if cls == "projects":
            verdicts[detail] += 1
        if args.list:
            print(f"{cls:26s} {path.relative_to(folder)}  {detail[:150]}")
        if args.nodes_from_hint and cls == "refused: needs more nodes":
            nodes = re.search(r"--nodes (\d+)", detail)
            again = classify(*run_cli([*base, "--nodes", nodes.group(1)])) if nodes else ("crash", "no hint")
            rerun[again[0]] += 1
            if args.list:
                print(f"{'':26s}   at --nodes {nodes.group(1) if nodes else '?'}: {again[0]} {again[1][:110]}")
    seconds = time.perf_counter() - start
    print(f"\n{len(recipes)} Primus recipes ({args.gpus}) from {args.primus}, {seconds:.1f} s")
    for cls in ("projects", "refused: architecture", "refused: needs more nodes", "refused: other", "crash"):
        extra = f"  ({', '.join(f'{v} {k}' for k, v in sorted(verdicts.items()))})" if cls == "projects" else ""
        print(f"  {cls:26s} {counts[cls]:4d}{extra}")
    if rerun:
        print("  re-run at the hinted node count: " + ", ".join(f"{v} {k}" for k, v in sorted(rerun.items())))
    return 1 if counts["crash"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
