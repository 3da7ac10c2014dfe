"""Grouped expert GEMMs for the local spec on a GPU without transformer-engine.

Usage (``build.py``, for an MoE layer on CUDA without TE)::

    reason = grouped_unavailable(shape, dtype)      # None when the experts can run grouped
    if reason is None:
        apply_torch_grouped_gemm()                  # megatron's legacy GroupedMLP on torch._grouped_mm

Without TE the local spec runs the experts as ``SequentialMLP``: one GEMM (and its launches) per local
expert, where a production run issues one grouped GEMM for all of them (TE's ``GroupedLinear``). Measured
that way, a layer with many small experts would be priced by its launch count, not by the model.
megatron-core's legacy ``GroupedMLP`` runs all local experts as grouped GEMMs through the external
``grouped_gemm`` package's ``ops.gmm``; this module provides that op with PyTorch's own grouped GEMM
(``torch._grouped_mm``: CUTLASS grouped kernels on Hopper in bf16) and installs it into megatron's
``grouped_gemm_util``, so the module megatron builds and runs is megatron's own. Measurements say so in
their notes (``NOTE``). The op is checked against a per-expert loop, forward and backward, on CPU.
"""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace

import torch

NOTE = ("experts: megatron's GroupedMLP on PyTorch's grouped GEMM (torch._grouped_mm) stands in for "
        "transformer-engine's GroupedLinear (TE absent on this GPU)")


def gmm(a: torch.Tensor, b: torch.Tensor, batch_sizes: torch.Tensor, trans_b: bool = False) -> torch.Tensor:
    """``grouped_gemm.ops.gmm``: rows ``a[start_i:end_i]`` times ``b[i]`` (``b[i]^T`` with ``trans_b``) for
    the consecutive row groups of sizes ``batch_sizes`` (one per expert), stacked."""
    offsets = torch.cumsum(batch_sizes.to(device=a.device), 0).to(torch.int32)
    return torch._grouped_mm(a, b.transpose(-2, -1) if trans_b else b, offs=offsets)


def grouped_unavailable(shape, dtype: torch.dtype, device: torch.device | None = None) -> str | None:
    """Why the experts of ``shape`` cannot run grouped here (``None``: they can); with ``device``, a small
    forward and backward of the op on it in megatron's weight layout must run first."""
    if not hasattr(torch, "_grouped_mm"):
        return f"torch {torch.__version__} has no grouped GEMM"
    if shape.arch.add_bias_linear:
        return "expert biases: megatron's GroupedMLP has none"
    if shape.arch.activation not in ("swiglu", "geglu", "gelu", "squared_relu"):
        return f"activation {shape.arch.activation!r}"
    if dtype != torch.bfloat16:
        return f"{dtype}: the GPU grouped GEMM is bf16"
    return None if device is None else _probe(str(device), dtype)


@cache
def _probe(device: str, dtype: torch.dtype) -> str | None:
    try:
        a = torch.randn(48, 64, device=device, dtype=dtype, requires_grad=True)
        b = torch.randn(2, 64, 32, device=device, dtype=dtype, requires_grad=True)  # [experts, in, out], contiguous
        out = gmm(a, b, torch.tensor([16, 32]))
        out.backward(torch.ones_like(out))
    except RuntimeError as err:
        return f"torch._grouped_mm failed on {device}: {str(err).splitlines()[0][:160]}"
    return None


def apply_torch_grouped_gemm() -> None:
    """Install ``gmm`` as megatron's grouped GEMM op (idempotent; leaves a real ``grouped_gemm`` alone)."""
    from megatron.core.transformer.moe import grouped_gemm_util

    if grouped_gemm_util.grouped_gemm is not None and not getattr(grouped_gemm_util.grouped_gemm, "primus_ext", False):
        return
    ops = SimpleNamespace(gmm=gmm)
    grouped_gemm_util.grouped_gemm = SimpleNamespace(ops=ops, primus_ext=True)
    grouped_gemm_util.ops = ops
