"""Reduced scale for CPU measurements: pick the factor that keeps a whole recipe in seconds.

Usage::

    scale = default_scale(shapes, device)   # 1.0 on GPU; on CPU the largest 2**-k under the budget

The estimate is the forward GEMM + attention FLOPs of the costliest layer kind at the scaled
per-rank shape (``Kind.fwd_flops_estimate``: closed-form parameters from ``primus_ext.model.params``; the local spec's
unfused attention computes the full ``seq x seq`` score square).
"""

from __future__ import annotations

from collections.abc import Iterable

from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.rank_shape import RankShape

CPU_FWD_FLOP_BUDGET = 40e9
"""Forward FLOPs of the costliest layer kind at CPU scale. This 2-core machine ran bf16
megatron-core layers at ~250 GFLOP/s (Llama-3.1-8B dense layer at scale 1/8: 18 GFLOP forward in
59 ms, benchmarks/bench_layers.py), so ~0.5 s per fwd+bwd iteration and, with 2 warm-up + 10
timed iterations per kind, a four-kind recipe well under the 60 s target (issue 3)."""

CANDIDATE_SCALES = tuple(2.0**-k for k in range(0, 9))
"""1, 1/2, ..., 1/256: powers of two keep the scaled sizes divisible by the parallel splits."""


def estimate_fwd_flops(shape: RankShape) -> float:
    """Forward FLOPs of one micro-batch of ``shape`` on one rank (rough, for sizing only:
    ``Kind.fwd_flops_estimate``)."""
    return get_kind(shape.kind).fwd_flops_estimate(shape)


def default_scale(shapes: Iterable[RankShape], device_type: str, *,
                  budget_flops: float = CPU_FWD_FLOP_BUDGET) -> float:
    """1.0 on GPU; on CPU the largest candidate scale whose costliest kind fits the budget."""
    shapes = list(shapes)
    if device_type == "cuda" or not shapes:
        return 1.0
    for scale in CANDIDATE_SCALES:
        if max(estimate_fwd_flops(s.scaled(scale)) for s in shapes) <= budget_flops:
            return scale
    return CANDIDATE_SCALES[-1]
