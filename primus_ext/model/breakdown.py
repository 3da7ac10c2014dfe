"""What a layer's time is made of: its kernel classes, its fixed costs and what the host floor adds.

    >>> kernel_classes_s(shape, gpu)   # {"GEMMs": 0.0021, "attention": 0.0004, ..., "fixed": 4e-05, "host floor": 0.0}
    >>> host_bound_s(shape, gpu)       # (0.0, 0.0): seconds the host floor adds to a forward / backward pass

``project`` names them per decoder layer kind; ``benchmarks/amd_calibration.py`` sums them over a step. Pure and
torch-free, over ``model.roofline``'s parts.
"""

from __future__ import annotations

from primus_ext.model.analytic import device_seconds, fixed_overhead_s, layer_parts
from primus_ext.model.host_floor import host_floor_s
from primus_ext.model.rank_shape import RankShape
from primus_ext.specs import GPUSpec


def host_bound_s(shape: RankShape, gpu: GPUSpec, factor: float | None = None) -> tuple[float, float]:
    """(forward, backward) seconds the host floor adds to one pass of the layer over its device time (0 when the
    device is the slower), at ``factor`` (default: the profile's ``Efficiency.host_factor``)."""
    host = host_floor_s(shape, gpu, factor)
    if host is None:
        return 0.0, 0.0
    fwd, bwd, _ = device_seconds(shape, gpu)
    return max(0.0, host[0] - fwd), max(0.0, host[1] - bwd)


KERNEL_CLASSES = {
    "GEMMs": ("attn_linear", "mla_up_proj", "mlp", "moe", "shared_experts", "router", "logits"),
    "attention": ("core_attn",),
    "memory-bound": ("layernorm", "rope", "residual", "mlp_act", "moe_act", "moe_permute", "cross_entropy",
                     "embedding"),
}
"""Which kernel class each part of ``layer_parts`` is (a kind's other parts, e.g. Mamba's scan, count as ``other``)."""


def kernel_classes_s(shape: RankShape, gpu: GPUSpec) -> dict[str, float]:
    """Forward + backward seconds of one layer pass pair per kernel class (``KERNEL_CLASSES``, ``other``), the fixed
    per-pass costs (``fixed``) and what the host floor adds over the kernels (``host floor``)."""
    parts = layer_parts(shape, gpu)
    names = {n for p in (parts.fwd, parts.dgrad, parts.wgrad) for n in p}
    total = {n: parts.fwd.get(n, 0.0) + parts.dgrad.get(n, 0.0) + parts.wgrad.get(n, 0.0) for n in names}
    out = {c: sum(total.get(n, 0.0) for n in members) for c, members in KERNEL_CLASSES.items()}
    out["other"] = sum(v for n, v in total.items() if not any(n in m for m in KERNEL_CLASSES.values()))
    out["fixed"] = 2 * fixed_overhead_s(shape, gpu)
    out["host floor"] = sum(host_bound_s(shape, gpu))
    return out


__all__ = ["KERNEL_CLASSES", "host_bound_s", "kernel_classes_s"]
