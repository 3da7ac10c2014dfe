"""How every console and page states MFU: a percent, with the peak it is taken against (JSON keeps the fraction).

    mfu_basis(gpu, "fp8")            # "FP8"   (the peak ``GPUSpec.peak_tflops`` uses for the precision)
    mfu_text(0.339, gpu, "fp8")      # "MFU 33.9% of the 2,615 TFLOP/s FP8 dense peak; 67.8% of the BF16 peak"
    bf16_mfu(0.339, gpu, "fp8")      # 0.678: the same TFLOP/s over the BF16 dense peak

MFU is model TFLOP/s over the GPU's dense peak for the run's GEMM precision (``Projection.mfu``): an FP8 run is
measured against the FP8 peak, twice the BF16 one on the GPUs here, so its MFU reads half of what the same speed
would in BF16. The text names the basis and, for a precision below BF16, gives the BF16-peak figure too.
"""

from __future__ import annotations

from primus_ext.specs import GPUSpec


def mfu_basis(gpu: GPUSpec, precision: str) -> str:
    """The name of the peak MFU is taken against: ``FP8``, ``FP4``, ``BF16`` (FP8 without FP8 tensor cores: the
    BF16 peak, as ``GPUSpec.peak_tflops`` falls back) or ``FP32``."""
    if precision == "fp8" and gpu.fp8_dense_tflops > 0:
        return "FP8"
    if precision in ("fp4", "fp32"):
        return precision.upper()
    return "BF16"


def bf16_mfu(mfu: float, gpu: GPUSpec, precision: str) -> float:
    """``mfu`` (over the precision's peak) as a fraction of the BF16 dense peak."""
    return mfu * gpu.peak_tflops(precision) / gpu.bf16_dense_tflops if gpu.bf16_dense_tflops > 0 else mfu


def mfu_text(mfu: float, gpu: GPUSpec, precision: str) -> str:
    """``MFU 33.9% of the 2,615 TFLOP/s FP8 dense peak; 67.8% of the BF16 peak`` (the second part for FP8 / FP4)."""
    basis = mfu_basis(gpu, precision)
    text = f"MFU {mfu:.1%} of the {gpu.peak_tflops(precision):,.0f} TFLOP/s {basis} dense peak"
    if basis in ("FP8", "FP4"):
        text += f"; {bf16_mfu(mfu, gpu, precision):.1%} of the BF16 peak"
    return text
