"""A Kimi-K3 recipe (Primus ``model_type: kimi_k3``: primus/configs/models/megatron/kimi_k3*.yaml), projected as a
hybrid stack of its layers' halves (``model.kinds.kimi_k3``).

Primus's ``get_kimi_k3_runtime_decoder_spec`` (models/kimi_k3/kimi_k3_layer_specs.py at Primus HEAD) builds layer i
with Kimi delta attention where ``linear_attention_freq[i]`` is 1, NoPE MLA with a sigmoid output gate where it is 0
(``KimiK3TransformerConfig`` evaluates the yaml's ``"([1]*3+[0])*2"`` string to that list), then the Stable Latent
MoE where ``moe_layer_freq[i]`` is 1, the dense MLP where 0. The MLA layers are MLA whatever
``multi_latent_attention`` says (kimi_k3_base.yaml sets it false: the spec builds MLA itself), and the latent MoE is
megatron-core's at ``moe_latent_size = routed_expert_hidden_size`` (``StableLatentMoE``). Refused, with a sentence,
what this reading does not price: interleaved or uneven pipeline stages, MTP layers, the variants Primus does not
build (a low-rank KDA gate) or this reading does not (no MLA output gate, no latent norm).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from primus_ext.errors import Problem
from primus_ext.recipe.args import ArgReader
from primus_ext.recipe.moe_pattern import PatternError, moe_pattern
from primus_ext.specs import ModelSpec

MODEL_TYPE = "kimi_k3"
"""The Primus ``model_type`` this module projects."""
SWITCHES = {"kda_use_full_rank_gate": "Primus's KimiDeltaAttention implements the full-rank output gate only "
                                      "(NotImplementedError otherwise)",
            "mla_use_output_gate": "the projection prices Kimi-K3's MLA with its sigmoid output gate only",
            "latent_moe_use_norm": "the projection prices the Stable Latent MoE with its latent norm only"}
"""Kimi-K3 switches (kimi_k3_base.yaml: all true) whose false value this reading refuses, and why."""


def k3_args(args: Mapping[str, Any]) -> Mapping[str, Any]:
    """A Kimi-K3 recipe's arguments as megatron-core reads the modules Primus builds: MLA on, the latent MoE at
    ``routed_expert_hidden_size``; any other recipe's unchanged."""
    if args.get("model_type") != MODEL_TYPE:
        return args
    found = dict(args, multi_latent_attention=True)
    if args.get("routed_expert_hidden_size") is not None:
        found["moe_latent_size"] = args["routed_expert_hidden_size"]
    return found


def k3_problems(args: Mapping[str, Any]) -> list[Problem]:
    """What the hybrid-stack reading of a Kimi-K3 recipe does not price (empty when it prices it all)."""
    found = []
    for key in ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
                "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
                "pipeline_model_parallel_layout", "mtp_num_layers"):
        if args.get(key):
            found.append(Problem(path=key, value=args[key], message=f"Kimi-K3 layers with {key} set: the projection "
                                 "(a hybrid stack of the same modules) splits stages evenly and builds no MTP layer, "
                                 "so no figure is given", fix=f"unset {key}"))
    for key, why in SWITCHES.items():
        if args.get(key) is False:
            found.append(Problem(path=key, value=False, message=f"Kimi-K3 with {key} false: {why}, so no figure is "
                                 "given", fix=f"{key}: true"))
    return found


def kda_layers(a: ArgReader, num_layers: int) -> list[bool] | None:
    """Per layer: KDA (True) or MLA, from ``linear_attention_freq`` (an int N: every N-th layer MLA, a 0 / 1 list, or
    its string expression); ``None`` with a problem of ``a``."""
    freq = a.raw("linear_attention_freq")
    if isinstance(freq, int) and not isinstance(freq, bool) and freq >= 1:
        return [(i + 1) % freq != 0 for i in range(num_layers)]
    try:
        if isinstance(freq, str | list | tuple):
            return list(moe_pattern(freq, num_layers))
    except PatternError:
        pass
    a.bad("linear_attention_freq", f"must give {num_layers} layers 1 (Kimi delta attention) or 0 (MLA): an int N, a "
          "0 / 1 list or its '([1]*3+[0])*2' expression, as KimiK3TransformerConfig reads it",
          fix="one entry per layer, e.g. '([1]*3+[0])*2' for 8 layers")
    return None


def k3_model(a: ArgReader, model: ModelSpec) -> ModelSpec:
    """``model`` as the hybrid stack of its layers' halves (KDA ``J`` / ``X`` or gated MLA ``L``, then dense ``D`` or
    Stable Latent MoE ``N``), the attention residuals' mean candidates written into the kinds' records."""
    from primus_ext.model.kinds.kimi_k3 import with_candidates
    from primus_ext.recipe.hybrid import kind_dims

    kda = kda_layers(a, model.num_layers)
    if kda is None:
        return model
    moe = model.moe_layer_pattern or (False,) * model.num_layers
    mixers = [("J" if i == 0 else "X") if k else "L" for i, k in enumerate(kda)]
    pattern = "".join(m + ("N" if routed else "D") for m, routed in zip(mixers, moe, strict=True))
    block = a.int("attn_res_block_size", minimum=0, default=0) or 0
    dims = with_candidates(kind_dims(a, pattern), model.num_layers, block)
    a.warnings.append(f"model_type {MODEL_TYPE}: the {model.num_layers} layers ({sum(kda)} Kimi delta attention, "
                      f"{model.num_layers - sum(kda)} gated MLA; attention residuals every {block} layers) projected "
                      "as a hybrid stack of their attention and MLP halves (the same modules, norms and pipeline "
                      "split; the residual mixers' cost per layer is the stack's mean)")
    return replace(model, num_layers=2 * model.num_layers, hybrid_layer_pattern=pattern,
                   moe_layer_pattern=tuple(c == "N" for c in pattern) if model.num_experts else (), kind_dims=dims)


K3_RECOMPUTE = ("recompute_granularity full: Primus's KimiK3TransformerBlock checkpoints whole Kimi-K3 layers "
                "(_forward_layer_checkpointed), which the hybrid-stack reading does not price: projected without "
                "recompute (activation memory over-, step time under-estimated)")
"""What a Kimi-K3 recipe with full recompute is told instead of the Mamba stack's warning."""
