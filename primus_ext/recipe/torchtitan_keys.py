"""Keys of a torchtitan run that a Megatron argument cannot say, under torchtitan's own names (its ``JobConfig``,
torchtitan/config/job_config.py; model args of torchtitan/models/*). They let a torchtitan run be written as a
recipe (the validation rows of torchtitan runs go through ``recipe.resolve`` so):

- ``selective_ac_option: op``: ``[activation_checkpoint] selective_ac_option`` = "op", torchtitan's op-level
  selective checkpointing (keeps matmul / SDPA / reduce-scatter outputs: ``ExecutionSpec.selective_ac_option``).
- ``mixed_precision_reduce: float32``: ``[training] mixed_precision_reduce`` (torch FSDP2's
  ``MixedPrecisionPolicy.reduce_dtype``; torchtitan's default float32): FSDP2 gradient reduce-scatters in fp32.
- ``attn_type: sdpa``: torchtitan models' attention (``attn_type`` "sdpa" = ``F.scaled_dot_product_attention``,
  whose flash backend is FlashAttention-2: PyTorch 2.2+ release notes), not Transformer Engine's fused attention.

Used by ``resolve_execution``; problems go to the reader.
"""

from __future__ import annotations

from typing import Any

from primus_ext.recipe.args import ArgReader

TORCHTITAN_KEYS = ("selective_ac_option", "mixed_precision_reduce", "attn_type")
"""The keys this module reads."""


def torchtitan_fields(a: ArgReader, granularity: str | None, fsdp: str) -> dict[str, Any]:
    """The ``ExecutionSpec`` fields the torchtitan keys set (their defaults when absent)."""
    option = a.choice("selective_ac_option", ("op",))
    reduce = a.choice("mixed_precision_reduce", ("float32", "bfloat16"))
    if reduce is not None and fsdp != "torch_fsdp2":
        a.warnings.append("mixed_precision_reduce is torch FSDP2's reduce dtype: without use_torch_fsdp2 it has no "
                          "effect")
    attention = a.choice("attn_type", ("sdpa",))
    return {"selective_ac_option": "op" if option == "op" and granularity == "selective" else "modules",
            "fsdp_reduce_dtype": "fp32" if reduce == "float32" and fsdp == "torch_fsdp2" else "param",
            "attention_kernel": "flash2" if attention == "sdpa" else "fused"}
