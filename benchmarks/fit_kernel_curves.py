"""Fit per-family kernel curves from public kernel measurements; write them as the project's data file.

    python benchmarks/fit_kernel_curves.py ../shared/kernels/kernel_measurements.csv \
        --out primus_ext/hardware/kernel_curves.yaml          # fit, print the fit table, write the curves
    python benchmarks/fit_kernel_curves.py KERNELS.csv         # fit and print only

The measurements are public benchmark results (cuDNN-frontend's SDPA benchmark on B200 / GB200 / H200, AITER and
Primus-Turbo on MI300X / MI355X, Composable Kernel baselines on MI355X from HipKittens' analysis, Primus-Turbo's grouped
GEMMs on MI300X); every row names its source, and the written file names the sources of each curve. Two curves, each a
few physically meaningful parameters per GPU family, fitted by least squares on log time
(``scipy.optimize.least_squares``), never one parameter per row:

* attention, forward and backward (``specs.system.AttentionCurve``): a flash kernel's time is
  ``2 (d_qk + d_v) b h s (keys + row_keys) / (P e(head dim)) + latency``: the matmul FLOPs over the unmasked keys plus
  ``row_keys`` key-equivalents of per-row work (the partly masked tiles on the diagonal, the per-row softmax rescale
  and the epilogue: why a 128-token sliding window runs at a few % of peak), at one efficiency per head dim measured
  (each head dim dispatches a kernel of its own), and a fixed latency per call. The backward counts 2.5x the
  forward's FLOPs (5 BMMs vs 2, the roofline's convention).
* grouped GEMM per precision and direction (``specs.system.GroupedCurve``): ``G`` GEMMs at an efficiency that falls as
  the rows per group shrink, ``e m / (m + m_half)``, plus a latency per call.

Dense GEMMs keep the roofline's law: the data holds dense GEMMs by size for MI300X / MI355X only.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

PEAK_TFLOPS = {  # dense BF16 / FP8 TFLOP/s of the boards measured: the profiles' datasheet figures
    "B200": (2250.0, 4500.0), "GB200": (2500.0, 5000.0), "H200": (989.4, 1978.9), "H100": (989.4, 1978.9),
    "H800": (989.4, 1978.9), "MI300X": (1307.4, 2614.9), "MI355X": (2516.6, 5033.2),
}
FAMILY = {"B200": "blackwell", "GB200": "blackwell", "H200": "hopper", "H100": "hopper", "H800": "hopper",
          "MI300X": "cdna3", "MI355X": "cdna4"}
BWD_FLOPS = 2.5
"""Backward / forward FLOPs of flash attention (5 BMMs vs 2), as in ``model.roofline.ATTENTION_BWD_FACTOR``."""

ATTENTION_SOURCES = {
    # (family) -> (source prefix, variant words that must appear): the kernel training runs call there
    "blackwell": ("NVIDIA/cudnn-frontend", ""),      # Transformer Engine's fused attention is cuDNN's
    "hopper": ("NVIDIA/cudnn-frontend", ""),
    "cdna3": ("AMD-AGI/Primus-Turbo", "flash_attn_func"),  # Primus-Turbo's BF16 flash attention (AITER)
    "cdna4": ("", ""),                                 # AITER asm (d 128) and Composable Kernel (d 64): below
}


MIN_SEQ = 2048
"""Shortest sequence fitted: training runs' per-rank sequences are 2k-128k (shared/validation); below 2k a kernel's
launch and partial waves dominate, which the training step never sees."""


@dataclass
class AttentionPoint:
    gpu: str
    family: str
    direction: str
    b: float
    s: float
    h: float
    d_qk: float
    d_v: float
    keys: float
    """Mean unmasked keys per query."""
    seconds: float
    source: str


def _num(text: str, key: str) -> float | None:
    m = re.search(rf"(?<![a-z_]){key}=(\d+)", text)
    return float(m.group(1)) if m else None


def mean_keys(s: float, variant: str) -> float:
    """Mean unmasked keys per query of a causal / sliding-window / full mask."""
    window = re.search(r"(?:sliding window|swa_window) (\d+)", variant)
    if window:
        w = float(window.group(1))
        return w - w * w / (2.0 * s) if w < s else s / 2.0
    if "non-causal" in variant:
        return s
    return s / 2.0 if "causal" in variant else s


def _attention_point(row: dict[str, str]) -> AttentionPoint | None:
    gpu = row["gpu"].split(" ")[0]
    family = FAMILY.get(gpu)
    if family is None or row["dtype"] != "bf16" or "deterministic" in row["variant"]:
        return None
    prefix, word = ATTENTION_SOURCES[family]
    src, variant, shape = row["source"], row["variant"], row["shape"]
    if family == "cdna4":  # what TE / Primus run on gfx950: AITER's asm kernels at d 128, CK at d 64
        if not (src.startswith("ROCm/aiter") or ("HipKittens" in src and "Composable Kernel" in variant)):
            return None
    elif not src.startswith(prefix) or word not in variant:
        return None
    elif family in ("blackwell", "hopper") and not re.search(r"cuDNN backend|CUDNN_ATTENTION|cuDNN \(cudnn", variant):
        return None  # the FlashAttention-2 rows of the same benchmark: not the kernel TE calls
    d_qk = _num(shape, "d_qk") or _num(shape, "d")
    d_v = _num(shape, "d_v") or d_qk
    b, s, h = _num(shape, "b"), _num(shape, "s"), _num(shape, "hq") or _num(shape, "h")
    bh = re.search(r"b\*hq=(\d+)", shape)
    if bh and (b is None or h is None):
        b, h = 1.0, float(bh.group(1))
    if None in (d_qk, b, s, h) or s < MIN_SEQ:
        return None
    keys = mean_keys(s, variant)
    direction = "fwd" if row["kernel"] == "attention_fwd" else "bwd"
    flops = 2.0 * (d_qk + d_v) * b * h * s * keys * (BWD_FLOPS if direction == "bwd" else 1.0)
    value = float(row["measured_value"])
    if row["unit"] == "ms":
        seconds = value / 1e3
    elif row["unit"] == "TFLOP/s" and not src.startswith(("NVIDIA/cudnn-frontend", "AMD-AGI/Primus-Turbo")):
        # AITER / HipKittens count causal FLOPs over the lower triangle and the backward as 2.5x: our convention
        seconds = flops / (value * 1e12)
    else:
        return None  # cuDNN's and Primus-Turbo's rows come in pairs: the ms row is used
    return AttentionPoint(gpu, family, direction, b, s, h, d_qk, d_v, keys, seconds, src.split(" ")[0])


def attention_seconds(p: AttentionPoint, e: float, row_keys: float, latency: float, peak: float) -> float:
    """The curve's time for one point (``model.roofline.curve_attention_seconds`` is the same law)."""
    work = 2.0 * (p.d_qk + p.d_v) * p.b * p.h * p.s * (p.keys + row_keys)
    if p.direction == "bwd":
        work *= BWD_FLOPS
    return work / (peak * 1e12 * e) + latency


def fit_attention(points: list[AttentionPoint], peaks: dict[str, float]) -> dict:
    """One family and direction: an efficiency per head dim measured (each head dim runs its own kernel: AITER's
    asm kernels at 128, Composable Kernel at 64, another path for MLA's 192 / 128 heads), and the per-row work
    ``row_keys`` and the launch ``latency_s`` shared by them; log-time least squares."""
    dims = sorted({int(p.d_qk) for p in points})
    index = {d: i for i, d in enumerate(dims)}

    def residual(x: np.ndarray) -> np.ndarray:
        row_keys, latency = x[-2:]
        return np.array([math.log(attention_seconds(p, x[index[int(p.d_qk)]], row_keys, latency, peaks[p.gpu])
                                  / p.seconds) for p in points])
    n = len(dims)
    fit = least_squares(residual, x0=[0.5] * n + [256.0, 1e-5],
                        bounds=([0.02] * n + [0.0, 0.0], [1.0] * n + [8192.0, 1e-3]))
    res = residual(fit.x)
    return {"efficiency_by_head_dim": {d: round(float(fit.x[index[d]]), 4) for d in dims},
            "row_keys": round(float(fit.x[-2]), 1), "latency_s": float(f"{fit.x[-1]:.3g}"),
            "points": len(points), "rms_log_error": round(float(np.sqrt(np.mean(res ** 2))), 4)}


@dataclass
class GroupedPoint:
    gpu: str
    family: str
    precision: str
    direction: str
    groups: float
    m: float
    """Rows (tokens) per group."""
    n: float
    k: float
    seconds: float


GROUPED_PRECISION = {"bf16": "bf16", "fp8 tensorwise": "fp8"}
"""The kernels' number formats -> the roofline's precision (per-tensor scaled FP8: TE's delayed / current recipes)."""


def _grouped_point(row: dict[str, str]) -> GroupedPoint | None:
    gpu = row["gpu"].split(" ")[0]
    family, precision = FAMILY.get(gpu), GROUPED_PRECISION.get(row["dtype"])
    src, variant, shape = row["source"], row["variant"], row["shape"]
    # Primus-Turbo's grouped GEMMs on MI300X, what Primus's MoE layers call there; not its January CK run ("before"),
    # nor the NVIDIA rows (DeepGEMM, CUTLASS variants: not Megatron's TE path) or MI355X's experimental HipKittens
    # kernel (one tuning workspace, forward only)
    if family != "cdna3" or precision is None or '"before"' in variant or not src.startswith("AMD-AGI/Primus-Turbo"):
        return None
    groups = _num(shape, "experts_per_gpu\\(B\\)") or _num(shape, "groups")
    m = _num(shape, "m_per_expert") or _num(shape, "m_per_group")
    n, k = _num(shape, "n"), _num(shape, "k")
    if None in (groups, m, n, k):
        return None
    if row["unit"] != "ms":
        return None  # Primus-Turbo's rows come in pairs: the ms row is used
    direction = "bwd" if "bwd" in variant else "fwd"
    return GroupedPoint(gpu, family, precision, direction, groups, m, n, k, float(row["measured_value"]) / 1e3)


def grouped_seconds(p: GroupedPoint, e: float, m_half: float, latency: float, peak: float) -> float:
    """``model.roofline``'s grouped-GEMM law: ``G`` GEMMs of ``m`` rows at an efficiency that falls as the rows per
    group shrink (partial tiles, too few tiles for the compute units), plus a fixed latency per call; the backward
    is the data-grad and weight-grad GEMMs (2x the forward's FLOPs)."""
    flops = 2.0 * p.groups * p.m * p.n * p.k * (2.0 if p.direction == "bwd" else 1.0)
    return flops / (peak * 1e12 * e * p.m / (p.m + m_half)) + latency


def grouped_curves(rows: list[dict[str, str]]) -> dict[str, dict[str, dict]]:
    groups: dict[tuple[str, str, str], list[GroupedPoint]] = defaultdict(list)
    for row in rows:
        if row["kernel"] == "grouped_gemm":
            p = _grouped_point(row)
            if p is not None:
                groups[(p.family, p.precision, p.direction)].append(p)
    out: dict[str, dict[str, dict]] = defaultdict(dict)
    for (family, precision, direction), points in sorted(groups.items()):
        def residual(x: np.ndarray, points: list[GroupedPoint] = points, precision: str = precision) -> np.ndarray:
            peak = {g: v[1] if precision == "fp8" else v[0] for g, v in PEAK_TFLOPS.items()}
            return np.array([math.log(grouped_seconds(p, *x, peak[p.gpu]) / p.seconds) for p in points])
        fit = least_squares(residual, x0=[0.5, 256.0, 2e-5], bounds=([0.02, 0.0, 0.0], [1.0, 65536.0, 1e-3]))
        res = residual(fit.x)
        out[family][f"{precision}_{direction}"] = {
            "efficiency": round(float(fit.x[0]), 4), "m_half": round(float(fit.x[1]), 1),
            "latency_s": float(f"{fit.x[2]:.3g}"), "points": len(points),
            "rms_log_error": round(float(np.sqrt(np.mean(res ** 2))), 4),
            "sources": ["AMD-AGI/Primus-Turbo"]}
    return dict(out)


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def kernel_curves(rows: list[dict[str, str]]) -> dict[str, dict[str, dict]]:
    groups: dict[tuple[str, str], list[AttentionPoint]] = defaultdict(list)
    for row in rows:
        if row["kernel"] in ("attention_fwd", "attention_bwd"):
            p = _attention_point(row)
            if p is not None:
                groups[(p.family, p.direction)].append(p)
    peaks = {g: v[0] for g, v in PEAK_TFLOPS.items()}
    out: dict[str, dict[str, dict]] = defaultdict(dict)
    for (family, direction), points in sorted(groups.items()):
        fit = fit_attention(points, peaks)
        fit["sources"] = sorted({p.source for p in points})
        out[family][direction] = fit
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernels", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--pin-profiles", type=Path, metavar="DIR",
                    help="write the profiles of the families in PIN_FAMILIES into DIR with their attention efficiency "
                         "pinned at the curves' reference value (run after --out wrote the curves it reads)")
    args = ap.parse_args(argv)
    rows = read_rows(args.kernels)
    curves = {"attention": kernel_curves(rows), "grouped_gemm": grouped_curves(rows)}
    for kind, families in curves.items():
        for family, dirs in families.items():
            for direction, fit in dirs.items():
                print(f"{kind:10s} {family:10s} {direction:4s} " + " ".join(
                    f"{k}={v}" for k, v in fit.items() if k != "sources"))
    if args.out:
        header = (f"# Kernel curves per GPU family, fitted by benchmarks/fit_kernel_curves.py on {date.today()}\n"
                  "# from the public measurements of shared/kernels/kernel_measurements.csv (sources per curve).\n"
                  "# Read by primus_ext/hardware/curves.py; the command is in the fitting script's docstring.\n")
        args.out.write_text(header + yaml.safe_dump(curves, sort_keys=True, width=120))
    if args.pin_profiles:
        for path in pin_profiles(args.pin_profiles):
            print(f"wrote {path}")
    return 0


PIN_FAMILIES = ("blackwell",)
"""Families whose ``Efficiency.attention`` the curves pin (``measured``) in their profiles before ``validate --fit``:
Hopper keeps its own H200 measurement (``benchmarks/kernels/h200-2026-12-04-sweep.json``, pinned by ``profile pin``);
the AMD boards take the curves' value in their own fit (``validate.amd.start_for``,
``benchmarks/amd_calibration.py``)."""


def pin_profiles(folder: Path) -> list[Path]:
    """Every profile of ``PIN_FAMILIES`` with its attention efficiency pinned at the shipped curves' reference value
    (causal, 128-wide heads, 4 096 tokens: ``model.kernel_curve.reference_efficiency``), citing the curves."""
    from primus_ext.hardware import family_profiles, load_gpu
    from primus_ext.hardware.kernels import KernelEfficiency, pin_measured
    from primus_ext.model.kernel_curve import reference_efficiency

    written: list[Path] = []
    for family in PIN_FAMILIES:
        gpu = load_gpu(family_profiles(family)[0])
        peak = gpu.peak_tflops("bf16")
        value = round(reference_efficiency(gpu.kernel_curves), 4)
        found = (KernelEfficiency(name="attention", value=value, measured=value * peak, peak=peak,
                                  what=f"the {family} attention curves of hardware/kernel_curves.yaml at causal, "
                                       f"128-wide heads, 4096 tokens, fwd+bwd ({gpu.kernel_curves.sources})"),)
        written += pin_measured(found, device=f"{family} (public kernel measurements)",
                                source="benchmarks/fit_kernel_curves.py", family=family, folder=folder)
    return written


if __name__ == "__main__":
    sys.exit(main())
