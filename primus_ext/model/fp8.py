"""What an fp8 weight costs in HBM, by scaling recipe and GPU generation (Transformer Engine 2.x).

Pure functions of the execution's ``fp8_recipe`` and whether the GPU's FP8 GEMMs take every operand layout
(``GPUSpec.fp8_any_layout``: its profile's capability, ``hardware/families.yaml`` ``fp8_layouts``)::

    fp8_weight_bytes("tensorwise", any_layout=True)   # 1.0 (Blackwell): the fp8 data serves both GEMM layouts
    fp8_weight_bytes("tensorwise", any_layout=False)  # 2.0 (Hopper): fp8 data + the transposed copy
    layer_weight_bytes(execution, True, param_bytes=2.0)  # (weight, cache) bytes per layer param

The memory model (``memory.state.state_bytes``) applies them to the transformer layers' GEMM weights;
embedding, output layer and router stay in their own dtypes (Transformer Engine quantises only the
linear layers of the transformer block).
"""

from __future__ import annotations

from primus_ext.model import fp4
from primus_ext.specs import ExecutionSpec, GPUSpec

MX_BLOCK_ELEMENTS = 32
"""MXFP8: one E8M0 scale byte per 32 elements along the reduction dimension (OCP Microscaling Formats
spec v1.0); the scales run along one dimension, so Transformer Engine keeps a row-wise and a column-wise
quantisation of each weight on every GPU generation."""
FP8_BYTES = 1.0
"""An E4M3 / E5M2 element."""
BF16_BYTES = 2.0
"""A BF16 activation element, what an FP8 cast reads."""


def quantise_seconds(m: float, n: float, k: float, gpu: GPUSpec, recipe: str, *, count: float = 1.0
                     ) -> tuple[float, float]:
    """(forward, backward) seconds of Transformer Engine's FP8 casts around ``count`` FP8 GEMMs of M tokens x N outputs
    x K inputs: the BF16 input (M x K) in forward and the output gradient (M x N) in backward, each read once (2 bytes)
    and written as FP8 (1 byte) plus, where the backward GEMM needs the other operand layout, a transposed FP8 copy
    (per-tensor scaling on a TN-only GPU: ``GPUSpec.fp8_any_layout`` False; MXFP8 and the 1x128 / row-wise recipes
    on every GPU, their scales 1 / 32 of a byte at most), at HBM bandwidth x ``Efficiency.hbm``. Every linear is
    priced with its own cast: where TE fuses it into the norm before it (``LayerNormLinear``) the norm writes the
    FP8 copy instead of a BF16 one, about the same bytes."""
    if m <= 0 or count <= 0:
        return 0.0, 0.0
    copies = 1 if recipe in ("delayed", "tensorwise", "custom") and gpu.fp8_any_layout else 2
    scale = 1 + 1 / MX_BLOCK_ELEMENTS if recipe == "mxfp8" else 1.0
    per_element = (BF16_BYTES + copies * FP8_BYTES * scale) / (gpu.hbm_bandwidth_bytes_per_s * gpu.efficiency.hbm)
    return count * m * k * per_element, count * m * n * per_element


def fp8_weight_bytes(recipe: str, any_layout: bool) -> float:
    """Bytes per parameter of an fp8 weight with what both its forward and backward GEMMs read.

    Per-tensor scaling (``delayed``, ``tensorwise``): the data alone where FP8 GEMMs take every operand layout
    (``any_layout``: Blackwell; Transformer Engine asks ``is_non_tn_fp8_gemm_supported()``), data + transpose
    where they take TN only (Hopper: cuBLAS docs, cublasLtMatmul FP8 layout requirements) and on GPUs whose
    profile does not say (the conservative answer). ``mxfp8``: row-wise and column-wise data
    plus their block scales. ``blockwise`` (128x128 weight blocks, Hopper's DeepSeek-style recipe) and
    torchao's ``rowwise``: two quantised copies, scales negligible (one fp32 per 16 384 elements)."""
    if recipe == "mxfp8":
        return 2 * FP8_BYTES * (1 + 1 / MX_BLOCK_ELEMENTS)
    if recipe in ("delayed", "tensorwise") and any_layout:
        return FP8_BYTES
    return 2 * FP8_BYTES


def fp8_weight_cache_bytes(recipe: str, any_layout: bool) -> float:
    """Extra bytes per parameter when fp8 GEMMs run on bf16 parameters: megatron-core's TE layers pass
    ``is_first_microbatch`` (extensions/transformer_engine.py, unless disable_parameter_transpose_cache), so
    TE quantises each weight once per step and keeps the result for the step's other micro-batches.
    torchao's float8 linear (``rowwise``, torchtitan) casts the weight inside each GEMM and saves the bf16
    weight for backward: no cache."""
    return 0.0 if recipe == "rowwise" else fp8_weight_bytes(recipe, any_layout)


def layer_weight_bytes(e: ExecutionSpec, any_layout: bool, *, param_bytes: float) -> tuple[float, float]:
    """(parameter, fp8 cache) bytes per transformer-layer GEMM parameter of ``e`` on a GPU whose FP8 GEMMs take every
    operand layout (``any_layout``) or TN only.

    ``fp8_param_gather``: the parameter is the fp8 weight itself (no bf16 copy, no cache). fp8 GEMMs on
    bf16 parameters: the bf16 weight plus TE's cache. fp4: ``model.fp4.layer_weight_bytes``. Otherwise
    ``param_bytes`` and no cache."""
    if e.precision == "fp4":
        return fp4.layer_weight_bytes(e, param_bytes=param_bytes)
    if e.precision != "fp8":
        return param_bytes, 0.0
    if e.fp8_param_gather:
        return fp8_weight_bytes(e.fp8_recipe, any_layout), 0.0
    return param_bytes, fp8_weight_cache_bytes(e.fp8_recipe, any_layout)
