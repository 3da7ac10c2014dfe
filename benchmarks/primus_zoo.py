"""The model zoo's coverage: which Primus MI300X / MI355X Megatron recipes are refused for their architecture.

Run from the repository root, with a Primus git directory (a clone or a bare mirror)::

    python benchmarks/primus_zoo.py /work/.mirror/AMD-AGI+Primus/repo            # Primus HEAD
    python benchmarks/primus_zoo.py PRIMUS_GIT --rev v26.5.1 --gpus MI300X,MI355X

The recipes and Primus's presets (``examples/megatron/configs/<GPU>`` and ``primus/configs``) are extracted at
``--rev`` with ``git archive`` to a temporary folder, and each recipe goes through ``primus-ext project`` as a user
would run it (``benchmarks/primus_recipes.py``'s ``run_cli`` / ``classify``: ``--cluster`` from the GPU folder, no
other flag). A recipe refused for its node count alone is run again at the count its refusal names (``--nodes N``:
issue 54 counts a recipe "with the node count its layout needs"). Printed: the count refused for their architecture,
each with its refusal sentence, the count of every other class, and what the re-runs at the needed node count gave.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from primus_recipes import CLUSTERS, classify, run_cli

ARCHITECTURE = "refused: architecture"


def extract(git_dir: Path, rev: str, gpus: list[str], into: Path) -> list[Path]:
    """``git archive REV`` of the GPU folders' Megatron recipes and ``primus/configs`` into ``into``; the recipes."""
    folders = [f"examples/megatron/configs/{gpu}" for gpu in gpus] + ["primus/configs"]
    tar = subprocess.run(["git", "-C", str(git_dir), "archive", "--format=tar", rev, *folders],
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(into, filter="data")
    return [p for gpu in gpus for p in sorted((into / "examples/megatron/configs" / gpu).rglob("*.yaml"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("primus_git", type=Path, help="a Primus git directory (clone or bare mirror)")
    parser.add_argument("--rev", default="HEAD", help="the Primus revision to read (default HEAD)")
    parser.add_argument("--gpus", default="MI300X,MI355X", help="GPU folders under examples/megatron/configs")
    args = parser.parse_args(argv)
    gpus = args.gpus.split(",")
    counts: Counter[str] = Counter()
    rerun: Counter[str] = Counter()
    refused: list[tuple[str, str]] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        recipes = extract(args.primus_git, args.rev, gpus, root)
        for path in recipes:
            gpu = path.relative_to(root / "examples/megatron/configs").parts[0]
            base = ["project", str(path), "--cluster", CLUSTERS.get(gpu, gpu.lower())]
            cls, detail = classify(*run_cli(base))
            counts[cls] += 1
            nodes = re.search(r"--nodes (\d+)", detail) if cls == "refused: needs more nodes" else None
            if nodes:  # at the node count its layout needs
                again, detail = classify(*run_cli([*base, "--nodes", nodes.group(1)]))
                rerun[again] += 1
                cls = again if again == ARCHITECTURE else cls
            if cls == ARCHITECTURE:
                refused.append((str(path.relative_to(root / "examples/megatron/configs")), detail))
    for name, detail in refused:
        print(f"{name}  {detail.split(': primus-ext projects')[0][:140]}")
    print(f"\n{len(recipes)} Primus Megatron recipes ({args.gpus}) at {args.rev}, {time.perf_counter() - start:.0f} s: "
          f"{counts[ARCHITECTURE]} refused for their architecture")
    for cls, n in sorted(counts.items()):
        print(f"  {cls:26s} {n:4d}")
    if rerun:
        print("  re-run at the node count the refusal names: "
              + ", ".join(f"{v} {k}" for k, v in sorted(rerun.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
