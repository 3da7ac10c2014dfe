"""Grouped expert GEMMs for the local spec on a GPU without transformer-engine.

Usage (``build.py``, for an MoE layer on CUDA without TE)::

    reason = grouped_unavailable(shape, dtype)      # None when the experts can run grouped
    if reason is None:
        apply_torch_grouped_gemm()                  # megatron's legacy GroupedMLP on torch._grouped_mm

Without TE the local spec runs the experts as ``SequentialMLP``: one GEMM (and its launches) per local
expert, where a production run issues one grouped GEMM for all of them (TE's ``GroupedLinear``). Measured
that way, a layer with many small experts would be priced by its launch count, not by the model.
megatron-core's legacy ``GroupedMLP`` runs all local experts as grouped GEMMs through the external
``grouped_gemm`` package's ``ops.gmm``; where that package is absent this module provides the op with
PyTorch's own grouped GEMM (``torch._grouped_mm``, bf16) and installs it into megatron's
``grouped_gemm_util``, so the module megatron builds and runs is megatron's own. Measurements say so in
their notes (``NOTE``). The op is checked against a per-expert loop, forward and backward, on CPU, and
probed on the measuring device (uneven and empty groups, values checked) before a layer uses it.
GroupedMLP's activation goes through megatron's ``jit_fuser`` (``torch.compile``): its compilation falls
in the warm-up passes, as in a real run.
"""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace

import torch

from primus_ext.model.rank_shape import RankShape

NOTE = ("experts: megatron's GroupedMLP on PyTorch's grouped GEMM (torch._grouped_mm) stands in for "
        "transformer-engine's GroupedLinear (TE absent on this GPU)")
PACKAGE_NOTE = ("experts: megatron's GroupedMLP on the grouped_gemm package stands in for transformer-engine's "
                "GroupedLinear (TE absent on this GPU)")
ALIGN_ELEMENTS = 8
"""torch._grouped_mm on CUDA wants each operand's leading stride a multiple of 16 bytes: 8 bf16 elements."""


def gmm(a: torch.Tensor, b: torch.Tensor, batch_sizes: torch.Tensor, trans_b: bool = False) -> torch.Tensor:
    """``grouped_gemm.ops.gmm``: rows ``a[start_i:end_i]`` times ``b[i]`` (``b[i]^T`` with ``trans_b``) for
    the consecutive row groups of sizes ``batch_sizes`` (one per expert), stacked."""
    offsets = torch.cumsum(batch_sizes, 0, dtype=torch.int32)
    if offsets.device != a.device:  # megatron hands the counts over on the host, as grouped_gemm reads them
        offsets = offsets.pin_memory().to(a.device, non_blocking=True) if a.is_cuda else offsets.to(a.device)
    return torch._grouped_mm(a, b.transpose(-2, -1) if trans_b else b, offs=offsets)


def grouped_unavailable(shape: RankShape, dtype: torch.dtype, device: torch.device | None = None) -> str | None:
    """Why the experts of ``shape`` cannot run grouped here (``None``: they can); with ``device``, a small
    forward and backward of the op on it in megatron's weight layout must run first."""
    if not hasattr(torch, "_grouped_mm"):
        return f"torch {torch.__version__} has no grouped GEMM"
    if shape.arch.add_bias_linear:
        return "expert biases: megatron's GroupedMLP has none"
    if dtype != torch.bfloat16:
        return f"{dtype}: the GPU grouped GEMM is bf16"
    a = shape.arch
    fc1 = a.moe_ffn_hidden_size // max(shape.etp, 1) * (2 if a.gated else 1)
    if a.hidden_size % ALIGN_ELEMENTS or fc1 % ALIGN_ELEMENTS:
        return f"hidden {a.hidden_size} / expert fc1 {fc1} not multiples of {ALIGN_ELEMENTS} (16-byte strides)"
    return None if device is None else _probe(str(device), dtype)


@cache
def _probe(device: str, dtype: torch.dtype) -> str | None:
    """A grouped GEMM with uneven and empty groups, forward and backward, against a per-expert loop."""
    sizes = torch.tensor([3, 0, 45])
    try:
        with torch.enable_grad():
            a = torch.randn(48, 64, device=device, dtype=dtype, requires_grad=True)
            b = torch.randn(3, 64, 32, device=device, dtype=dtype, requires_grad=True)  # [experts, in, out]
            out = gmm(a, b, sizes)
            out.backward(torch.ones_like(out))
            if device.startswith("cuda"):
                torch.cuda.synchronize()  # an asynchronous kernel error surfaces here, inside the try
        want = torch.cat([a[:3] @ b[0], a[3:] @ b[2]]).float()
        # bf16 keeps 8 significant bits (relative step 2^-8 = 0.4 %); sums of 64 unit-normal products are ~8
        # in size, so two bf16 roundings differ by ~0.03: tolerances a few times that, far below a wrong result
        if not torch.allclose(out.float(), want, rtol=2e-2, atol=2e-1):
            return f"torch._grouped_mm on {device} disagrees with a per-expert loop"
    except RuntimeError as err:
        return f"torch._grouped_mm failed on {device}: {str(err).splitlines()[0][:160]}"
    return None


def apply_torch_grouped_gemm() -> str:
    """Install ``gmm`` as megatron's grouped GEMM op (idempotent; a real ``grouped_gemm`` package stays);
    returns the note of the op the experts will run on."""
    from megatron.core.transformer.moe import grouped_gemm_util

    if grouped_gemm_util.grouped_gemm is not None and not getattr(grouped_gemm_util.grouped_gemm, "primus_ext", False):
        return PACKAGE_NOTE
    ops = SimpleNamespace(gmm=gmm)
    grouped_gemm_util.grouped_gemm = SimpleNamespace(ops=ops, primus_ext=True)
    grouped_gemm_util.ops = ops
    return NOTE
