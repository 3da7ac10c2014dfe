"""A tiny flat Megatron recipe (2 layers, hidden 256, GQA, RoPE, SwiGLU) the built-in trainer runs in seconds on
the cpu profile; the tests that train, calibrate or verify set the batch and parallel keys they need.

    from tiny import tiny_recipe
    text = tiny_recipe(micro_batch_size=2, global_batch_size=4, tensor_model_parallel_size=1)
"""

from __future__ import annotations

BASE = {
    "num_layers": 2, "hidden_size": 256, "ffn_hidden_size": 512, "num_attention_heads": 4,
    "group_query_attention": True, "num_query_groups": 2, "seq_length": 128, "max_position_embeddings": 128,
    "vocab_size": 1024, "bf16": True, "swiglu": True, "normalization": "RMSNorm", "add_bias_linear": False,
    "position_embedding_type": "rope", "untie_embeddings_and_output_weights": True,
}


def tiny_recipe(**keys: object) -> str:
    """The recipe's YAML text with ``keys`` added (or replacing the base's)."""
    merged = {**BASE, **keys}
    return "".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}\n" for k, v in merged.items())
