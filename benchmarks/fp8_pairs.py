"""FP8 / BF16 speed-up on published rows of the same layout: measured against projected.

    primus-ext validate V --json validation.json          # or --cv: the held-out projections
    python benchmarks/fp8_pairs.py validation.json [--measurements ../shared/validation/measured_throughput.csv]

Pairs every FP8-family row (FP8, MXFP8, torchao float8 tensorwise / rowwise) with the BF16 row(s) of the same model,
GPU, GPU count, parallel layout, micro / global batch and sequence in ``measured_throughput.csv`` (several BF16 rows of
one layout: their mean), and prints the measured and projected throughput ratios and how far apart they are
(issue 52: "on FP8 / BF16 rows of the same layout the projected ratio within 8 % of the measured one").
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYOUT = ("model", "gpu", "num_gpus", "tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "gbs", "seq_len")


def pairs(measurements: Path, validation: Path) -> list[dict]:
    with measurements.open(newline="") as f:
        rows = list(csv.DictReader(f))
    projected = {r["index"]: r for r in json.loads(validation.read_text())["rows"]
                 if r.get("projected_tokens_per_s_per_gpu")}
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[tuple(r[k] for k in LAYOUT)].append(i)
    out = []
    for layout, members in groups.items():
        bf16 = [i for i in members if rows[i]["precision"].upper() == "BF16" and i in projected]
        if not bf16:
            continue
        m_bf16 = statistics.mean(projected[i]["measured_tokens_per_s_per_gpu"] for i in bf16)
        p_bf16 = statistics.mean(projected[i]["projected_tokens_per_s_per_gpu"] for i in bf16)
        for i in members:
            if "FP8" in rows[i]["precision"].upper() and i in projected:
                measured = projected[i]["measured_tokens_per_s_per_gpu"] / m_bf16
                proj = projected[i]["projected_tokens_per_s_per_gpu"] / p_bf16
                out.append({"model": layout[0], "gpu": layout[1], "gpus": layout[2], "precision": rows[i]["precision"],
                            "measured_ratio": measured, "projected_ratio": proj,
                            "off_pct": 100.0 * (proj / measured - 1.0)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("validation", type=Path, help="a `primus-ext validate --json` document")
    ap.add_argument("--measurements", type=Path,
                    default=REPO.parent / "shared" / "validation" / "measured_throughput.csv")
    args = ap.parse_args(argv)
    found = pairs(args.measurements, args.validation)
    for p in found:
        print(f"{p['model']:16s} {p['gpu']:6s} {p['gpus']:>5s} {p['precision']:34s} measured x{p['measured_ratio']:.3f}"
              f"  projected x{p['projected_ratio']:.3f}  ({p['off_pct']:+.1f} %)")
    if found:
        offs = sorted(abs(p["off_pct"]) for p in found)
        print(f"{len(found)} pairs: |projected / measured ratio - 1| median {statistics.median(offs):.1f} %, "
              f"max {offs[-1]:.1f} %, within 8 %: {sum(o <= 8 for o in offs)} of {len(offs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
