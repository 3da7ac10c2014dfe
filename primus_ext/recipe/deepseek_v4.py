"""A DeepSeek-V4 recipe (Primus ``model_type: deepseek_v4``: primus/configs/models/megatron/deepseek_v4_*.yaml),
projected as a hybrid stack of its layers' halves (``model.kinds.deepseek_v4``).

Primus's ``DeepseekV4TransformerBlock`` (models/deepseek_v4/deepseek_v4_block.py at Primus HEAD) builds layer i with
the attention of ``compress_ratios[i]`` (0 dense + sliding window ``W``, 4 CSA ``S``, 128 HCA ``H``) and a
``DeepseekV4MoE`` whose router hashes token ids on the first ``num_hash_layers`` layers (``U``), learned elsewhere
(``V``); ``compress_ratios`` holds ``num_layers + mtp_num_layers`` entries (``_normalize_compress_ratios``), the MTP
layers' last. Every layer an MoE layer (``moe_layer_freq: 1``; a dense V4 layer is refused). Refused, with a sentence,
what this reading does not price: interleaved pipeline stages, a pipeline layout. An uneven split
(``decoder_first_pipeline_num_layers`` / ``decoder_last_pipeline_num_layers``: 43 layers over 8 stages) counts layers,
so the halves' split counts twice as many (``v4_execution``).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from primus_ext.errors import Problem
from primus_ext.recipe.args import ArgReader
from primus_ext.specs import ExecutionSpec, ModelSpec

MODEL_TYPE = "deepseek_v4"
"""The Primus ``model_type`` this module projects."""
RATIO_SYMBOLS = {0: "W", 4: "S", 128: "H"}
"""``compress_ratios`` entry -> the attention half's symbol (``DeepseekV4Attention`` accepts these three)."""
KEYS = ("compress_ratios", "num_hash_layers")
"""The recipe keys this module reads (the kinds read their own sizes: ``DeepSeekV4Dims``)."""


def v4_problems(args: Mapping[str, Any]) -> list[Problem]:
    """What the hybrid-stack reading of a DeepSeek-V4 recipe does not price (empty when it prices it all)."""
    found = []
    for key in ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
                "pipeline_model_parallel_layout"):
        if args.get(key):
            found.append(Problem(path=key, value=args[key], message=f"DeepSeek-V4 layers with {key} set: the "
                                 "projection (a hybrid stack of the same modules) splits stages evenly, so no figure "
                                 "is given", fix=f"unset {key}"))
    freq = args.get("moe_layer_freq", 1)
    if freq not in (1, None):
        found.append(Problem(path="moe_layer_freq", value=freq, message="DeepSeek-V4 with dense-MLP layers: the "
                             "projection prices V4's MoE layers only", fix="moe_layer_freq: 1"))
    return found


def compress_ratios(a: ArgReader, count: int) -> list[int] | None:
    """The ``count`` ratios (a list, or its string form as Primus's yaml gives it); ``None`` with a problem of ``a``."""
    raw = a.raw("compress_ratios")
    if isinstance(raw, str):
        try:
            raw = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            raw = None
    if (isinstance(raw, list | tuple) and len(raw) == count
            and all(isinstance(r, int) and not isinstance(r, bool) and r in RATIO_SYMBOLS for r in raw)):
        return list(raw)
    a.bad("compress_ratios", f"must list {count} ratios (num_layers + mtp_num_layers), each 0, 4 or 128, as "
          "Primus's DeepseekV4TransformerBlock reads them", fix="one entry per layer, the MTP layers' last")
    return None


def v4_model(a: ArgReader, model: ModelSpec) -> ModelSpec:
    """``model`` as the hybrid stack of its layers' halves (attention ``W`` / ``S`` / ``H``, then MoE ``V`` / ``U``),
    its MTP layers' pattern too; problems go to ``a``."""
    from primus_ext.recipe.hybrid import kind_dims

    mtp = model.mtp_num_layers
    ratios = compress_ratios(a, model.num_layers + mtp)
    if ratios is None:
        return model
    if not model.num_experts:
        a.bad("num_experts", "DeepSeek-V4 layers are MoE layers (DeepseekV4MoE)", fix="set num_experts")
        return model
    hashed = a.int("num_hash_layers", minimum=0, default=0) or 0
    halves = [RATIO_SYMBOLS[r] + ("U" if i < hashed else "V") for i, r in enumerate(ratios)]
    pattern = "".join(halves[:model.num_layers])
    mtp_patterns = set(halves[model.num_layers:])
    if len(mtp_patterns) > 1:
        a.bad("compress_ratios", f"the {mtp} MTP layers' entries differ; the projection prices one MTP layer repeated",
              fix="give the MTP layers one compression ratio")
        return model
    a.warnings.append(f"model_type {MODEL_TYPE}: the {model.num_layers} layers ({ratios[:model.num_layers].count(4)} "
                      f"CSA, {ratios[:model.num_layers].count(128)} HCA, {hashed} hash-routed) projected as a hybrid "
                      "stack of their attention and MoE halves (the same modules, norms and pipeline split)")
    return replace(model, num_layers=2 * model.num_layers, hybrid_layer_pattern=pattern,
                   mtp_layer_pattern=mtp_patterns.pop() if mtp_patterns else "",
                   moe_layer_pattern=tuple(c in "UV" for c in pattern), kind_dims=kind_dims(a, pattern))


def v4_execution(args: Mapping[str, Any], model: ModelSpec, execution: ExecutionSpec) -> ExecutionSpec:
    """``execution`` over a V4 recipe's halves: the first / last stage's layers (Megatron counts V4 layers) twice as
    many; any other recipe's as it is."""
    if args.get("model_type") != MODEL_TYPE or not model.hybrid_layer_pattern:
        return execution
    first, last = execution.decoder_first_pipeline_num_layers, execution.decoder_last_pipeline_num_layers
    return replace(execution, decoder_first_pipeline_num_layers=2 * first if first is not None else None,
                   decoder_last_pipeline_num_layers=2 * last if last is not None else None)


V4_RECOMPUTE = ("recompute_granularity full: Primus's DeepseekV4TransformerBlock checkpoints whole V4 layers "
                "(_forward_layer_checkpointed), which the hybrid-stack reading does not price: projected without "
                "recompute (activation memory over-, step time under-estimated)")
"""What a DeepSeek-V4 recipe with full recompute is told (``recipe.stacks.recompute_note``)."""
