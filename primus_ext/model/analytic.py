"""The analytic roofline per layer kind: the fallback ``CostProvider`` when the timing store has no entry.

    >>> from primus_ext.model.analytic import AnalyticCosts
    >>> costs = AnalyticCosts(gpu=system.gpu)
    >>> costs.cost(rank_shapes(model, execution)["dense"])        # LayerCost(origin=ANALYTIC)

A layer's parts are its kind's (``Kind.roofline``, summing ``model.roofline``'s formulas); to them this adds the
fixed per-pass overheads, the host floor (``model.host_floor``) and the recompute seconds, and
``model.layers.layer_params`` gives the parameter counts (exact megatron-core counts). A dispatcher above the kind
registry (docs/DESIGN.md "Layers"). Pure and torch-free; ``AnalyticCosts.cost`` is memoised on (shape, GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from primus_ext.model.costs import LayerCost
from primus_ext.model.host_floor import host_floor_s, launches
from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.layers import layer_params
from primus_ext.model.rank_shape import RankShape
from primus_ext.model.roofline import _Parts, attention_parts
from primus_ext.specs import GPUSpec

_SELECTIVE = {
    "core_attn": ("core_attn",),
    "mlp": ("mlp", "mlp_act"),
    "moe": ("moe", "moe_act", "moe_permute", "router"),
    "moe_act": ("moe_act",),
    "layernorm": ("layernorm",),
    "mla_up_proj": ("mla_up_proj",),
    "shared_experts": ("shared_experts",),
}
"""Megatron ``--recompute-modules`` names -> the parts they re-run."""
DEFAULT_SELECTIVE = ("core_attn",)


def layer_parts(shape: RankShape, gpu: GPUSpec) -> _Parts:
    """Per-module forward / data-grad / weight-grad seconds of one layer (no overhead)."""
    parts = _Parts({}, {}, {})
    get_kind(shape.kind).roofline(parts, shape, gpu)
    return parts


_ELEMENTWISE = ("layernorm", "rope", "mlp_act", "moe_act", "moe_permute", "residual")
"""Memory-bound parts (the shared experts' activation is booked with their GEMMs, under ``shared_experts``)."""


def op_sac_recompute_s(shape: RankShape, gpu: GPUSpec) -> float:
    """Recompute seconds of torchtitan's op-level selective activation checkpointing (``selective_ac_option =
    "op"``; torchtitan ``_apply_ac_to_transformer_block``): of the block's ``aten.mm`` calls every other one
    is saved, counted in call order from the first, so a Llama block (wq, wk, wv, wo, w1, w3, w2) re-runs
    wk, wo and w3 (a non-gated MLP: wk, wo, fc2); SDPA's outputs are saved (no attention recompute); the
    element-wise ops (norms, RoPE, activation, residual adds) re-run (the all-gathers feeding wk and w3 too:
    ``projection.comm.op_sac_gathers``). Other layer kinds (MoE, MLA): half the forward
    GEMM time, the same every-other rule without their exact call order."""
    parts = layer_parts(shape, gpu)
    redo = sum(parts.fwd.get(name, 0.0) for name in _ELEMENTWISE)
    exact = get_kind(shape.kind).op_sac_gemms_s(shape, gpu)
    if exact is None:
        gemms = sum(v for k, v in parts.fwd.items() if k not in _ELEMENTWISE and k != "core_attn")
        return redo + gemms / 2
    for seconds in exact:
        redo += seconds
    return redo


def attention_seconds(shape: RankShape, gpu: GPUSpec) -> tuple[float, float]:
    """(forward, backward) seconds of core attention: what a CP ring can hide its KV exchange behind."""
    parts = _Parts({}, {}, {})
    if get_kind(shape.kind).attention:
        attention_parts(parts, shape, gpu)
    return parts.fwd.get("core_attn", 0.0), parts.dgrad.get("core_attn", 0.0)


def fixed_overhead_s(shape: RankShape, gpu: GPUSpec) -> float:
    """Seconds per pass of one layer beyond its FLOP / byte cost: ``Efficiency.kernel_overhead_s`` (launches)
    unless CUDA graphs replay the layer, plus ``Efficiency.moe_layer_overhead_s`` for an MoE layer unless a
    full-iteration graph removes its host synchronisation too (``ExecutionSpec.cuda_graph``). Per-layer
    graphs capture transformer layers only (megatron-core creates them in ``TransformerLayer``): the
    embedding and output kinds keep their launches."""
    eff = gpu.efficiency
    overhead = eff.kernel_overhead_s if launches(shape) else 0.0
    return overhead + get_kind(shape.kind).overhead_s(shape, gpu)


def device_seconds(shape: RankShape, gpu: GPUSpec) -> tuple[float, float, float]:
    """(forward, backward, weight-grad) device seconds of one layer pass: its kernels and fixed overhead."""
    parts = layer_parts(shape, gpu)
    overhead = fixed_overhead_s(shape, gpu)
    wgrad = sum(parts.wgrad.values())
    return sum(parts.fwd.values()) + overhead, sum(parts.dgrad.values()) + wgrad + overhead, wgrad


@lru_cache(maxsize=16384)
def analytic_cost(shape: RankShape, gpu: GPUSpec) -> LayerCost:
    """The roofline ``LayerCost`` of one layer kind at one per-rank shape on ``gpu``: its device time, floored at
    the host time where kernels are launched one by one (``host_floor_s``)."""
    parts = layer_parts(shape, gpu)
    fwd, bwd, wgrad = device_seconds(shape, gpu)
    host = host_floor_s(shape, gpu)
    if host is not None:
        fwd, bwd = max(fwd, host[0]), max(bwd, host[1])
    if shape.recompute == "full":
        recompute = fwd
    elif shape.recompute == "selective" and shape.selective_ac == "op":
        recompute = op_sac_recompute_s(shape, gpu)
    elif shape.recompute == "selective":
        names = {p for m in (shape.recompute_modules or DEFAULT_SELECTIVE) for p in _SELECTIVE.get(m, ())}
        recompute = sum(parts.fwd.get(n, 0.0) for n in names)
    else:
        recompute = 0.0
    return LayerCost(fwd_ms=fwd * 1e3, bwd_ms=bwd * 1e3, wgrad_ms=wgrad * 1e3, recompute_ms=recompute * 1e3,
                     params=layer_params(shape))


@dataclass(frozen=True, kw_only=True)
class AnalyticCosts:
    """``CostProvider`` over the roofline: never returns ``None``."""

    gpu: GPUSpec

    def cost(self, shape: RankShape) -> LayerCost:
        return analytic_cost(shape, self.gpu)


__all__ = ["AnalyticCosts", "analytic_cost", "attention_seconds", "device_seconds", "fixed_overhead_s", "layer_parts",
           "op_sac_recompute_s"]
