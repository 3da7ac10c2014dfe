"""Typed reads of raw Megatron arguments, with Megatron's defaults; bad values become Problems.

    problems: list[Problem] = []
    reader = ArgReader({"tensor_model_parallel_size": "two"}, problems)
    reader.int("tensor_model_parallel_size")   # -> None, and problems names the key
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from primus_ext.errors import Problem

MEGATRON_DEFAULTS: dict[str, Any] = {
    # Argparse defaults of Megatron-LM (megatron/training/arguments.py), as mirrored by the Primus
    # presets language_model.yaml / trainer_base.yaml; used when a flat YAML leaves a key out.
    # shape: attention, MLP, embeddings
    "num_query_groups": None, "group_query_attention": False, "kv_channels": None, "ffn_hidden_size": None,
    "vocab_size": None, "make_vocab_size_divisible_by": 128, "max_position_embeddings": None, "swiglu": False,
    "squared_relu": False, "quick_geglu": False, "normalization": "LayerNorm", "add_bias_linear": True,
    "add_qkv_bias": False, "qk_layernorm": False, "untie_embeddings_and_output_weights": False,
    "position_embedding_type": "learned_absolute", "window_size": None,
    # MoE
    "num_experts": None, "moe_router_topk": 2, "moe_ffn_hidden_size": None, "moe_shared_expert_intermediate_size": None,
    "moe_layer_freq": 1, "moe_latent_size": None,
    # MLA, MTP
    "multi_latent_attention": False, "q_lora_rank": None, "kv_lora_rank": 32, "qk_head_dim": 128,
    "qk_pos_emb_head_dim": 64, "v_head_dim": 128, "mtp_num_layers": None,
    "mtp_use_repeated_layer": False,
    # parallelism
    "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "context_parallel_size": 1,
    "expert_model_parallel_size": 1, "expert_tensor_parallel_size": None, "sequence_parallel": False,
    "cp_comm_type": "p2p",
    # batch and sequence
    "micro_batch_size": None, "global_batch_size": None, "seq_length": None,
    # precision
    "bf16": False, "fp16": False, "fp8": None, "fp4": None,
    # MoE kernels
    "moe_token_dispatcher_type": "allgather", "moe_grouped_gemm": False,
}

MAX_LAYERS = 100_000
"""Upper bound on num_layers and on pipeline chunks (guards absurd input; real models have < 1000)."""
MAX_INT = 2**31 - 1
"""Upper bound on any integer argument."""


class ArgReader:
    """Typed reads from the raw mapping; every malformed value becomes a Problem."""

    def __init__(self, args: Mapping[str, Any], problems: list[Problem], *, primus: bool = False) -> None:
        self.args = args
        self.problems = problems
        self.warnings: list[str] = []
        self.primus = primus
        """The arguments of a Primus experiment (Primus's argument patches apply)."""

    def raw(self, key: str) -> Any:
        value = self.args.get(key)
        return MEGATRON_DEFAULTS.get(key) if value is None else value

    def given(self, key: str) -> bool:
        return self.args.get(key) is not None

    def bad(self, key: str, message: str, fix: str = "") -> None:
        self.problems.append(Problem(path=key, message=message, fix=fix, value=self.args.get(key)))

    def int(
        self, key: str, *, minimum: int = 1, maximum: int = MAX_INT, default: int | None = None,
        required: bool = False,
    ) -> int | None:
        value = self.raw(key)
        if value is None:
            if required:
                self.bad(key, "required argument missing", fix=f"set {key}")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.bad(key, "expected an integer", fix=f"write {key} as a whole number")
            return default
        if value < minimum:
            self.bad(key, f"must be >= {minimum}", fix=f"set {key} >= {minimum}")
            return default
        if value > maximum:
            self.bad(key, f"must be <= {maximum}", fix=f"set {key} <= {maximum}")
            return default
        return value

    def bool(self, key: str, default: bool = False) -> bool:
        value = self.raw(key)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        self.bad(key, "expected true/false (or 1/0)", fix=f"write {key}: true or {key}: false")
        return default

    def choice(self, key: str, choices: tuple[str, ...], default: str | None = None) -> str | None:
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, str) or value not in choices:
            self.bad(key, f"must be one of {', '.join(choices)}", fix=f"set {key} to one of {', '.join(choices)}")
            return default
        return value

    def float(self, key: str) -> float | None:
        value = self.raw(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.bad(key, "expected a number")
            return None
        try:
            number = float(value)
        except OverflowError:  # an int beyond the float range
            number = math.inf
        if not math.isfinite(number):
            self.bad(key, "must be a finite number (.nan / .inf cannot be projected)", fix=f"write {key} as a number")
            return None
        return number
