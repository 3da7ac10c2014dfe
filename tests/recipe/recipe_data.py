"""Constants shared by the recipe tests (a uniquely named module: importing ``conftest`` by name
picks whichever conftest pytest loaded last)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A small legal dense model on one mi300x node (8 GPUs): every rule test breaks exactly one thing.
BASE: dict = {
    "num_layers": 8,
    "hidden_size": 1024,
    "ffn_hidden_size": 4096,
    "num_attention_heads": 16,
    "group_query_attention": True,
    "num_query_groups": 4,
    "vocab_size": 32000,
    "seq_length": 2048,
    "micro_batch_size": 1,
    "global_batch_size": 64,
    "bf16": True,
    "swiglu": True,
    "normalization": "RMSNorm",
    "position_embedding_type": "rope",
    "add_bias_linear": False,
}
MOE: dict = {**BASE, "num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 1024}


def primus_root() -> Path | None:
    """The Primus config mirror: $PRIMUS_CONFIG_ROOT, else ../shared/primus_configs next to the repo."""
    for candidate in (os.environ.get("PRIMUS_CONFIG_ROOT"), REPO.parent / "shared" / "primus_configs"):
        if candidate and (Path(candidate) / "primus" / "configs").is_dir():
            return Path(candidate)
    return None


def megatron_config_accepts(**kwargs) -> bool:
    """Whether megatron-core's own ``TransformerConfig`` accepts these arguments (its ``__post_init__``
    checks raise ValueError / AssertionError): the independent side of the rule-agreement tests."""
    import warnings

    from megatron.core.transformer.transformer_config import TransformerConfig

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            TransformerConfig(**kwargs)
    except (ValueError, AssertionError):
        return False
    return True
