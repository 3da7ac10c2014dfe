"""Two ``primus-ext validate --json`` documents compared row by row (issue 54 part 4: the validation path through a
user's recipe resolve must give every row the figure it had).

    python benchmarks/validation_rows_diff.py before.json after.json

Prints each row whose projected tokens/s/GPU, measured value or skip reason differs, then the counts: identical,
changed, newly skipped, newly projected. Exit code 1 when any row differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _rows(path: str) -> dict[int, dict]:
    return {row["index"]: row for row in json.loads(Path(path).read_text())["rows"]}


def compare(before: dict[int, dict], after: dict[int, dict]) -> dict[str, list[str]]:
    """Row differences by kind (``identical`` holds the unchanged rows' indices)."""
    out: dict[str, list[str]] = {"identical": [], "changed": [], "newly skipped": [], "newly projected": [],
                                 "missing": []}
    for index, old in sorted(before.items()):
        new = after.get(index)
        if new is None:
            out["missing"].append(f"#{index}")
            continue
        old_p, new_p = old["projected_tokens_per_s_per_gpu"], new["projected_tokens_per_s_per_gpu"]
        label = f"#{index} {old['model']} {old['gpu']} x{old['num_gpus']} {old['precision']}"
        if old_p is not None and new_p is None:
            out["newly skipped"].append(f"{label}: {new['skipped_reason']}")
        elif old_p is None and new_p is not None:
            out["newly projected"].append(f"{label}: {new_p:.1f} (was skipped: {old['skipped_reason']})")
        elif old_p != new_p or old["measured_tokens_per_s_per_gpu"] != new["measured_tokens_per_s_per_gpu"] or \
                old["skipped_reason"] != new["skipped_reason"]:
            out["changed"].append(f"{label}: {old_p} -> {new_p}" + (
                f" ({100 * (new_p / old_p - 1):+.4f} %)" if old_p and new_p else "")
                + (f"; reason {old['skipped_reason']!r} -> {new['skipped_reason']!r}"
                   if old["skipped_reason"] != new["skipped_reason"] else ""))
        else:
            out["identical"].append(f"#{index}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    found = compare(_rows(argv[0]), _rows(argv[1]))
    for kind, lines in found.items():
        if kind != "identical":
            for line in lines:
                print(f"{kind}: {line}")
    print(", ".join(f"{len(lines)} {kind}" for kind, lines in found.items()))
    return 0 if len(found["identical"]) == len(_rows(argv[0])) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
