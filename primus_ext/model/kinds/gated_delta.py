"""``gated_delta``: a gated DeltaNet mixer layer (Yang, Kautz, Hatamizadeh, "Gated Delta Networks: Improving Mamba2
with Delta Rule", arXiv:2412.06464, 2024), symbol ``G`` (Megatron-LM main's hybrid ``Symbols.GDN``,
megatron/core/models/hybrid/hybrid_layer_allocation.py). One kind, its own keys, its own module.

The module priced is megatron-core 0.16.1's ``ssm/gated_delta_net.py`` ``GatedDeltaNet`` (the one Primus's
``gdn_hybrid_stack_spec`` copies; Qwen3-Next / Qwen3.5's linear-attention layers) behind a pre-norm and a residual
add (Primus ``GatedDeltaNetLayer``): ``in_proj`` (hidden -> q, k, v, output gate z, beta, alpha; its norm fused),
a depthwise causal conv1d over q, k, v, the chunked gated delta rule (q, k repeated from ``linear_num_key_heads`` to
``linear_num_value_heads`` heads), a gated RMSNorm over each value head, ``out_proj``. Parameters are exact against
the real module (``tests/model/kinds/test_gated_delta.py`` builds it); FLOPs, seconds and saved bytes are analytic:
its kernels (flash-linear-attention's ``chunk_gated_delta_rule``) do not run on a CPU.

Its hyper-parameters are its own (``GatedDeltaDims``), read from the recipe keys megatron-core names them by
(TransformerConfig ``linear_*``: Qwen3-Next's config.json ``linear_*`` sizes). Not recomputable (a hybrid stack has
no layer-checkpointing path; the mixer is not a selective-recompute module); no CP (megatron-core 0.16.1: "TODO:
support CP").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from primus_ext.model import params as P
from primus_ext.model import roofline as R
from primus_ext.model.kinds.base import Kind, KindComm, KindDims, no_recompute
from primus_ext.model.memory import activations as A
from primus_ext.model.rank_shape import layer_arch

CHUNK = 64
"""Tokens per chunk of the chunked delta rule (flash-linear-attention ``chunk_gated_delta_rule`` BT = 64;
megatron-core 0.16.1 ``torch_chunk_gated_delta_rule(chunk_size=64)``)."""
RULE_BWD_FLOPS = 2.0
"""Backward / forward FLOPs of the delta rule's chunk matmuls (each product differentiated w.r.t. both operands, as
a GEMM's dgrad + wgrad); assumed, as for Mamba's SSD scan (``kinds.mamba.SCAN_BWD_FLOPS``), not measured."""
FP32_BYTES = 4
"""g (the decay) enters the kernel in fp32 (``GatedDeltaNet.forward``: ``g`` computed "In fp32")."""


@dataclass(frozen=True, kw_only=True)
class GatedDeltaDims(KindDims):
    """The gated DeltaNet sizes (megatron-core 0.16.1 TransformerConfig defaults)."""

    linear_conv_kernel_dim: int = 4
    """Causal conv1d taps."""
    linear_key_head_dim: int = 128
    """Query / key channels per head."""
    linear_value_head_dim: int = 128
    """Value channels per head."""
    linear_num_key_heads: int = 16
    """Query / key heads."""
    linear_num_value_heads: int = 32
    """Value heads (the delta rule runs this many; a multiple of the key heads)."""

    @property
    def qk_dim(self) -> int:
        return self.linear_key_head_dim * self.linear_num_key_heads

    @property
    def v_dim(self) -> int:
        return self.linear_value_head_dim * self.linear_num_value_heads

    @property
    def in_proj_dim(self) -> int:
        """q, k, v, the output gate z (v-wide), beta and alpha (one per value head): ``GatedDeltaNet.in_proj_dim``."""
        return 2 * self.qk_dim + 2 * self.v_dim + 2 * self.linear_num_value_heads

    @property
    def conv_dim(self) -> int:
        return 2 * self.qk_dim + self.v_dim


def rule_macs_per_token(d: GatedDeltaDims) -> float:
    """Forward multiply-accumulates of the chunked delta rule per token, all value heads (megatron-core 0.16.1
    ``torch_chunk_gated_delta_rule``, Qwen3-Next's reference): per head, the chunk's k_beta k^T, attn v_beta,
    attn k_beta, q k^T, attn v_new (C x d each, per token) and q S, k_cumdecay S, k^T v_new (dk x dv each); the
    triangular solve, C^2 / 3 per token."""
    dk, dv = d.linear_key_head_dim, d.linear_value_head_dim
    per_head = CHUNK * (3 * dk + 2 * dv) + 3 * dk * dv + CHUNK * CHUNK / 3
    return d.linear_num_value_heads * per_head


class GatedDeltaKind(Kind):
    """``gated_delta``: pre-norm + gated DeltaNet mixer + residual."""

    name = "gated_delta"
    symbol = "G"
    decoder_layer = True
    dims_type = GatedDeltaDims
    builder = "primus_ext.measure.gated_delta_builder:BUILDER"
    part = "gdn"
    """The prefix of its roofline and saved-bytes part names."""
    label = "gated DeltaNet"
    """Its name in a sentence."""

    def layer_arch(self, model, execution):
        return replace(layer_arch(model, moe=False), dims=self.dims(model))

    def check_dims(self, dims):
        found = []
        for key in ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
                    "linear_num_value_heads"):
            if getattr(dims, key) < 1:
                found.append((key, "must be a positive integer", f"set {key} to a whole number >= 1"))
        if not found and dims.linear_num_value_heads % dims.linear_num_key_heads:
            found.append(("linear_num_value_heads", "must be a multiple of linear_num_key_heads (megatron-core "
                          "TransformerConfig asserts it)", "choose value heads = a multiple of key heads"))
        return found

    def split_problem(self, model, execution):
        d = self.dims(model)
        if d.linear_num_key_heads % execution.tp or d.linear_num_value_heads % execution.tp:
            return (f"{self.label}: linear_num_key_heads ({d.linear_num_key_heads}) and linear_num_value_heads "
                    f"({d.linear_num_value_heads}) must be multiples of TP ({execution.tp}); megatron-core "
                    "TransformerConfig asserts it", "choose TP dividing the linear-attention key and value heads")
        if execution.cp > 1:
            return (f"{self.label} has no context parallelism (megatron-core 0.16.1 gated_delta_net.py: "
                    "'TODO: support CP'; Primus's KimiDeltaAttention splits no sequence either)",
                    "set context_parallel_size: 1")
        return None

    def shape_fields(self, fields: dict) -> dict:
        return no_recompute(fields)

    def linears(self, d: GatedDeltaDims, h: int, tp: int) -> tuple[tuple[str, int, int, bool], ...]:
        """(part, N, K, TE) of each weight GEMM per token on one rank (M = its tokens): ``in_proj`` and ``out_proj``
        (TE linears: the GEMM precision applies), the mixer's other ``nn.Linear`` s (bf16) in a subclass."""
        return ((f"{self.part}_linear", d.in_proj_dim // tp, h, True), (f"{self.part}_linear", h, d.v_dim // tp, True))

    def gate_bytes(self, d: GatedDeltaDims) -> float:
        """Bytes per token and value head the rule reads besides q, k, v and writes besides its output: the fp32
        decay g, beta and the intra-chunk matrix A (``CHUNK`` wide)."""
        return FP32_BYTES + (1 + CHUNK) * R.ACT_BYTES

    def model_macs(self, model, seq_length, causal) -> dict[str, float]:
        d, h = self.dims(model), model.hidden_size
        return {"attention_linear": sum(n * k for _, n, k, _ in self.linears(d, h, 1)),
                "attention_core": d.conv_dim * d.linear_conv_kernel_dim + rule_macs_per_token(d)}

    def params(self, shape, *, impl="te") -> int:
        d, h, t = shape.arch.dims, shape.arch.hidden_size, shape.tp
        norm = P.norm_params(shape.arch, h)  # the pre-norm, fused into in_proj (TELayerNormColumnParallelLinear)
        conv = d.conv_dim // t * d.linear_conv_kernel_dim  # depthwise, no bias (conv_bias=False)
        heads = 2 * d.linear_num_value_heads // t  # dt_bias, A_log
        return norm + h * d.in_proj_dim // t + conv + heads + d.linear_value_head_dim + d.v_dim // t * h

    def roofline(self, parts, shape, gpu) -> None:
        d, h, t, tokens = shape.arch.dims, shape.arch.hidden_size, shape.tp, shape.tokens
        g = partial(R.gemm_seconds, gpu=gpu, precision=shape.precision, recipe=R.gemm_recipe(shape))
        for part, n, k, te in self.linears(d, h, t):
            parts.gemm(part, g(tokens, n, k) if te else g(tokens, n, k, precision="bf16"))
        conv = R.membound_seconds(2 * R.ACT_BYTES * tokens * d.conv_dim / t, gpu)
        flops = 2 * rule_macs_per_token(d) / t * tokens
        peak = gpu.peak_tflops("bf16") * 1e12  # the rule runs in bf16 / fp32 whatever the GEMM precision
        math_s = flops / (peak * R.gemm_efficiency(flops, gpu))
        moved = tokens / t * ((2 * d.qk_dim + 2 * d.v_dim) * R.ACT_BYTES
                              + d.linear_num_value_heads * self.gate_bytes(d))
        rule = max(math_s, R.membound_seconds(moved, gpu))
        parts.other(f"{self.part}_rule", rule + conv, RULE_BWD_FLOPS * rule + (R.MEMBOUND_BWD_FACTOR + 1) * conv)
        gated = R.membound_seconds(R.NORM_PASSES * tokens * d.v_dim / t * R.ACT_BYTES, gpu)
        parts.other(f"{self.part}_norm", gated, R.MEMBOUND_BWD_FACTOR * gated)
        rows = tokens / t if shape.sequence_parallel else tokens
        norm = R.membound_seconds(R.NORM_PASSES * rows * h * R.ACT_BYTES, gpu)
        parts.other("layernorm", norm, R.MEMBOUND_BWD_FACTOR * norm)
        residual = R.membound_seconds(3 * rows * h * R.ACT_BYTES, gpu)  # read 2, write 1
        parts.other("residual", residual, residual)

    def fwd_flops_estimate(self, shape) -> float:
        d, h = shape.arch.dims, shape.arch.hidden_size
        linear = sum(n * k for _, n, k, _ in self.linears(d, h, 1))
        per_token = linear + d.conv_dim * d.linear_conv_kernel_dim + rule_macs_per_token(d)
        return 2 * per_token / shape.tp * shape.tokens

    def saved(self, shape, impl) -> dict[str, float]:
        """Bytes saved for backward: the pre-norm's input and output, the conv's input and output (the l2 norm's
        and the rule's input), the l2-normed q and k, the rule's fp32 decay g, its beta and its intra-chunk matrix A
        (``CHUNK`` per token and head), the gate z, the rule's output (the gated norm's input) and ``out_proj``'s
        input. The rule's saved set is flash-linear-attention's ``ChunkGatedDeltaRuleFunction`` (q, k, v, g, beta,
        A; chunk states recomputed in backward) as read from its source, not walked here: fla is not installed."""
        e, lin_e, ts = A._sizes(shape, impl)
        a, d, t, x = shape.arch, shape.arch.dims, shape.tp, self.part
        rows = shape.tokens / t
        return {"input_norm": A._norm(impl, a.normalization == "LayerNorm", e, ts, a.hidden_size),
                "input_norm_out": lin_e * ts * a.hidden_size,
                f"{x}_conv_in": e * rows * d.conv_dim,
                f"{x}_qkv": e * rows * d.conv_dim,
                f"{x}_qk_normed": e * rows * 2 * d.qk_dim,
                f"{x}_rule_gates": rows * d.linear_num_value_heads * self.saved_gate_bytes(d, e),
                f"{x}_z": e * rows * d.v_dim,
                f"{x}_out": e * rows * d.v_dim,
                f"{x}_out_proj_in": lin_e * rows * d.v_dim}

    def saved_gate_bytes(self, d: GatedDeltaDims, e: float) -> float:
        """Bytes the rule saves per token and value head besides q, k, v: its fp32 decay g, beta, A."""
        return FP32_BYTES + e + e * CHUNK

    def comm(self, shape, sequence_parallel) -> KindComm:
        # in_proj column-parallel, out_proj row-parallel: one TP exchange per pass, like Mamba's mixer
        return KindComm(pairs=((self.part, "tp"),))


KINDS = (GatedDeltaKind(),)
"""What the registry registers from this module (``kinds.registry``)."""
