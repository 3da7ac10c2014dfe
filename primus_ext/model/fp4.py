"""FP4 training as megatron-core 0.16 (NVFP4) and Primus (MXFP4) run it: what is quantised, what it costs.

Pure functions of the execution's ``fp4_recipe`` and the GPU (which formats it runs: its profile's capabilities)::

    fp4_element_bytes("nvfp4")            # 0.5625: an E2M1 nibble + an E4M3 scale per 16 elements
    fp4_weight_bytes("nvfp4")             # 1.125: row-wise and column-wise copies of each weight
    quantise_seconds(m, n, k, gpu, "nvfp4")  # (forward, backward) seconds of one GEMM's quantisation passes
    fp4_problem(gpu, "nvfp4")             # None, or the sentence that refuses FP4 on this GPU

Which GEMMs run in FP4. megatron-core wraps each transformer layer in ``get_fp4_context`` (``fp4_utils.py`` at
core_v0.16.1), Transformer Engine's autocast with the ``NVFP4BlockScaling`` recipe; Primus swaps in its own
``get_fp4_context`` with TE's ``MXFP4BlockScaling`` or Primus-Turbo's MX-blockwise E2M1 config
(``primus/backends/megatron/core/fp4_utils.py`` at fd1eeab). So every TE linear of the decoder layers (QKV,
attention projection, MLP fc1 / fc2, the MoE experts' grouped GEMMs, MLA's projections) runs its forward (fprop),
data-grad (dgrad) and weight-grad (wgrad) GEMMs in FP4: TE's recipe quantises the input, the weight and the output
gradient, so all three GEMMs read FP4 operands (the NVFP4 recipe of Abecassis et al. 2025, "Pretraining Large
Language Models with NVFP4", arXiv:2509.25149, sec. 4: all three GEMMs of a linear layer). What stays in BF16 /
FP32: core attention (``DotProductAttention`` outside the linear layers; ``fp8_dot_product_attention`` is off),
the norms, the MoE router (an fp32 ``torch`` GEMM), the embedding and the output layer (``ColumnParallelLinear``
of ``tensor_parallel``, outside the autocast), the loss. megatron-core's ``first_last_layers_bf16`` /
``num_layers_at_{start,end}_in_bf16`` keep whole edge layers in BF16 (the NVFP4 paper keeps ~15 % of layers so);
the projection does not model that yet: the key is reported as not modelled (``recipe.key_effects``).

The quantisation passes are priced through the roofline (``quantise_seconds``): each FP4 GEMM's input is quantised
in forward into a row-wise copy (fprop) and a column-wise copy kept for wgrad, the output gradient in backward into a
row-wise copy (dgrad) and a column-wise one (wgrad). NVFP4 applies a 16 x 16 random Hadamard transform to the wgrad
operands (arXiv:2509.25149 sec. 4.2; TE ``NVFP4BlockScaling`` ``disable_rht=False``) and rounds gradients
stochastically (sec. 4.4; ``disable_stochastic_rounding=False``): the Hadamard is 32 FLOPs per element on the
tensor cores (a 16 x 16 matrix per 16 elements), the rounding's random bits are drawn in the same kernel and move
no bytes. MXFP4 on Primus applies the Hadamard only with ``NVTE_MXFP4_USE_HADAMARD=1`` (default off) and
stochastic rounding only with ``mxfp4_gradient_stochastic_rounding``. A weight is quantised once per step (TE
caches it for the step's other micro-batches, ``is_first_microbatch``): not priced per micro-batch. FP8's casts
are not priced this way (they sit in the calibrated ``fp8_gemm_max``); ``Efficiency.fp4_fp8_ratio`` carries only
the FP4 GEMM's own distance to its peak.
"""

from __future__ import annotations

from primus_ext.specs import ExecutionSpec, GPUSpec

E2M1_BYTES = 0.5
"""An FP4 (E2M1) element: two per byte (OCP Microscaling Formats spec v1.0, sec. 5.3.3)."""
SCALE_BYTES = 1.0
"""An NVFP4 block scale (FP8 E4M3) or an MX block scale (E8M0): one byte each."""
BLOCK_ELEMENTS = {"nvfp4": 16, "mxfp4": 32}
"""Elements per scale: NVFP4 16 (TE ``NVFP4BlockScaling``; arXiv:2509.25149 sec. 2: 16-element micro-blocks with
an E4M3 scale, plus one fp32 scale per tensor, negligible); MXFP4 32 (OCP MX spec v1.0; Primus
``MXFP4_SCALING_BLOCK_SIZE = 32``, ``ScaleDtype.E8M0``)."""
HADAMARD_FLOPS_PER_ELEMENT = 2 * 16
"""A 16 x 16 random Hadamard transform: 16 multiply-adds per element (arXiv:2509.25149 sec. 4.2, 16 x 16 RHT)."""
QUANT_COPIES = 2
"""Row-wise and column-wise quantised copies of each quantised tensor: FP4 block-scaled GEMMs take K-major operands
only (cuBLAS docs, "1D block scaling factors layout": block scales run along the reduction dimension), so the
backward's GEMMs read a copy quantised along the other dimension."""


def fp4_element_bytes(recipe: str) -> float:
    """Bytes per element of an FP4 tensor with its block scales."""
    return E2M1_BYTES + SCALE_BYTES / BLOCK_ELEMENTS[recipe]


def fp4_weight_bytes(recipe: str) -> float:
    """Bytes per parameter of an FP4 weight with what its three GEMMs read: the row-wise and the column-wise
    (transposed) quantised copies, each with its block scales (TE's ``NVFP4Tensor`` keeps ``_rowwise_data`` /
    ``_columnwise_data`` and their ``_scale_inv`` tensors)."""
    return QUANT_COPIES * fp4_element_bytes(recipe)


def layer_weight_bytes(e: ExecutionSpec, *, param_bytes: float) -> tuple[float, float]:
    """(parameter, fp4 cache) bytes per transformer-layer GEMM parameter of an fp4 execution: ``fp4_param`` keeps
    the FP4 weight only (megatron-core ``fp8_model_init`` under ``get_fp4_context(is_init=True)``); otherwise the
    bf16 parameter plus TE's per-step cache of its quantised copies."""
    if e.fp4_param:
        return fp4_weight_bytes(e.fp4_recipe), 0.0
    return param_bytes, fp4_weight_bytes(e.fp4_recipe)


def _quantise_pass(elements: float, gpu: GPUSpec, recipe: str, *, hadamard: bool, hbm_s: float) -> float:
    """Seconds to read ``elements`` bf16 values and write both quantised copies, the Hadamard on one of them."""
    nbytes = elements * (2.0 + QUANT_COPIES * fp4_element_bytes(recipe))
    memory = nbytes * hbm_s
    if not hadamard:
        return memory
    flops = elements * HADAMARD_FLOPS_PER_ELEMENT
    math = flops / (gpu.bf16_dense_tflops * 1e12 * gpu.efficiency.gemm_max)
    return max(memory, math)


def quantise_seconds(m: float, n: float, k: float, gpu: GPUSpec, recipe: str, *, count: float = 1.0
                     ) -> tuple[float, float]:
    """(forward, backward) seconds of the quantisation passes of ``count`` FP4 GEMMs of M tokens x N outputs x K
    inputs: the input (M x K) in forward, the output gradient (M x N) in backward, each read once in bf16 and written
    as two quantised copies at HBM bandwidth x ``Efficiency.hbm`` (the Hadamard of NVFP4's wgrad copies at the BF16
    tensor-core rate when that is slower)."""
    if m <= 0 or count <= 0:
        return 0.0, 0.0
    hbm_s = 1.0 / (gpu.hbm_bandwidth_bytes_per_s * gpu.efficiency.hbm)
    hadamard = recipe == "nvfp4"
    fwd = _quantise_pass(m * k, gpu, recipe, hadamard=hadamard, hbm_s=hbm_s)
    bwd = _quantise_pass(m * n, gpu, recipe, hadamard=hadamard, hbm_s=hbm_s)
    return count * fwd, count * bwd


def fp4_problem(gpu: GPUSpec, recipe: str) -> str | None:
    """Why ``recipe`` cannot train on ``gpu`` (a sentence), or ``None`` when it can."""
    if gpu.fp4_dense_tflops <= 0:
        return (f"{gpu.name} has no FP4 tensor cores (its profile states no fp4_dense_tflops): FP4 training "
                "cannot run there")
    # the profile's formats (hardware/families.yaml): NVFP4 on NVIDIA Blackwell (sm_100 tcgen05 block-scaled MMA;
    # TE's NVFP4BlockScaling needs compute capability >= 10.0); MXFP4 where Primus runs it, AMD CDNA4 (megatron-core
    # 0.16's fp4_recipe offers nvfp4 and custom only, transformer_config.py at core_v0.16.1)
    if gpu.runs(recipe) is False:
        other = "mxfp4" if recipe == "nvfp4" else "nvfp4"
        return (f"fp4_recipe {recipe} does not run on {gpu.name} ({gpu.family}): NVFP4 is megatron-core's recipe for "
                f"NVIDIA Blackwell, MXFP4 Primus's for AMD CDNA4 (use fp4_recipe: {other})")
    return None


__all__ = ["fp4_element_bytes", "fp4_problem", "fp4_weight_bytes", "layer_weight_bytes", "quantise_seconds"]
