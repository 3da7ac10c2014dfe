"""The issue-52 analyses of the eleventh session that no other benchmark prints (benchmarks/RESULTS.md, "Every input
surface, and kernels tried"):

    primus-ext validate V --json v.json
    python benchmarks/issue52_findings.py rows v.json      # GB200 EP 64 on 64 GPUs against the other rows; the
                                                           # log error's slope with the GPU count per group
    python benchmarks/issue52_findings.py grouped          # GB200 grouped / dense GEMMs: TE's suite averages against
                                                           # the shipped law over Primus-Turbo's suite shapes

``grouped`` reads ``../shared/kernels/kernel_measurements.csv``: the GB200 rows are suite averages; the suites' shapes
are the MI300X per-shape Primus-Turbo rows (their means match MI300X's own averages to within 3 %).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
GB200_AVERAGES = {  # (forward, backward) TFLOP/s, shared/kernels rows gemm_*_avg / grouped_gemm_*_avg, NVIDIA TE
    "bf16": {"dense": (1434.4, 1310.2), "grouped": (1133.2, 932.0)},
    "fp8": {"dense": (2081.9, 2204.1), "grouped": (992.7, 1223.5)},  # FP8 tensorwise
}


def rows(validation: Path, measurements: Path) -> None:
    with measurements.open(newline="") as f:
        table = list(csv.DictReader(f))
    doc = json.loads(validation.read_text())
    err = {r["index"]: r["error_pct"] for r in doc["rows"] if r.get("error_pct") is not None}
    gb200 = [(i, r) for i, r in enumerate(table) if r["gpu"] == "GB200" and i in err]
    ep64 = [err[i] for i, r in gb200 if r["ep"] == "64" and r["num_gpus"] == "64"]
    other = [err[i] for i, r in gb200 if not (r["ep"] == "64" and r["num_gpus"] == "64")]
    models = {r["model"] for i, r in gb200 if r["ep"] == "64" and r["num_gpus"] == "64"}
    b200 = [err[i] for i, r in enumerate(table) if r["gpu"] == "B200" and r["model"] in models and i in err
            and r["ep"] not in ("", "1")]
    print(f"GB200, EP 64 on 64 GPUs: {len(ep64)} rows, error {min(ep64):+.1f} .. {max(ep64):+.1f} %, "
          f"median {statistics.median(ep64):+.1f} %")
    print(f"GB200, the other rows: {len(other)} rows, median {statistics.median(other):+.1f} %")
    print(f"B200 rows of {', '.join(sorted(models))} with EP > 1: {len(b200)} rows, {min(b200):+.1f} .. "
          f"{max(b200):+.1f} %")
    groups: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in doc["rows"]:
        if r.get("error_pct") is not None:
            groups[(r["model"], r["gpu"], r["precision"])].append(
                (math.log2(r["num_gpus"]), math.log1p(r["error_pct"] / 100)))
    slopes = [statistics.linear_regression(*zip(*points, strict=True)).slope
              for points in groups.values() if len({x for x, _ in points}) >= 2]
    print(f"log error per doubling of the GPU count, {len(slopes)} groups at two or more sizes: median "
          f"{statistics.median(slopes):+.3f}")


def _num(text: str, key: str) -> float:
    found = re.search(key + r"=(\d+)", text)
    if found is None:
        raise ValueError(f"no {key} in {text!r}")
    return float(found.group(1))


def grouped(kernels: Path) -> None:
    from primus_ext.hardware import load_gpu
    from primus_ext.model.roofline import gemm_seconds

    dense, groups = [], []
    with kernels.open(newline="") as f:
        for r in csv.DictReader(f):
            if r["gpu"] != "MI300X" or r["dtype"] != "bf16" or r["unit"] != "TFLOP/s":
                continue
            if r["kernel"] == "gemm":
                dense.append((_num(r["shape"], "m"), _num(r["shape"], "n"), _num(r["shape"], "k")))
            elif r["kernel"] == "grouped_gemm" and "optimized" in r["source"] and "fwd" in r["variant"]:
                s = r["shape"]
                groups.append((_num(s, r"experts_per_gpu\(B\)"), _num(s, "m_per_expert"), _num(s, "n"), _num(s, "k")))
    gpu = load_gpu("gb200")
    print(f"suites: {len(dense)} dense shapes, {len(groups)} grouped shapes (MI300X Primus-Turbo rows)")
    for precision, measured in GB200_AVERAGES.items():
        law_dense = statistics.mean(2 * m * n * k / gemm_seconds(m, n, k, gpu, precision, recipe="tensorwise") / 1e12
                                    for m, n, k in dense)
        law_grouped = statistics.mean(2 * g * m * n * k / gemm_seconds(m, n, k, gpu, precision, recipe="tensorwise",
                                                                       count=g) / 1e12 for g, m, n, k in groups)
        ratio = [measured["grouped"][i] / measured["dense"][i] for i in (0, 1)]
        residual = [r / (law_grouped / law_dense) for r in ratio]
        print(f"{precision}: grouped / dense measured {ratio[0]:.3f} fwd, {ratio[1]:.3f} bwd; the law "
              f"{law_grouped / law_dense:.3f}; residual grouped factor {residual[0]:.3f} fwd, {residual[1]:.3f} bwd")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    r = sub.add_parser("rows", help="GB200 EP 64 rows and the scale slope from a validate --json")
    r.add_argument("validation", type=Path)
    r.add_argument("--measurements", type=Path, default=SHARED / "validation" / "measured_throughput.csv")
    g = sub.add_parser("grouped", help="GB200 grouped / dense GEMMs against the shipped law")
    g.add_argument("--kernels", type=Path, default=SHARED / "kernels" / "kernel_measurements.csv")
    args = parser.parse_args()
    if args.what == "rows":
        rows(args.validation, args.measurements)
    else:
        grouped(args.kernels)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
