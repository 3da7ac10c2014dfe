"""Issue 57 part 7, the long sweep: tune every shipped recipe at several node counts with every strategy and seeds
0-4, write each winner with ``--out`` and reload it: every result written must resolve to the tuned configuration.

    python benchmarks/tuned_rewrite_resolves.py                       # 9 recipes x 3 node counts x 3 strategies
    python benchmarks/tuned_rewrite_resolves.py --nodes 4 --seeds 0 --budget 12

The CLI's own check refuses a copy that does not resolve (exit 2, "does not resolve"); this script reloads each
written copy again and compares it with the tuned configuration of ``--json``. ``--strategy llm`` has no endpoint
here: it is pointed at a closed port, names the refusal and hands the budget to tpe (its fallback path is what
runs). Figures: runs, copies written and resolved, refusals by reason, crashes, CPU seconds.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from primus_ext.cli import main  # noqa: E402
from primus_ext.recipe import load_recipe  # noqa: E402
from primus_ext.results import dumps  # noqa: E402


def one(recipe: Path, nodes: int, strategy: str, seed: int, budget: int, work: Path) -> tuple[str, str]:
    """(outcome, detail) of one tune --out run: resolved / refused / crash."""
    copy = work / recipe.name
    shutil.copy(recipe, copy)
    out, doc = work / "tuned.yaml", work / "tune.json"
    for leftover in (out, doc):
        leftover.unlink(missing_ok=True)
    argv = ["tune", str(copy), "--cluster", "h100", "--nodes", str(nodes), "--strategy", strategy, "--seed",
            str(seed), "--budget", str(budget), "--no-regret", "--out", str(out), "--json", str(doc)]
    if strategy == "llm":
        argv += ["--llm", "openai/none", "--llm-api-base", "http://127.0.0.1:9/v1", "--llm-timeout", "2"]
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(argv)
    except BaseException as exc:  # a crash is a figure
        return "crash", f"{type(exc).__name__}: {exc}"[:200]
    if code != 0:
        text = " ".join(err.getvalue().split())
        reason = ("does not resolve" if "does not resolve" in text else "what-if" if "what-if" in text else
                  "nothing runs" if "no configuration of the search space" in text else text[-160:])
        return ("not-resolved" if reason == "does not resolve" else "refused"), reason
    if not out.exists():
        return "current", "already the tuned configuration"
    tuned = json.loads(doc.read_text())["best_execution"]
    reloaded = load_recipe(out, cluster="h100", nodes=nodes).execution
    shown = json.loads(dumps(dataclasses.asdict(reloaded)))  # as --json writes the tuned one
    differs = sorted(k for k, v in tuned.items() if k in shown and shown[k] != v)
    if differs:
        return "not-resolved", f"{reloaded.pipeline_schedule}: {differs}"
    return "resolved", reloaded.pipeline_schedule


def run() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--strategies", nargs="+", default=["exhaustive", "tpe", "llm"])
    parser.add_argument("--budget", type=int, default=20)
    args = parser.parse_args()
    recipes = sorted((REPO / "recipes").glob("*.yaml"))
    counts: collections.Counter[str] = collections.Counter()
    schedules: collections.Counter[str] = collections.Counter()
    reasons: collections.Counter[str] = collections.Counter()
    bad: list[str] = []
    start = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in recipes:
            for nodes in args.nodes:
                for strategy in args.strategies:
                    for seed in (args.seeds if strategy != "exhaustive" else args.seeds[:1]):
                        outcome, detail = one(recipe, nodes, strategy, seed, args.budget, Path(tmp))
                        counts[outcome] += 1
                        if outcome == "resolved":
                            schedules[detail] += 1
                        elif outcome in ("refused", "current"):
                            reasons[detail] += 1
                        else:
                            bad.append(f"{recipe.name} nodes={nodes} {strategy} seed={seed}: {outcome}: {detail}")
    cpu = time.process_time() - start
    total = sum(counts.values())
    print(f"runs: {total} ({len(recipes)} recipes x nodes {args.nodes} x {args.strategies}, seeds {args.seeds}; "
          f"exhaustive once per recipe and node count; budget {args.budget})")
    print(f"written and resolved: {counts['resolved']} (schedules: {dict(sorted(schedules.items()))})")
    print(f"already current: {counts['current']}; refused before writing: {counts['refused']} "
          f"({dict(reasons.most_common())})")
    print(f"written but not resolving: {counts['not-resolved']}; crashes: {counts['crash']}")
    print(f"CPU: {cpu:.0f} s")
    for line in bad[:20]:
        print("  " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(run())
