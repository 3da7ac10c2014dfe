"""``kimi_delta``: a Kimi delta attention (KDA) mixer layer (Kimi Team, "Kimi Linear: An Expressive, Efficient
Attention Architecture", arXiv:2510.26692, 2025), symbol ``K`` (no upstream symbol: Megatron-LM main's hybrid
``Symbols`` have none). A variant of the gated DeltaNet kind (``kinds.gated_delta``): the same chunked delta rule,
the same recipe keys (``linear_*``), its own record (``KimiDeltaDims``) and module.

The module priced is Primus's ``KimiDeltaAttention`` behind ``KimiDeltaAttentionLayer`` (primus/backends/megatron/
core/models/hybrid/kimi_delta_attention.py and kimi_delta_attention_layer.py at Primus HEAD; the mixer of its
``kda_hybrid_stack_spec`` / ``_no_te``): ``in_proj`` (hidden -> q, k, v, the gate's and the output gate's low-rank
inputs f_a and g_a, one ``linear_value_head_dim`` wide each, beta per value head; the pre-norm fused under TE), a
depthwise causal conv1d over q, k, v, ``f_b_proj`` (f_a -> one decay per key channel of every value head: the
channel-wise gate, finer than GDN's one per head), ``A_log`` and a per-channel ``dt_bias``, the chunked KDA rule,
``g_b_proj`` (g_a -> the v-wide output gate, with bias), a gated RMSNorm per value head, ``out_proj``. The TE spec adds
a ``gate_norm`` over hidden_size (the local spec an ``IdentityOp``). The module asserts TP = 1.

Parameters are exact against Primus's module (``tests/model/kinds/test_kimi_delta.py`` builds it from the Primus
mirror); FLOPs, seconds and saved bytes are analytic (flash-linear-attention's ``chunk_kda`` does not run on a CPU,
and fla is not installed here): the rule's multiply-accumulates are the gated delta rule's (the channel-wise decay
scales q and k elementwise inside the same chunk products), its gate is fp32 per key channel, not per head.
"""

from __future__ import annotations

from dataclasses import dataclass

from primus_ext.model import params as P
from primus_ext.model import roofline as R
from primus_ext.model.kinds.gated_delta import CHUNK, FP32_BYTES, GatedDeltaDims, GatedDeltaKind


@dataclass(frozen=True, kw_only=True)
class KimiDeltaDims(GatedDeltaDims):
    """KDA's sizes: the gated DeltaNet keys (megatron-core 0.16.1 TransformerConfig defaults), its own projections."""

    @property
    def in_proj_dim(self) -> int:
        """q, k, v, f_a and g_a (``linear_value_head_dim`` each), beta (one per value head):
        ``KimiDeltaAttention.in_proj_dim``."""
        return 2 * self.qk_dim + self.v_dim + 2 * self.linear_value_head_dim + self.linear_num_value_heads

    @property
    def gate_dim(self) -> int:
        """Decay channels: ``linear_key_head_dim`` per value head (``gate_dim_local_tp``)."""
        return self.linear_num_value_heads * self.linear_key_head_dim


class KimiDeltaKind(GatedDeltaKind):
    """``kimi_delta``: pre-norm + KDA mixer + residual."""

    name = "kimi_delta"
    symbol = "K"
    dims_type = KimiDeltaDims
    builder = "primus_ext.measure.kimi_delta_builder:BUILDER"  # Primus's module: analytic where primus does not import
    part = "kda"
    label = "Kimi delta attention"

    def split_problem(self, model, execution):
        if execution.tp > 1:
            return (f"Kimi delta attention: Primus's KimiDeltaAttention asserts tensor parallel 1 (got "
                    f"{execution.tp}: 'KDA fused in_proj currently requires tp_size=1')",
                    "set tensor_model_parallel_size: 1")
        return super().split_problem(model, execution)

    def linears(self, d, h, tp):
        # in_proj and out_proj are TE linears; f_b_proj and g_b_proj are torch nn.Linear (bf16)
        return ((f"{self.part}_linear", d.in_proj_dim // tp, h, True),
                (f"{self.part}_gate", d.gate_dim // tp, d.linear_value_head_dim, False),
                (f"{self.part}_gate", d.v_dim // tp, d.linear_value_head_dim, False),
                (f"{self.part}_linear", h, d.v_dim // tp, True))

    def gate_bytes(self, d) -> float:
        # the fp32 decay per key channel, beta, A (``CHUNK`` wide)
        return FP32_BYTES * d.linear_key_head_dim + (1 + CHUNK) * R.ACT_BYTES

    def saved_gate_bytes(self, d, e) -> float:
        """fp32 decay per key channel, beta, and the chunk's two intra-chunk matrices (q-k and k-k, ``CHUNK`` wide
        each): fla's ``chunk_kda`` saves both (assumed from its algorithm, not measured: fla is not installed)."""
        return FP32_BYTES * d.linear_key_head_dim + e + 2 * e * CHUNK

    def params(self, shape, *, impl="te") -> int:
        d, h, t, a = shape.arch.dims, shape.arch.hidden_size, shape.tp, shape.arch
        norm = P.norm_params(a, h)  # the pre-norm: fused into in_proj (TE) or the layer's own (local)
        gate_norm = P.norm_params(a, h) if impl == "te" else 0  # kda_hybrid_stack_spec's TENorm; no_te: IdentityOp
        conv = d.conv_dim // t * d.linear_conv_kernel_dim  # depthwise, no bias (conv_bias=False)
        gate = (d.linear_value_head_dim + 1) * d.gate_dim // t + d.linear_num_value_heads // t  # f_b, dt_bias, A_log
        out_gate = (d.linear_value_head_dim + 1) * d.v_dim // t  # g_b_proj, with bias
        out_norm = P.norm_params(a, d.linear_value_head_dim)
        return (norm + gate_norm + h * d.in_proj_dim // t + conv + gate + out_gate + out_norm
                + d.v_dim // t * h)


KINDS = (KimiDeltaKind(),)
"""What the registry registers from this module (``kinds.registry``)."""
