"""Measure layer kinds at their per-rank shapes: build, time, count saved bytes; failures recorded.

Usage::

    from primus_ext.measure.runner import measure_layer, measure_many
    cost = measure_layer(shape, scale=0.125)                  # LayerCost, source "measured:cpu@scale=0.125"
    results = measure_many(shapes.values(), scale=0.125)      # list[Measurement], failures included

``measure_many`` runs shapes whose TP/EP group fits in this node with that many real ranks
(``spawn.py``: gloo on CPU, NCCL on GPU) and the others in this process at per-rank sizes
(``single.py``, ``build.py``). A failure (out of memory, time-out, unsupported kernel or config) is caught per
layer and returned as a ``Measurement`` with ``error`` set; the other layers still run. ``Measurement``,
``MeasureOptions``, ``device_name`` and ``library_versions`` live in ``single`` and are re-exported here.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable

import torch

from primus_ext.measure.shims import ParallelLayout, parallel_context, resolve_device
from primus_ext.measure.single import (
    Measurement,
    MeasureOptions,
    device_name,
    library_versions,
    measure_built,
    measure_one,
)
from primus_ext.measure.spawn import measure_spawned
from primus_ext.model.costs import LayerCost
from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.rank_shape import RankShape

__all__ = ["MeasureFailed", "MeasureOptions", "Measurement", "device_name", "layout_for", "library_versions",
           "measure_built", "measure_layer", "measure_many", "measure_one"]


def layout_for(shape: RankShape, device: torch.device) -> ParallelLayout:
    """Ranks needed to run ``shape``'s TP/EP groups for real, or world 1 when they exceed the node."""
    ep, etp = get_kind(shape.kind).expert_split(shape)
    world = math.lcm(shape.tp, ep * etp)
    node = torch.cuda.device_count() if device.type == "cuda" else (os.cpu_count() or 1)
    if world == 1 or world > node or shape.cp > 1:
        return ParallelLayout()
    return ParallelLayout(tp=shape.tp, ep=ep, etp=etp, world=world)


def measure_many(shapes: Iterable[RankShape], *, scale: float = 1.0,
                 device: str | torch.device | None = None, opts: MeasureOptions | None = None,
                 progress: Callable[[int, int, RankShape], None] | None = None) -> list[Measurement]:
    """Measure each shape once (in order of the input); see module docstring."""
    dev = resolve_device(device)
    opts = opts or MeasureOptions()
    todo = list(shapes)
    results: dict[int, Measurement] = {}
    groups: dict[ParallelLayout, list[int]] = {}
    for i, shape in enumerate(todo):
        layout = layout_for(shape, dev) if opts.spawn else ParallelLayout()
        groups.setdefault(layout, []).append(i)
    done = 0
    for layout, idx in groups.items():
        if layout.world == 1:
            with parallel_context(device=dev):
                for i in idx:
                    if progress:
                        progress(done, len(todo), todo[i])
                    results[i] = measure_one(todo[i], scale, dev, opts)
                    done += 1
        else:
            if progress:
                progress(done, len(todo), todo[idx[0]])
            for i, m in zip(idx, measure_spawned([todo[i] for i in idx], layout, scale, dev, opts),
                            strict=True):
                results[i] = m
            done += len(idx)
    if progress:
        progress(done, len(todo), todo[-1] if todo else None)  # type: ignore[arg-type]
    return [results[i] for i in range(len(todo))]


def measure_layer(shape: RankShape, *, scale: float = 1.0, device: str | torch.device | None = None,
                  opts: MeasureOptions | None = None) -> LayerCost:
    """The measured ``LayerCost`` of one shape; raises ``MeasureFailed`` with the reason on failure."""
    (m,) = measure_many([shape], scale=scale, device=device, opts=opts)
    if m.cost is None:
        raise MeasureFailed(m.error or "unknown failure")
    return m.cost


class MeasureFailed(RuntimeError):
    """``measure_layer`` could not measure the shape (``Measurement.error`` has the reason)."""

