"""Per GPU family and kernel class: what the kernel curves price against the roofline's laws they replace.

    python benchmarks/kernel_curve_table.py

For each shipped family with curves (``primus_ext/hardware/kernel_curves.yaml``), the fraction of the dense BF16
peak (FP8 peak for FP8 GEMMs) that the projection gives a kernel at shapes the validation rows and the issue's cases
train at, on the curves and on the laws the roofline uses without them (attention: ``Efficiency.attention`` x the
head-dim law, backward 2.5x forward; grouped GEMM: one dense-law GEMM per expert), at the same profile.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from primus_ext.hardware import load_gpu  # noqa: E402
from primus_ext.model import kernel_curve  # noqa: E402
from primus_ext.model.roofline import core_attention_seconds, gemm_seconds  # noqa: E402

ATTENTION = (  # label, head dim (query / key), width (QK + V), keys per query at 4 096 tokens
    ("causal, 128-wide heads", 128, 256, 2048.0),
    ("causal, 64-wide heads", 64, 128, 2048.0),
    ("window 128, 64-wide heads (GPT-OSS)", 64, 128, 128 - 128 * 128 / (2 * 4096)),
    ("causal, MLA 192 / 128", 192, 320, 2048.0),
)
GROUPED = (  # label, local experts, tokens per expert, N, K (the expert's fc1, gated)
    ("DeepSeek-V2-Lite fc1, 8 experts x 4 096 tokens", 8, 4096, 2 * 1408, 2048),
    ("Qwen3-30B-A3B fc1, 16 experts x 1 024 tokens", 16, 1024, 2 * 768, 2048),
)
GPUS = ("b200", "h100", "mi300x", "mi355x")


def attention_fraction(gpu, head_dim: int, width: int, keys: float) -> float:
    rows = 4096 * 64.0
    fwd, bwd = core_attention_seconds(rows, width, keys, head_dim, gpu)
    return 2.0 * rows * width * keys * 3.5 / ((fwd + bwd) * gpu.peak_tflops("bf16") * 1e12)


def grouped_fraction(gpu, precision: str, experts: int, m: int, n: int, k: int) -> tuple[float, float] | None:
    """(forward, backward) fraction of the precision's peak on the family's curve, or ``None`` without one."""
    curves = gpu.kernel_curves
    fwd_c = curves.grouped_curve(precision, "fwd") if curves else None
    bwd_c = curves.grouped_curve(precision, "bwd") if curves else None
    if fwd_c is None or bwd_c is None:
        return None
    peak = gpu.peak_tflops(precision) * 1e12
    flops = 2.0 * experts * m * n * k
    fwd = kernel_curve.grouped_seconds(fwd_c, experts, m, n, k, peak, backward=False)
    bwd = kernel_curve.grouped_seconds(bwd_c, experts, m, n, k, peak, backward=True)
    return flops / (fwd * peak), 2 * flops / (bwd * peak)


def main() -> int:
    print("| GPU | kernel | curves | law | curves / law |")
    print("|---|---|---:|---:|---:|")
    for name in GPUS:
        gpu = load_gpu(name)
        plain = replace(gpu, kernel_curves=None)
        for label, d, width, keys in ATTENTION:
            on, off = attention_fraction(gpu, d, width, keys), attention_fraction(plain, d, width, keys)
            print(f"| {name} | attention fwd+bwd, 4 096 tokens, {label} | {on:.3f} | {off:.3f} | {on / off:.2f} |")
        for precision in ("bf16", "fp8"):
            for label, e, m, n, k in GROUPED:
                found = grouped_fraction(gpu, precision, e, m, n, k)
                if found is None:
                    continue
                peak = plain.peak_tflops(precision) * 1e12
                law = 2.0 * e * m * n * k / (gemm_seconds(m, n, k, plain, precision, count=e) * peak)
                for direction, value in zip(("fwd", "bwd"), found, strict=True):
                    print(f"| {name} | grouped GEMM {precision} {direction}, {label} | {value:.3f} | {law:.3f} | "
                          f"{value / law:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
