"""``mamba``: a hybrid model's ``M`` layer, megatron-core 0.16.1 ``MambaLayer`` (RMSNorm fused into the mixer's
``in_proj``, Mamba-2 mixer, residual add). The formulas are ``model.hybrid``'s; this class prices them.

Not recomputable: ``MambaStack`` (ssm/mamba_block.py@0.16.1) has no activation-checkpointing path, unlike
``TransformerBlock``. No attention, per-layer CUDA graphs (its graph scope is
``mamba``: captured), no LoRA targets. Costs are analytic (roofline): the SSD scan and conv1d kernels (mamba_ssm /
causal_conv1d Triton and CUDA) do not run on a CPU.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from primus_ext.model import hybrid as Hy
from primus_ext.model import roofline as R
from primus_ext.model.kinds.base import Kind, KindComm, no_recompute
from primus_ext.model.macs import FLOPS_PER_MAC
from primus_ext.model.memory import activations as A
from primus_ext.model.rank_shape import execution_fields, layer_arch
from primus_ext.specs import ExecutionSpec

SCAN_BWD_FLOPS = 2.0
"""Backward / forward FLOPs of the SSD chunk matmuls: each product is differentiated w.r.t. both operands
(as a GEMM's dgrad + wgrad), mamba_ssm ssd_combined.py ``_mamba_chunk_scan_combined_bwd``; assumed, not
measured. The mem-eff path also re-runs the conv1d in backward (``MambaSplitConv1dScanCombinedFn.backward``)."""


def scan_seconds(shape, gpu) -> tuple[float, float]:
    """(forward, backward) seconds of the conv1d + SSD scan on one rank: the slower of the chunk matmuls'
    FLOPs at GEMM efficiency and their HBM bytes (``hybrid.scan_bytes``); analytic, labelled so."""
    flops = sum(Hy.ssd_flops(shape).values())
    peak = gpu.peak_tflops("bf16") * 1e12  # the scan runs in bf16 / fp32 whatever the GEMM precision
    math_s = flops / (peak * R.gemm_efficiency(flops, gpu)) if flops > 0 else 0.0
    fwd = max(math_s, R.membound_seconds(Hy.scan_bytes(shape, R.ACT_BYTES), gpu))
    conv = R.membound_seconds(2 * R.ACT_BYTES * shape.tokens * (Hy.in_proj_width(shape)), gpu)
    return fwd + conv, SCAN_BWD_FLOPS * fwd + R.MEMBOUND_BWD_FACTOR * conv + conv


class MambaKind(Kind):
    """``mamba``: norm + Mamba-2 mixer (in_proj, conv1d, SSD scan, gated RMSNorm, out_proj) + residual."""

    name = "mamba"
    symbol = Hy.MAMBA
    decoder_layer = True
    layer_graph = True  # MambaLayer is a GraphableMegatronModule (cuda_graph_scope "mamba")

    def layer_arch(self, model, execution):
        # the model's, with the mixer's sizes (``model.hybrid`` defaults for K and Q)
        return replace(layer_arch(model, moe=False), mamba_num_heads=model.mamba_num_heads,
                       mamba_head_dim=model.mamba_head_dim, mamba_num_groups=model.mamba_num_groups,
                       mamba_state_dim=model.mamba_state_dim, mamba_d_conv=Hy.MAMBA_D_CONV,
                       mamba_chunk_size=Hy.MAMBA_CHUNK_SIZE)

    def split_problem(self, model, execution):
        why = Hy.check_mamba_split(model.mamba_num_heads, model.mamba_num_groups, execution.tp, execution.cp)
        return (why, "choose TP (and CP) dividing mamba_num_heads and mamba_num_groups") if why else None

    def shape_fields(self, fields: dict) -> dict:
        return no_recompute(fields)  # MambaStack has no activation-checkpointing path

    def model_macs(self, model, seq_length, causal) -> dict[str, float]:
        # the SSD algorithm's chunk matmuls, the conv1d and the projections (``hybrid.layer_flops``), per token;
        # megatron-core's own ``hybrid_flops`` (training.py@core_v0.16.1) counts the scan as 7 * d_in * N
        execution = ExecutionSpec(seq_length=seq_length)
        shape = self.shape(model, execution, execution_fields(execution))
        return {"mamba": Hy.layer_flops(shape) / FLOPS_PER_MAC / shape.tokens}

    def params(self, shape, *, impl="te") -> int:
        return Hy.mixer_params(shape)

    def roofline(self, parts, shape, gpu) -> None:
        a, t = shape.arch, shape.tokens
        g = partial(R.gemm_seconds, gpu=gpu, precision=shape.precision, recipe=R.gemm_recipe(shape))
        d_inner = a.mamba_num_heads * a.mamba_head_dim / shape.tp
        parts.gemm("mamba_linear", g(t, Hy.in_proj_width(shape), a.hidden_size))
        parts.gemm("mamba_linear", g(t, a.hidden_size, d_inner))
        fwd, bwd = scan_seconds(shape, gpu)
        parts.other("mamba_scan", fwd, bwd)
        gated = R.membound_seconds(R.NORM_PASSES * t * d_inner * R.ACT_BYTES, gpu)
        parts.other("mamba_norm", gated, R.MEMBOUND_BWD_FACTOR * gated)
        rows = t / shape.tp if shape.sequence_parallel else t
        norm = R.membound_seconds(R.NORM_PASSES * rows * a.hidden_size * R.ACT_BYTES, gpu)
        parts.other("layernorm", norm, R.MEMBOUND_BWD_FACTOR * norm)
        residual = R.membound_seconds(3 * rows * a.hidden_size * R.ACT_BYTES, gpu)  # read 2, write 1
        parts.other("residual", residual, residual)

    def fwd_flops_estimate(self, shape) -> float:
        return Hy.layer_flops(shape)

    def saved(self, shape, impl) -> dict[str, float]:
        e, lin_e, ts = A._sizes(shape, impl)
        a = shape.arch
        parts = {"input_norm": A._norm(impl, a.normalization == "LayerNorm", e, ts, a.hidden_size),
                 "input_norm_out": lin_e * ts * a.hidden_size}
        parts.update(Hy.mamba_saved(shape, e))
        return parts

    def comm(self, shape, sequence_parallel) -> KindComm:
        # in_proj column-parallel, out_proj row-parallel: one TP exchange per pass, like a dense MLP. The CP
        # all-to-alls (hybrid module docstring) are not priced here; nothing re-runs (not recomputable).
        return KindComm(pairs=(("mamba", "tp"),))


KINDS = (MambaKind(),)
"""What the registry registers from this module (``kinds.registry``)."""
