"""Carry a measured layer cost to the shape and GPU it is asked for, by the roofline's ratio.

Usage::

    carry_cost(store.cost(shape), shape, measured_on=h200, target=h100)   # or target=measured_on

A store entry can have run in another precision than its shape (``origin.measured_as``: an FP8 shape
measured without transformer-engine), and a measurement on one GPU can stand for another of its family
(H100 rows from an H200 store). Either way the measured time is multiplied, per pass, by
``analytic(shape, target) / analytic(shape as measured, measured_on)``: the roofline's ratio moves FP8 GEMMs
by the FP8 peak and memory-bound parts by HBM bandwidth, and keeps what the measurement saw that the roofline
does not. The carried cost says how in its origin's note. Pure and torch-free.
"""

from __future__ import annotations

from dataclasses import replace

from primus_ext.model.analytic import analytic_cost
from primus_ext.model.costs import CostOrigin, LayerCost
from primus_ext.model.rank_shape import RankShape
from primus_ext.specs import GPUSpec


def measured_precision(cost: LayerCost) -> str | None:
    """The precision a measured cost ran in when its origin says it differs from its shape's."""
    return cost.origin.measured_as


def _ratio(new: float | None, old: float | None) -> float:
    return new / old if new and old else 1.0


def carry_cost(cost: LayerCost, shape: RankShape, *, measured_on: GPUSpec, target: GPUSpec) -> LayerCost:
    """``cost`` (measured on ``measured_on``) for ``shape`` on ``target``; unchanged when nothing differs."""
    if cost.origin.measured_as is None and target.name == measured_on.name:
        return cost  # the projection's usual case, on its fast path
    precision = measured_precision(cost)
    as_run = replace(shape, precision=precision) if precision and precision != shape.precision else shape
    same_gpu = target.name == measured_on.name  # a profile and its CSV twin differ only in their sources
    origin = replace(cost.origin, measured_as=None)
    if as_run == shape and same_gpu:
        return cost if origin == cost.origin else replace(cost, origin=origin)
    old = analytic_cost(as_run, measured_on)
    new = analytic_cost(shape, measured_on if same_gpu else target)
    how = ([] if same_gpu else [f"to {target.name}"]) + ([] if as_run == shape else
                                                        [f"{precision} measurement to {shape.precision}"])
    return scaled_by_ratio(cost, old, new, f" carried {' and '.join(how)} by the analytic ratio", origin)


def scaled_by_ratio(cost: LayerCost, old: LayerCost, new: LayerCost, how: str,
                    origin: CostOrigin | None = None) -> LayerCost:
    """``cost``'s times times the analytic ratio ``new / old`` part by part (the measured fraction of the roofline
    kept), its origin (``origin``, else ``cost.origin``) noting ``how``."""
    origin = cost.origin if origin is None else origin
    return replace(
        cost,
        fwd_ms=cost.fwd_ms * _ratio(new.fwd_ms, old.fwd_ms),
        bwd_ms=cost.bwd_ms * _ratio(new.bwd_ms, old.bwd_ms),
        wgrad_ms=None if cost.wgrad_ms is None else cost.wgrad_ms * _ratio(new.wgrad_ms, old.wgrad_ms),
        recompute_ms=cost.recompute_ms * _ratio(new.recompute_ms, old.recompute_ms),
        origin=replace(origin, note=origin.note + how),
    )
