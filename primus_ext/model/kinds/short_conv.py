"""``short_conv``: an LFM2 gated short-convolution mixer (Liquid AI's LFM2; Hugging Face transformers
models/lfm2/modeling_lfm2.py ``Lfm2ShortConv``, which Primus's copies), symbol ``C``: the mixer half of an LFM2
``conv`` layer, its MLP / MoE half a ``-`` / ``E`` (``recipe.linear_attention.lfm_gpt_model`` writes the pattern
from ``lfm_layer_types``).

The module priced is Primus's ``Lfm2ShortConv`` (primus/backends/megatron/core/transformer/attention.py at Primus
HEAD) as ``get_lfm_layer_with_transformer_engine_spec`` places it (gpt_layer_specs.py): the self-attention of a
``TransformerLayer`` with no input norm (the spec sets none: ``IdentityOp``), ``in_proj`` (hidden -> B, C, x),
``B * x``, a depthwise causal conv1d of ``conv_L_cache`` taps, ``C * conv``, ``out_proj``; both linears are
``TELinear`` with ``parallel_mode=None`` (not tensor-parallel), biases when ``conv_bias``. Parameters are exact
against that module (``tests/model/kinds/test_short_conv.py`` builds it from the Primus mirror); FLOPs, seconds and
saved bytes are analytic (``causal_conv1d`` does not run on a CPU). Not recomputable here (as the other hybrid
mixers: the recipes this reads refuse full recompute of layers, ``recipe.linear_attention``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from primus_ext.model import roofline as R
from primus_ext.model.kinds.base import Kind, KindComm, KindDims, no_recompute
from primus_ext.model.memory import activations as A
from primus_ext.model.rank_shape import layer_arch

ELEMENTWISE_PASSES = 11
"""Activation reads + writes per token of ``hidden_size`` elements besides the GEMMs: ``B * x`` (read 2, write 1),
the conv (read 1, write 1), ``C * conv`` (read 2, write 1), the transposes made contiguous around them (read 1,
write 1: ``slow_forward`` / ``cuda_kernels_forward``) and the residual add (read 2, write 1) less the one the GEMM
output already wrote; counted from the module's forward, not measured."""


@dataclass(frozen=True, kw_only=True)
class ShortConvDims(KindDims):
    """LFM2's short-convolution sizes (Primus lfm_base.yaml defaults)."""

    conv_L_cache: int = 3
    """Causal conv1d taps (LFM2's ``conv_L_cache``)."""
    conv_bias: bool = False
    """Biases on ``in_proj``, the conv and ``out_proj``."""


class ShortConvKind(Kind):
    """``short_conv``: LFM2 gated short convolution + residual (no input norm in Primus's spec)."""

    name = "short_conv"
    symbol = "C"
    decoder_layer = True
    dims_type = ShortConvDims
    builder = "primus_ext.measure.short_conv_builder:BUILDER"

    def layer_arch(self, model, execution):
        return replace(layer_arch(model, moe=False), dims=self.dims(model))

    def check_dims(self, dims):
        if dims.conv_L_cache < 1:
            return [("conv_L_cache", "must be a positive integer", "set conv_L_cache to a whole number >= 1")]
        return []

    def split_problem(self, model, execution):
        if execution.tp > 1:
            return (f"LFM2 short convolution: Primus's Lfm2ShortConv builds in_proj / out_proj with parallel_mode=None "
                    f"(not tensor-parallel), so TP {execution.tp} would split the input its linears take whole",
                    "set tensor_model_parallel_size: 1")
        if execution.cp > 1:
            return ("LFM2 short convolution: Lfm2ShortConv's causal conv1d exchanges no context-parallel halo",
                    "set context_parallel_size: 1")
        return None

    def shape_fields(self, fields: dict) -> dict:
        return no_recompute(fields)

    def model_macs(self, model, seq_length, causal) -> dict[str, float]:
        h, d = model.hidden_size, self.dims(model)
        return {"attention_linear": 3 * h * h + h * h, "attention_core": h * d.conv_L_cache}

    def params(self, shape, *, impl="te") -> int:
        h, d = shape.arch.hidden_size, shape.arch.dims
        bias = (3 * h + h + h) if d.conv_bias else 0  # in_proj, conv, out_proj
        return 3 * h * h + h * d.conv_L_cache + h * h + bias

    def roofline(self, parts, shape, gpu) -> None:
        h, tokens = shape.arch.hidden_size, shape.tokens
        g = partial(R.gemm_seconds, gpu=gpu, precision=shape.precision, recipe=R.gemm_recipe(shape))
        parts.gemm("conv_linear", g(tokens, 3 * h, h))
        parts.gemm("conv_linear", g(tokens, h, h))
        mix = R.membound_seconds(ELEMENTWISE_PASSES * tokens * h * R.ACT_BYTES, gpu)
        parts.other("conv_mix", mix, R.MEMBOUND_BWD_FACTOR * mix)

    def fwd_flops_estimate(self, shape) -> float:
        h, d = shape.arch.hidden_size, shape.arch.dims
        return 2.0 * shape.tokens * (4 * h * h + h * d.conv_L_cache)

    def saved(self, shape, impl) -> dict[str, float]:
        """Bytes saved for backward: ``in_proj``'s input, B / C / x (the products' operands), ``B * x`` (the conv's
        input), the conv's output (``C``'s partner) and ``out_proj``'s input."""
        e, lin_e, _ = A._sizes(shape, impl)
        h, rows = shape.arch.hidden_size, shape.tokens
        return {"conv_in_proj_in": lin_e * rows * h, "conv_bcx": e * rows * 3 * h, "conv_bx": e * rows * h,
                "conv_out": e * rows * h, "conv_out_proj_in": lin_e * rows * h}

    def comm(self, shape, sequence_parallel) -> KindComm:
        return KindComm()  # its linears are not tensor-parallel: no TP exchange (TP > 1 is refused)


KINDS = (ShortConvKind(),)
"""What the registry registers from this module (``kinds.registry``)."""
