"""The hostile-input campaign of issue 47: generated cases through the real CLI, counting what must never happen.

    python benchmarks/hostile_campaign.py --cases 10000 --jobs 2          # the RESULTS.md figures
    python benchmarks/hostile_campaign.py --replay 1234                   # one case again, its stderr shown
    python benchmarks/hostile_campaign.py --surface ci --cases 200        # one surface alone (ci, trials, log, ...)
    python benchmarks/hostile_campaign.py --surface llm --cases 40 --jobs 1   # issue 56's surfaces: profiles, csv,
                                   # logfields, env, streams, outpaths, llm (tests/cli/hostile_surfaces.py)
    python benchmarks/hostile_campaign.py --surface every --cases 10000 --jobs 2   # each case a surface drawn at
                                   # random: the recipe families' mix or one of SURFACES, equally likely

Case i (seed ``--seed`` + i) is built by ``tests/cli/hostile_cases.py`` (its own generators, not
``fuzz_recipes.py``'s): YAML features (an alias inside its own node in every position, tags, merge keys, anchors
across documents), file-system shapes (FIFOs, devices, folders, symlink loops, huge sparse files), every output flag
pointed at every input (directly, through a symlink or a hard link), ``extends`` trees, broken stores, long and
malformed training logs, secrets in every position of a recipe, and two ``tune --apply`` at once. Each case runs in
a forked child of a worker whose imports are warm, in a folder of its own (``PRIMUS_EXT_CACHE`` inside it), its
address space capped at the worker's plus ``--memory-gib``. Counted: tracebacks, cases over ``--seconds`` of CPU
time (user + system: the machine may be shared; wall-clock time is printed too), hangs (still running after
``--wall`` seconds: a blocked read spends no CPU), cases over the memory bound, inputs changed, secrets shown,
temporary files left, unexpected exit codes; per family, the slowest case and the largest memory growth.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "cli"))

from hostile_cases import FAMILIES, generate  # noqa: E402
from hostile_run import run_case  # noqa: E402
from hostile_surfaces import SURFACES  # noqa: E402

SURFACE = "all"
"""``--surface``: ``all`` (the recipe families' mix), ``every`` (each case the recipe mix or one of ``SURFACES``,
drawn equally: every input surface in one campaign), or one family of ``FAMILIES`` / ``SURFACES`` alone."""


def _generator(rng: random.Random):
    """The case generator ``SURFACE`` names (for ``every``: drawn with ``rng``, so a seed replays its case)."""
    if SURFACE == "all":
        return generate
    if SURFACE == "every":
        return rng.choice([generate, *(SURFACES[name] for name in sorted(SURFACES))])
    return {**FAMILIES, **SURFACES}[SURFACE]


def _kind(failure: str) -> str:
    """The kind of one of ``run_case``'s failure strings."""
    if "GiB" in failure:
        return "GiB"
    return next((k for k in ("traceback", "hang", "over", "input changed", "secret", "temporary", "exit")
                 if failure.startswith(k)), "other")


def run_one(seed: int, seconds: float, wall: float, memory_gib: float, root: str) -> dict:
    folder = Path(tempfile.mkdtemp(prefix=f"case{seed}-", dir=root))
    try:
        try:
            rng = random.Random(seed)
            case = _generator(rng)(rng, folder)
        except Exception as err:  # a generator's own bug: counted, never a silent skip
            return {"seed": seed, "case": "generator", "family": "generator", "argv": [], "exit": [], "seconds": 0.0,
                    "cpu_s": 0.0, "peak_bytes": 0, "failures": [f"generator: {type(err).__name__}: {err}"],
                    "stderr_tail": ""}
        result = run_case(case, limit_s=seconds, limit_bytes=int(memory_gib * 2**30), wall_s=wall)
    finally:
        for path in folder.rglob("*"):  # a test made some folders read-only
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)
    return {"seed": seed, "case": case.name, "family": case.name.split("/")[0], "argv": case.argv[:1],
            "exit": result.exit_codes, "seconds": round(result.seconds, 3), "cpu_s": round(result.cpu_seconds, 3),
            "peak_bytes": result.peak_bytes, "failures": result.failures,
            "stderr_tail": result.stderr[-1500:] if result.failures else ""}


def _worker(args: tuple[list[int], float, float, float]) -> list[dict]:
    seeds, seconds, wall, memory_gib = args
    import primus_ext.cli  # warm imports before forking the cases (torch and megatron-core too: bench's)
    import primus_ext.measure.runner
    import primus_ext.measure.shims
    import primus_ext.projection
    import primus_ext.recipe  # noqa: F401

    if SURFACE in ("llm", "every"):  # litellm's import alone is ~3.5 CPU-s: warm it once, as torch is
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="primus-ext-hostile-") as root:
        return [run_one(seed, seconds, wall, memory_gib, root) for seed in seeds]


def report(records: list[dict], elapsed: float, args: argparse.Namespace) -> dict:
    failures = Counter(_kind(f) for r in records for f in r["failures"])
    families = Counter(r["family"] for r in records)
    exits = Counter(str(code) for r in records for code in r["exit"])
    slow = max(records, key=lambda r: r["cpu_s"])
    big = max(records, key=lambda r: r["peak_bytes"])
    return {
        "cases": len(records), "seed": args.seed, "cpu_limit_s": args.seconds, "wall_limit_s": args.wall,
        "memory_limit_gib": args.memory_gib, "elapsed_s": round(elapsed, 1),
        "tracebacks": failures["traceback"], "over_cpu_limit": failures["over"], "hangs": failures["hang"],
        "over_memory": failures["GiB"], "inputs_changed": failures["input changed"],
        "secrets_shown": failures["secret"],
        "temporary_files_left": failures["temporary"], "unexpected_exit": failures["exit"], "other": failures["other"],
        "failed_cases": sum(1 for r in records if r["failures"]),
        "families": dict(sorted(families.items())), "exit_codes": dict(sorted(exits.items())),
        "slowest": {k: slow[k] for k in ("seed", "case", "cpu_s", "seconds")},
        "largest": {"seed": big["seed"], "case": big["case"], "peak_mib": round(big["peak_bytes"] / 2**20, 1)},
        "median_cpu_s": sorted(r["cpu_s"] for r in records)[len(records) // 2],
        "cpu_s_by_family": {f: {"mean": round(sum(r["cpu_s"] for r in records if r["family"] == f) / n, 3),
                                "max": max(r["cpu_s"] for r in records if r["family"] == f)}
                            for f, n in sorted(families.items())},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0, help="CPU-time bound per case (default 5)")
    parser.add_argument("--wall", type=float, default=60.0, help="wall-clock bound: a hang (default 60)")
    parser.add_argument("--memory-gib", type=float, default=1.0, help="memory bound per case (default 1 GiB)")
    parser.add_argument("--replay", type=int, metavar="SEED", help="run one case and show its stderr")
    parser.add_argument("--json", metavar="OUT", help="write the summary and every failed case")
    parser.add_argument("--surface", choices=("all", "every", *FAMILIES, *SURFACES), default="all",
                        help="every: each case a surface drawn at random; or one input surface alone (a recipe "
                             "family, or ci, trials, profiles, csv, "
                             "logfields, env, streams, outpaths, llm: tests/cli/hostile_surfaces.py)")
    args = parser.parse_args()
    global SURFACE
    SURFACE = args.surface  # read by the forked workers
    if args.replay is not None:
        record = _worker(([args.replay], args.seconds, args.wall, args.memory_gib))[0]
        print(json.dumps({k: v for k, v in record.items() if k != "stderr_tail"}, indent=2))
        print(record["stderr_tail"] or "(clean)")
        return 0
    seeds = list(range(args.seed, args.seed + args.cases))
    chunks = [(seeds[i::args.jobs * 16], args.seconds, args.wall, args.memory_gib) for i in range(args.jobs * 16)]
    start = time.monotonic()
    records: list[dict] = []
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for part in pool.imap_unordered(_worker, chunks):
            records += part
            failed = sum(1 for r in records if r["failures"])
            print(f"{len(records)}/{len(seeds)} cases, {failed} failed, {time.monotonic() - start:.0f} s",
                  file=sys.stderr, flush=True)
    summary = report(records, time.monotonic() - start, args)
    print(json.dumps(summary, indent=2))
    for record in sorted((r for r in records if r["failures"]), key=lambda r: r["seed"])[:20]:
        print(f"seed {record['seed']} {record['case']}: {record['failures']}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "failed": [r for r in records if r["failures"]]},
                                              indent=2))
    return 0 if not summary["failed_cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
