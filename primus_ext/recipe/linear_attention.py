"""A GPT recipe whose attention is gated DeltaNet on some layers (Qwen3-Next / Qwen3.5: megatron-core 0.16.1
``experimental_attention_variant: gated_delta_net`` with ``linear_attention_freq``), projected as a hybrid stack.

megatron-core builds each such layer as a ``TransformerLayer`` whose self-attention is ``GatedDeltaNet`` (its input
norm fused into ``in_proj``: experimental_attention_variant_module_specs.py ``get_gated_delta_net_module_spec``)
followed by the pre-MLP norm and the MLP / MoE block; every ``linear_attention_freq``-th layer keeps softmax attention
(``get_linear_attention_pattern``: layer i is softmax iff (i + 1) % N == 0; a list: 1 = linear, 0 = softmax). Those
are the same modules, in the same order, as a hybrid stack's mixer half (``G`` or ``*``) and MLP half (``-`` or
``E``): this module writes that pattern, ``num_layers`` halves twice as many, and the kinds price it. It is exact
where the hybrid stack behaves as ``TransformerBlock`` does; where it does not (full recompute of some layers,
interleaved or uneven pipeline stages, MTP), the recipe is refused with a sentence rather than projected otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from primus_ext.errors import Problem
from primus_ext.recipe.args import ArgReader
from primus_ext.specs import ModelSpec

GDN_VARIANT = "gated_delta_net"
"""The ``experimental_attention_variant`` this module projects (megatron-core 0.16.1
``is_linear_attention_variant``)."""


LFM_KEY = "lfm_layer_types"
"""Primus's LFM2 key: per layer ``conv`` (``Lfm2ShortConv``: ``model.kinds.short_conv``) or ``full_attention``
(primus/backends/megatron/core/models/gpt/gpt_layer_specs.py ``get_gpt_decoder_block_spec`` at Primus HEAD)."""
LFM_TYPES = {"conv": "C", "full_attention": "*"}
"""``lfm_layer_types`` value -> the symbol of the half layer it builds."""


def _refusal(key: str, value: Any, why: str, fix: str, what: str) -> Problem:
    return Problem(path=key, value=value, message=f"GPT layers with {what}: {why}, which the projection (a hybrid "
                   "stack of the same modules) does not model, so no figure is given", fix=fix)


def gdn_gpt_problems(args: Mapping[str, Any], what: str = "gated DeltaNet attention") -> list[Problem]:
    """What the hybrid-stack reading of a gated-DeltaNet (or LFM2: ``what``) GPT recipe cannot price (empty when it
    prices it all)."""
    _refusal_of = partial(_refusal, what=what)
    found = []
    layers, pp = args.get("num_layers"), args.get("pipeline_model_parallel_size") or 1
    if isinstance(layers, int) and isinstance(pp, int) and pp > 0 and layers % pp:
        found.append(_refusal_of("pipeline_model_parallel_size", pp, f"num_layers {layers} not divisible by PP",
                              "choose PP dividing num_layers"))
    for key in ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
                "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers", "mtp_num_layers"):
        if args.get(key):
            found.append(_refusal_of(key, args[key], f"{key} is set", f"unset {key}"))
    if args.get("recompute_granularity") == "full" and args.get("recompute_num_layers"):
        found.append(_refusal_of("recompute_num_layers", args["recompute_num_layers"], "full recompute of layers",
                              "use selective recompute, or recompute_num_layers: 0"))
    return found


def linear_attention_layers(a: ArgReader, num_layers: int) -> list[bool] | None:
    """Per layer: gated DeltaNet (True) or softmax attention, from ``linear_attention_freq``; ``None`` (a problem
    of ``a``) when it is missing or malformed (megatron-core asserts)."""
    freq = a.raw("linear_attention_freq")
    if isinstance(freq, int) and not isinstance(freq, bool) and freq >= 1:
        return [(i + 1) % freq != 0 for i in range(num_layers)]
    if isinstance(freq, list | tuple) and len(freq) == num_layers and all(v in (0, 1) for v in freq):
        return [v == 1 for v in freq]
    a.bad("linear_attention_freq", f"must be a positive integer N (every N-th layer softmax attention) or a list of "
          f"{num_layers} 0 / 1 (1 = gated DeltaNet), as megatron-core's get_linear_attention_pattern reads it",
          fix="e.g. linear_attention_freq: 4")
    return None


def gdn_gpt_model(a: ArgReader, model: ModelSpec) -> ModelSpec:
    """``model`` as the hybrid stack of its layers' halves (gated DeltaNet ``G`` or attention ``*``, then MLP ``-`` or
    MoE ``E``), its gated DeltaNet sizes read by the kind; problems go to ``a``."""
    linear = linear_attention_layers(a, model.num_layers)
    if linear is None:
        return model
    warning = (f"experimental_attention_variant {GDN_VARIANT}: the {model.num_layers} layers ({sum(linear)} "
               "gated DeltaNet) projected as a hybrid stack of their attention and MLP halves (the same modules, norms "
               "and pipeline split)")
    return halves_model(a, model, ["G" if lin else "*" for lin in linear], warning)


def lfm_gpt_model(a: ArgReader, model: ModelSpec) -> ModelSpec:
    """An LFM2 recipe (``lfm_layer_types``) as the hybrid stack of its layers' halves: short convolution ``C`` or
    attention ``*`` (megatron-core's GPT layer: qk-norm GQA), then MLP ``-`` or MoE ``E``."""
    types = a.raw(LFM_KEY)
    if not isinstance(types, list) or len(types) != model.num_layers or any(t not in LFM_TYPES for t in types):
        a.bad(LFM_KEY, f"must be a list of {model.num_layers} values, each conv or full_attention (Primus's "
              "get_gpt_decoder_block_spec asserts it)", fix="one entry per layer: conv or full_attention")
        return model
    warning = (f"{LFM_KEY}: the {model.num_layers} LFM2 layers ({types.count('conv')} short convolution) projected as "
               "a hybrid stack of their mixer and MLP halves (the same modules, norms and pipeline split)")
    return halves_model(a, model, [LFM_TYPES[t] for t in types], warning)


def halves_model(a: ArgReader, model: ModelSpec, mixers: list[str], warning: str) -> ModelSpec:
    """``model`` with each GPT layer split into its mixer half (``mixers``' symbol) and its MLP half (``-`` or MoE
    ``E`` by ``moe_layer_pattern``): ``num_layers`` halves twice as many, the kinds' own sizes read."""
    from primus_ext.recipe.hybrid import kind_dims

    moe = model.moe_layer_pattern or (False,) * model.num_layers
    pattern = "".join(m + ("E" if routed else "-") for m, routed in zip(mixers, moe, strict=True))
    a.warnings.append(warning)
    return replace(model, num_layers=2 * model.num_layers, hybrid_layer_pattern=pattern,
                   moe_layer_pattern=tuple(c == "E" for c in pattern) if model.num_experts else (),
                   kind_dims=kind_dims(a, pattern))
