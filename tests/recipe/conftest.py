"""Shared fixtures for the recipe tests: write small YAML trees into a temp folder."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

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


@pytest.fixture
def write(tmp_path: Path) -> Callable[..., Path]:
    """``write("a/b.yaml", text_or_mapping)`` -> path under tmp_path."""

    def _write(name: str, content: str | dict) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump(content, sort_keys=False) if isinstance(content, dict) else textwrap.dedent(content)
        path.write_text(text, encoding="utf-8")
        return path

    return _write
