"""Tune every Primus recipe, then ask Primus and Megatron-LM themselves whether they accept the tuned file.

    python benchmarks/tuned_recipes_accepted.py --primus /work/.mirror/AMD-AGI+Primus/repo \\
        --megatron /work/.mirror/NVIDIA+Megatron-LM/repo [--nodes 1,2,4] [--platforms MI300X,MI325X] \\
        [--strategy exhaustive] [--jobs 2] [--limit N] [--json OUT]

``--primus`` / ``--megatron``: a checkout, or a git directory (bare mirrors work: the files are extracted at
``--primus-ref`` (HEAD) and at the Megatron-LM commit that Primus pins in ``third_party/Megatron-LM``, unless
``--megatron-ref`` says otherwise). For every experiment ``examples/megatron/configs/<platform>/*.yaml`` and
every node count:

1. ``primus-ext tune RECIPE --cluster <platform> --nodes N --out TUNED`` (next to the recipe, so Primus finds its
   presets). Exit 0 writes a tuned file; exit 2 is a refusal with a sentence (an architecture we do not model, no
   legal configuration, the recipe's own error); anything else is a crash;
2. the recipe and the tuned file go through ``benchmarks/upstream_validate_child.py``: Primus's config loader,
   ``MegatronArgBuilder``, Primus's setup + build_args patches, Megatron-LM's ``validate_args`` and Primus's
   ``validate_args_on_rocm``, and Primus's config schema check (``primus/core/config/schema_check.py``), in the
   launch environment Primus's scripts export. Only the GPU architecture query is stubbed.

Prints one line per (recipe, nodes) that is not "tuned and accepted", then the counts; exit status 1 when a tune
crashed or a tuned file was refused where its recipe was accepted. Runs on CPU with what ``pip install -e .``
installed; Megatron-LM's GPU-only imports are stubbed as in ``benchmarks/upstream_gates.py``. Nothing upstream
is copied into this repository.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import upstream_gates as gates  # the extraction and CPU stubs are shared

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "upstream_validate_child.py"
TUNE_TIMEOUT_S = 600


@dataclass
class Row:
    recipe: str
    nodes: int
    tune: str  # "tuned" | "unchanged" | "refused" | "crashed"
    tune_s: float
    tune_message: str
    original: str  # "accepted" | refusal text
    tuned: str  # "accepted" | refusal text | "" (no tuned file)
    schema_unknown: list[str]
    changed: list[str]


def _tree(path: str, ref: str | None, work: Path, name: str, keep) -> Path:
    """A checkout as it is (no ``ref``), else the files of ``ref`` (HEAD) extracted from the git directory."""
    if ref is None and (Path(path) / ".git").exists():
        return Path(path).resolve()
    dest = work / name
    missing = gates.extract(gates.git_dir(path), ref or "HEAD", dest, keep)
    if missing:
        print(f"{name}: {missing} blob(s) absent from the mirror (its largest files; not read here)", file=sys.stderr)
    return dest


def _changed_keys(before: Path, after: Path) -> list[str]:
    old = before.read_text().splitlines()
    keys = []
    for line in after.read_text().splitlines():
        if line not in old and ":" in line and not line.lstrip().startswith("#"):
            keys.append(line.split(":", 1)[0].strip())
    return keys


class Checker:
    """One long-lived child per worker (imports once, ~5 s); requests are answered in order."""

    def __init__(self, primus: Path, env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, str(CHILD), str(primus)], cwd=primus, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def check(self, path: Path, world: int) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"path": str(path), "world": world}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            return {"accepted": False, "error": "validator child exited", "schema_unknown": None}
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _verdict(result: dict) -> str:
    return "accepted" if result.get("accepted") else f"{result.get('stage')}: {result.get('error')}"


def run_one(recipe: Path, nodes: int, platform: str, strategy: str | None, checker: Checker, env: dict[str, str],
            primus: Path) -> Row:
    gpus = 8  # MI300X / MI325X platforms: 8 GPUs a node
    tuned = recipe.with_name(f"{recipe.stem}.tuned-n{nodes}.yaml")
    cmd = ["primus-ext", "tune", str(recipe), "--cluster", platform.lower(), "--nodes", str(nodes), "--out",
           str(tuned)] + (["--strategy", strategy] if strategy else [])
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=primus, env=env, capture_output=True, text=True, timeout=TUNE_TIMEOUT_S,
                              check=False)
        code, text = done.returncode, (done.stderr.strip() or done.stdout.strip())
    except subprocess.TimeoutExpired:
        code, text = 124, f"timed out after {TUNE_TIMEOUT_S} s"
    seconds = time.perf_counter() - start
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    message = next((line for line in lines if line.startswith("- ")),  # the first problem listed, else the last line
                   next((line for line in lines if line.startswith("error")), lines[-1] if lines else ""))
    original = checker.check(recipe, nodes * gpus)
    status = ("tuned" if tuned.exists() else "unchanged") if code == 0 else "refused" if code == 2 else "crashed"
    verdict, unknown, changed = "", [], []
    if status == "unchanged":  # the recipe is already the tuned configuration: nothing written
        verdict = _verdict(original)
    elif status == "tuned":
        result = checker.check(tuned, nodes * gpus)
        verdict, changed = _verdict(result), _changed_keys(recipe, tuned)
        before = set(original.get("schema_unknown") or ())  # findings the recipe itself has are not ours
        unknown = [k for k in result.get("schema_unknown") or () if k not in before]
    return Row(recipe=str(recipe.relative_to(primus)), nodes=nodes, tune=status, tune_s=round(seconds, 2),
               tune_message=message[:200] if status != "tuned" else "", original=_verdict(original),
               tuned=verdict, schema_unknown=unknown, changed=changed)


def counts(rows: Sequence[Row]) -> dict[str, int]:
    c: Counter[str] = Counter()
    for r in rows:
        c["runs"] += 1
        c[f"tune {r.tune}"] += 1
        c["recipe accepted"] += r.original == "accepted"
        if r.tune in ("tuned", "unchanged"):
            c["tuned file accepted"] += r.tuned == "accepted"
            c["tuned file refused"] += r.tuned != "accepted"
            c["tuned refused, recipe accepted"] += r.tuned != "accepted" and r.original == "accepted"
            c["tuned file schema findings"] += bool(r.schema_unknown)
    return dict(c)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--primus", required=True, help="Primus checkout or git directory")
    p.add_argument("--megatron", required=True, help="Megatron-LM checkout or git directory")
    p.add_argument("--primus-ref", default=None, help="ref to extract from a Primus git directory (HEAD)")
    p.add_argument("--megatron-ref", default=None, help="Megatron-LM ref (default: the commit Primus pins)")
    p.add_argument("--platforms", default="MI300X,MI325X")
    p.add_argument("--nodes", default="1,2,4", help="node counts, comma-separated")
    p.add_argument("--strategy", default=None, help="tuner strategy (default: the tuner's own)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--limit", type=int, default=0, help="first N recipes only (0: all)")
    p.add_argument("--match", default="", help="only recipes whose file name contains this")
    p.add_argument("--json", default=None, help="write the rows and counts here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tuned-accepted-") as tmp:
        work = Path(tmp)
        primus = _tree(args.primus, args.primus_ref, work, "primus",
                       lambda p: p.startswith(("primus/", "examples/megatron/", "tools/ci/")))
        pin = gates.primus_pin(gates.git_dir(args.primus))
        if args.megatron_ref is None and (Path(args.megatron) / ".git").exists():
            pin = None  # the user's own checkout, as it is
        megatron = _tree(args.megatron, args.megatron_ref or pin, work, "megatron",
                         lambda p: p.startswith("megatron/") or ("/" not in p and p.endswith(".py")))
        link = primus / "third_party" / "Megatron-LM"
        if not link.exists():  # where Primus's schema check reads Megatron-LM's arguments.py
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(megatron)
        stubs = work / "stubs"
        stubs.mkdir()
        (stubs / "sitecustomize.py").write_text(gates.SITECUSTOMIZE)
        env = gates.environment(primus, stubs, work / "cache")
        env["PYTHONPATH"] = os.pathsep.join([str(primus), str(megatron), str(stubs)])
        tune_env = {**env, "PYTHONPATH": ""}
        recipes = [r for plat in args.platforms.split(",")
                   for r in sorted((primus / "examples/megatron/configs" / plat).glob("*.yaml"))
                   if args.match in r.name and ".tuned-" not in r.name]
        recipes = recipes[:args.limit] if args.limit else recipes
        plan = [(r, int(n)) for r in recipes for n in args.nodes.split(",")]
        print(f"{len(recipes)} recipes x nodes {args.nodes}: {len(plan)} tunes "
              f"(Primus {primus}, Megatron-LM {args.megatron_ref or pin or megatron})", file=sys.stderr)
        jobs = max(1, args.jobs)
        checkers = [Checker(primus, env) for _ in range(jobs)]
        rows: list[Row] = []
        start = time.perf_counter()

        def work_on(index: int) -> list[Row]:
            out = []
            for recipe, nodes in plan[index::jobs]:
                row = run_one(recipe, nodes, recipe.parent.name, args.strategy, checkers[index], tune_env, primus)
                out.append(row)
                done = len(rows) + len(out)
                print(f"[{done}/{len(plan)}] {row.recipe} n{nodes}: {row.tune} {row.tuned or row.tune_message}"[:200],
                      file=sys.stderr)
            return out

        with ThreadPoolExecutor(jobs) as pool:
            for part in pool.map(work_on, range(jobs)):
                rows.extend(part)
        for c in checkers:
            c.close()
    rows.sort(key=lambda r: (r.recipe, r.nodes))
    for r in rows:
        if r.tune == "crashed" or (r.tune in ("tuned", "unchanged") and r.tuned != "accepted") or r.schema_unknown:
            print(f"{r.recipe} n{r.nodes}: tune {r.tune} {r.tune_message} | recipe: {r.original} | tuned: "
                  f"{r.tuned} | schema: {r.schema_unknown} | changed {r.changed}")
    summary = counts(rows)
    listed = ", ".join(f"{k} {v}" for k, v in summary.items())
    print(f"{len(rows)} runs in {time.perf_counter() - start:.0f} s: {listed}")
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": summary, "rows": [asdict(r) for r in rows]}, indent=1))
    bad = summary.get("tune crashed", 0) + summary.get("tuned refused, recipe accepted", 0)
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except gates.UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
