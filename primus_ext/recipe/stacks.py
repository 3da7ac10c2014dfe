"""Which hybrid stack a recipe's model is read as (``resolve.resolve_all`` asks once): a hybrid Mamba model
(``recipe.hybrid``), a gated-DeltaNet or LFM2 GPT recipe (``recipe.linear_attention``), a DeepSeek-V4 recipe
(``recipe.deepseek_v4``), a Kimi-K3 recipe (``recipe.kimi_k3``); any other recipe is a GPT model, unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from primus_ext.errors import Problem
from primus_ext.recipe import deepseek_v4 as V4
from primus_ext.recipe import kimi_k3 as K3
from primus_ext.recipe.args import ArgReader
from primus_ext.recipe.hybrid import HYBRID_MODEL_TYPE, MAMBA_RECOMPUTE, hybrid_model, spec_problems
from primus_ext.recipe.linear_attention import GDN_VARIANT, LFM_KEY, gdn_gpt_model, gdn_gpt_problems, lfm_gpt_model
from primus_ext.specs import ModelSpec


def stack_model(args: Mapping[str, Any], reader: ArgReader, model: ModelSpec,
                refused: list[Problem]) -> tuple[list[Problem], ModelSpec]:
    """(problems refusing the recipe, its model as the stack it is read as); ``refused``: those found before (the
    model then unchanged). The model's own problems go to ``reader``."""
    if args.get("model_type") == HYBRID_MODEL_TYPE:
        refused = refused or spec_problems(args)
        return refused, model if refused else hybrid_model(reader, model)
    if args.get("experimental_attention_variant") == GDN_VARIANT:  # Qwen3-Next: as a hybrid stack of its halves
        refused = refused or gdn_gpt_problems(args)
        return refused, model if refused else gdn_gpt_model(reader, model)
    if args.get("model_type") == V4.MODEL_TYPE:  # DeepSeek-V4 (Primus): as a hybrid stack of its halves
        refused = refused or V4.v4_problems(args)
        return refused, model if refused else V4.v4_model(reader, model)
    if args.get("model_type") == K3.MODEL_TYPE:  # Kimi-K3 (Primus): as a hybrid stack of its halves
        refused = refused or K3.k3_problems(args)
        return refused, model if refused else K3.k3_model(reader, model)
    if args.get(LFM_KEY) is not None:  # LFM2 (Primus): as a hybrid stack of its halves
        refused = refused or gdn_gpt_problems(args, "LFM2 short convolutions")
        return refused, model if refused else lfm_gpt_model(reader, model)
    return refused, model


def recompute_note(args: Mapping[str, Any]) -> str:
    """What full recompute of the stack ``args`` is read as is told: the block it comes from decides (Primus's
    DeepSeek-V4 and Kimi-K3 blocks checkpoint whole layers, unpriced here; megatron-core's MambaStack has no path)."""
    return {V4.MODEL_TYPE: V4.V4_RECOMPUTE, K3.MODEL_TYPE: K3.K3_RECOMPUTE}.get(args.get("model_type"),
                                                                                MAMBA_RECOMPUTE)
