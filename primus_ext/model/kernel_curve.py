"""Kernels' time on a GPU family's kernel curves: fused attention (``specs.system.AttentionCurve``) and grouped
GEMMs (``GroupedCurve``).

    >>> seconds(curve, rows=4096 * 32, width=256, keys=2048, head_dim=128, peak_flops=2.5e15)

A curve is fitted to public kernel measurements (``benchmarks/fit_kernel_curves.py``): per query row, the matmul
work over the unmasked keys plus ``row_keys`` key-equivalents of per-row work, at the efficiency of the kernel the
head dim dispatches to, plus a fixed latency per call. The per-row work is why a 128-token sliding window runs at a
few % of peak (cuDNN on GB200: 7 % at window 128, 26 % at 1 024, ~50 % causal at 8k; shared/kernels) while the FLOP
count alone would call it cheap. Pure and torch-free.
"""

from __future__ import annotations

from primus_ext.model.rank_shape import RankShape
from primus_ext.specs.system import AttentionCurve, GPUSpec, GroupedCurve, KernelCurves

BWD_FLOPS = 2.5
"""Backward / forward matmul FLOPs of flash attention (FlashAttention-2, Dao 2023, sec. 3: 5 BMMs vs 2)."""
HALF_HEAD_DIM = 96.0
"""Head dim at which the softmax's cost per score equals the matmuls' (``roofline.ATTENTION_HALF_HEAD_DIM``, from
FlashAttention-3's head-dim scaling): carries a measured head dim's efficiency to an unmeasured one."""
REFERENCE_HEAD_DIM = 128
REFERENCE_TOKENS = 4096
"""The shape ``Efficiency.attention`` is stated at: causal, 128-wide heads, 4 096 tokens (``hardware.kernels``)."""


def _law(head_dim: float) -> float:
    return head_dim / (head_dim + HALF_HEAD_DIM)


def _measured(curve: AttentionCurve, head_dim: float) -> float | None:
    for d, e in zip(curve.head_dims, curve.efficiencies, strict=True):
        if d == head_dim:
            return e
    return None


def efficiency(curve: AttentionCurve, head_dim: float, other: AttentionCurve | None = None) -> float:
    """The curve's efficiency at ``head_dim``: measured there; else the other direction's ratio between ``head_dim``
    and a head dim both directions measured (the same kernel family both ways: MI355X's backward was measured at 128
    only, its forward at 64 and 128); else the nearest measured head dim carried by the softmax law."""
    own = _measured(curve, head_dim)
    if own is not None:
        return own
    if other is not None and (theirs := _measured(other, head_dim)) is not None:
        for d, e in zip(curve.head_dims, curve.efficiencies, strict=True):
            if (base := _measured(other, d)) is not None:
                return min(1.0, e * theirs / base)
    nearest = min(zip(curve.head_dims, curve.efficiencies, strict=True), key=lambda de: abs(de[0] - head_dim))
    return min(1.0, nearest[1] * _law(head_dim) / _law(nearest[0]))


def seconds(curve: AttentionCurve, *, rows: float, width: float, keys: float, head_dim: float, peak_flops: float,
            backward: bool, other: AttentionCurve | None = None) -> float:
    """Seconds of one attention call: ``rows`` query rows (tokens x heads), ``width`` = QK + V head dims, ``keys``
    mean unmasked keys per query, ``head_dim`` the query/key head dim (which kernel runs)."""
    if rows <= 0:
        return 0.0
    work = 2.0 * rows * width * (keys + curve.row_keys) * (BWD_FLOPS if backward else 1.0)
    return work / (peak_flops * efficiency(curve, head_dim, other)) + curve.latency_s


def reference_efficiency(curves: KernelCurves) -> float:
    """Forward + backward attention efficiency of the curves at the reference shape (causal, 128-wide heads, 4 096
    tokens) with enough sequences and heads that the calls' latency vanishes, in the roofline's FLOP convention: the
    value ``Efficiency.attention`` states for them, one per family (the same on each board's own peak)."""
    fwd, bwd = curves.attention_fwd, curves.attention_bwd
    if fwd is None or bwd is None:
        raise ValueError(f"{curves.family}: no forward and backward attention curves")
    rows, width, keys = float(REFERENCE_TOKENS), 2.0 * REFERENCE_HEAD_DIM, REFERENCE_TOKENS / 2.0
    ideal = 2.0 * rows * width * keys * (1.0 + BWD_FLOPS)  # FLOPs; at 1 FLOP/s also the ideal seconds
    common = {"rows": rows, "width": width, "keys": keys, "head_dim": REFERENCE_HEAD_DIM, "peak_flops": 1.0}
    spent = (seconds(fwd, backward=False, other=bwd, **common) - fwd.latency_s
             + seconds(bwd, backward=True, other=fwd, **common) - bwd.latency_s)
    return ideal / spent


PER_TENSOR_FP8 = ("delayed", "tensorwise", "custom")
"""FP8 recipes that scale a whole tensor at once: the kernels the ``fp8`` grouped-GEMM curves measured."""


def grouped_curves(shape: RankShape, gpu: GPUSpec) -> tuple[GroupedCurve, GroupedCurve] | None:
    """The (forward, backward) grouped-GEMM curves of the GPU family for the experts' precision and scaling, or
    ``None`` where no public kernel data was fitted (the dense law then prices each expert's GEMM)."""
    curves = gpu.kernel_curves
    if curves is None or not (shape.precision == "bf16"
                              or (shape.precision == "fp8" and shape.fp8_recipe in PER_TENSOR_FP8)):
        return None
    fwd, bwd = curves.grouped_curve(shape.precision, "fwd"), curves.grouped_curve(shape.precision, "bwd")
    return (fwd, bwd) if fwd is not None and bwd is not None else None


def grouped_seconds(curve: GroupedCurve, groups: float, m: float, n: float, k: float, peak_flops: float, *,
                    backward: bool) -> float:
    """``groups`` GEMMs of ``m`` rows x ``n`` x ``k`` on a grouped-GEMM curve (backward: data-grad + weight-grad,
    2x the forward FLOPs); the curve was fitted to the kernels' measured times, memory traffic included."""
    if m <= 0 or groups <= 0:
        return 0.0
    flops = 2.0 * groups * m * n * k * (2.0 if backward else 1.0)
    return flops / (peak_flops * curve.efficiency * m / (m + curve.m_half)) + curve.latency_s


__all__ = ["efficiency", "grouped_curves", "grouped_seconds", "reference_efficiency", "seconds"]
