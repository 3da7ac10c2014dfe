"""Fuzz the CLI with mutated shipped recipes: every case exits 0 / 2 / 3 / 4, without a traceback, within its bounds.

    python benchmarks/fuzz_recipes.py --cases 5000 --jobs 2            # the RESULTS.md figures
    python benchmarks/fuzz_recipes.py --replay 1234                    # one case again, its stderr shown

Each case i (seed ``--seed`` + i) takes a shipped recipe, mutates it (``tests/cli/recipe_mutations.py``: types and
sizes of validated keys, unicode, YAML alias chains, layouts, extreme batch sizes, templates, truncation, raw
bytes, command-line overrides) and runs ``recipe show``, ``project`` or ``project --memory-only`` through
``primus_ext.cli.main`` in a forked child (warm imports), its address space capped at the parent's plus
``--memory-gib``, over ``--seconds`` of CPU time (killed at 4x that of wall-clock time). Printed: the counts per
exit code, tracebacks, cases over the time bound, cases that hit the memory bound (MemoryError), the slowest case
and the largest memory growth.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "cli"))

from recipe_mutations import case_argv, mutate, run_forked  # noqa: E402


def run_case(seed: int, seconds: float, memory_gib: float, folder: str) -> dict:
    rng = random.Random(seed)
    name, text, extra = mutate(rng)
    path = Path(folder) / f"case{seed}.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    argv = case_argv(rng, str(path), extra)
    out = run_forked(argv, limit_s=seconds, limit_bytes=int(memory_gib * 2**30), workdir=folder)
    path.unlink(missing_ok=True)
    return {"seed": seed, "recipe": name, "command": argv[0] if argv[0] != "recipe" else "recipe show",
            "exit": out.exit_code, "seconds": out.seconds, "cpu_s": out.cpu_s, "peak_bytes": out.peak_bytes,
            "traceback": out.traceback, "timed_out": out.timed_out, "memory_error": out.over_memory,
            "stderr_tail": "" if out.clean else out.stderr[-1500:]}


def _worker(args: tuple[list[int], float, float]) -> list[dict]:
    seeds, seconds, memory_gib = args
    import primus_ext.cli  # warm imports before forking the cases
    import primus_ext.projection
    import primus_ext.recipe  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="primus-ext-fuzz-") as folder:
        return [run_case(seed, seconds, memory_gib, folder) for seed in seeds]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="CPU-time bound per case (default 5; killed at 4x that of wall-clock time)")
    parser.add_argument("--memory-gib", type=float, default=1.0, help="memory bound per case (default 1 GiB)")
    parser.add_argument("--replay", type=int, metavar="SEED", help="run one case and show its stderr")
    parser.add_argument("--json", metavar="OUT", help="write every case's record")
    args = parser.parse_args()
    if args.replay is not None:
        record = _worker(([args.replay], args.seconds, args.memory_gib))[0]
        print(json.dumps({k: v for k, v in record.items() if k != "stderr_tail"}, indent=2))
        print(record["stderr_tail"] or "(clean)")
        return 0
    seeds = list(range(args.seed, args.seed + args.cases))
    chunks = [(seeds[i::args.jobs * 8], args.seconds, args.memory_gib) for i in range(args.jobs * 8)]
    start = time.monotonic()
    records: list[dict] = []
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for part in pool.imap_unordered(_worker, chunks):
            records += part
            print(f"  {len(records)}/{args.cases} cases, {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
    wall = time.monotonic() - start
    exits = Counter(str(r["exit"]) for r in records)
    bad = [r for r in records if r["traceback"] or r["timed_out"] or r["exit"] not in (0, 2, 3, 4)]
    slowest = max(records, key=lambda r: r["seconds"])
    largest = max(records, key=lambda r: r["peak_bytes"])
    print(f"cases: {len(records)} in {wall:.0f} s ({args.jobs} jobs); bounds {args.seconds:g} s, "
          f"{args.memory_gib:g} GiB per case")
    print(f"exit codes: {dict(sorted(exits.items()))}")
    print(f"by command: {dict(Counter(r['command'] for r in records))}")
    print(f"tracebacks: {sum(r['traceback'] for r in records)}; over the time bound: "
          f"{sum(r['timed_out'] for r in records)}; at the memory bound (MemoryError): "
          f"{sum(r['memory_error'] for r in records)}")
    print(f"seconds per case: median {statistics.median(r['seconds'] for r in records):.3f}, max "
          f"{slowest['seconds']:.2f} (seed {slowest['seed']}, {slowest['command']})")
    print(f"largest memory growth: {largest['peak_bytes'] / 2**20:.0f} MiB (seed {largest['seed']})")
    for r in bad[:10]:
        print(f"--- seed {r['seed']} ({r['recipe']}, {r['command']}): exit {r['exit']}\n{r['stderr_tail']}")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
