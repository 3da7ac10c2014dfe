"""The host floor of a layer pass: the host work between kernels a GPU waits on when its kernels are shorter.

    >>> host_floor_s(shape)      # (0.0039, 0.0047): a MoE layer's forward / backward host seconds, or None

Read from ``hardware/host_time.yaml`` (measured on a CPU from the real megatron-core modules, ``measure.host``);
``analytic.analytic_cost`` takes a pass as the longer of its device time and this floor. Pure and torch-free.
"""

from __future__ import annotations

from primus_ext.hardware.host_time import host_time_of
from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.rank_shape import RankShape
from primus_ext.specs import GPUSpec


def launches(shape: RankShape) -> bool:
    """Whether the layer's kernels are launched one by one (pay ``Efficiency.kernel_overhead_s``): not under a
    full-iteration graph, nor a per-layer graph of a transformer layer."""
    return shape.cuda_graph == "none" or (shape.cuda_graph == "layers" and not get_kind(shape.kind).layer_graph)


def host_floor_s(shape: RankShape, gpu: GPUSpec, factor: float | None = None) -> tuple[float, float] | None:
    """(forward, backward) host seconds a pass of the layer cannot beat when its kernels are launched one by one
    (``launches``): megatron-core's Python, autograd and torch's dispatcher between two kernels, measured on a CPU
    from the real modules (``hardware/host_time.yaml``, ``measure.host``). The GPU runs each kernel as soon as the
    host has launched it, so a pass takes the longer of the two; a dropless MoE layer's token-count
    synchronisation drains the queue every layer, so the host cannot run ahead by more than a layer. ``None``: a
    CUDA graph replays the layer (no host work per kernel), its kind was not measured, or the scale is 0. Scaled by
    ``factor``, by default ``Efficiency.host_factor`` (the training host against the CPU it was measured on; 0, not
    stated: no floor)."""
    if not launches(shape):
        return None
    host = host_time_of(shape.kind)
    k = gpu.efficiency.host_factor if factor is None else factor
    if host is None or k <= 0:
        return None
    return host.fwd_s * k, host.bwd_s * k


__all__ = ["host_floor_s", "launches"]
