"""``kimi_k3``: Kimi-K3's layers as the halves of a hybrid stack (``recipe.kimi_k3`` writes the pattern from
``linear_attention_freq`` and ``moe_layer_freq``): a mixer half, ``X`` (Kimi-K3 delta attention), ``J`` (the same on
layer 0, which has no pre-attention mix) or ``L`` (NoPE MLA with a sigmoid output gate), then an MLP half, ``D``
(dense) or ``N`` (Stable Latent MoE).

The modules priced are Primus's (primus/backends/megatron/core at Primus HEAD): ``KimiK3Layer``
(models/kimi_k3/kimi_k3_block.py; specs models/kimi_k3/kimi_k3_layer_specs.py): an input norm, the mixer, a pre-MLP
norm, the MLP, and two ``AttentionResidualMixer`` s (transformer/kimi_k3/attention_residual.py: an RMSNorm gain and a
rank-1 scorer, ``2 * hidden`` parameters each) that replace the residual add with a softmax mix over the block
checkpoints plus the running stream (layer 0 builds no pre-attention mixer). The KDA mixer is
transformer/kimi_k3/kimi_delta_attention.py ``KimiDeltaAttention`` (separate q / k / v projections and convolutions,
a low-rank per-channel decay gate f_a -> f_b, beta, a full-rank output gate ``g_proj``, a gated head-wise RMSNorm,
``o_proj``); the MLA mixer is transformer/kimi_k3/kimi_k3_mla_attention.py ``KimiK3MLASelfAttention`` (megatron-core
MLA, q / kv latent norms always built, plus ``linear_o_gate`` hidden -> heads x v_head_dim); the MoE is
transformer/kimi_k3/moe/k3_stable_latent_moe.py ``StableLatentMoE`` (megatron-core's latent MoE at
``moe_latent_size = routed_expert_hidden_size`` plus an RMSNorm over the latent).

Parameters are exact against Primus's KDA module (``tests/model/kinds/test_kimi_k3.py`` builds it on CPU from the
mirror); the rest by the modules' constructors as read. FLOPs, seconds and saved bytes are analytic; the attention
residuals' are the stack's mean per mixer (``attn_res_candidates``: the candidates a mixer mixes, averaged over the
layers, which the recipe reading writes), so a stage's share is exact only when the pipeline has one stage.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from primus_ext.model import params as P
from primus_ext.model import roofline as R
from primus_ext.model.kinds.base import KindDims
from primus_ext.model.kinds.gated_delta import rule_macs_per_token
from primus_ext.model.kinds.hybrid import HybridAttentionKind, HybridMLPKind, HybridMoEKind
from primus_ext.model.kinds.kimi_delta import KimiDeltaDims, KimiDeltaKind
from primus_ext.model.memory import activations as A
from primus_ext.model.rank_shape import layer_arch

FP32_BYTES = 4
"""The attention-residual mix runs in fp32 (``AttentionResidualMixer``: "All of it runs in fp32")."""
DERIVED = ("attn_res_candidates",)
"""Dims fields the recipe reading writes (not recipe keys)."""


@dataclass(frozen=True, kw_only=True)
class AttnResDims(KindDims):
    """Block attention residuals (Primus kimi_k3_base.yaml ``attn_res_block_size``)."""

    attn_res_block_size: int = 0
    """Layers per checkpoint block (0: plain residuals, no mixers)."""
    attn_res_candidates: float = 0.0
    """Mean candidates (checkpoints + the running stream) one of this kind's mixers mixes (the recipe reading)."""


@dataclass(frozen=True, kw_only=True)
class KimiK3DeltaDims(KimiDeltaDims, AttnResDims):
    """Kimi-K3 KDA's sizes (the ``linear_*`` keys) and its attention residuals'."""

    @property
    def in_proj_dim(self) -> int:
        """q, k, v, beta and the output gate, all from the hidden state (f_a apart: duplicated over TP)."""
        return 2 * self.qk_dim + 2 * self.v_dim + self.linear_num_value_heads


def blocks_before(layer: int, block_size: int) -> int:
    """Checkpoints on entry to 0-indexed ``layer`` (Primus ``attn_res_num_blocks_before``: ceil(layer / size))."""
    return -(-layer // block_size) if block_size else 0


def mean_candidates(num_layers: int, block_size: int) -> tuple[float, float]:
    """(pre-attention, pre-MLP) mean candidates per mixer over the stack: a pre-attention mixer (layers >= 1) mixes
    the checkpoints so far and the stream; a pre-MLP mixer those plus the one its layer appends (``layer % size ==
    0``) and the stream (``KimiK3Layer.forward``)."""
    if not block_size or num_layers < 1:
        return 0.0, 0.0
    attn = [blocks_before(i, block_size) + 1 for i in range(1, num_layers)]
    mlp = [blocks_before(i, block_size) + (i % block_size == 0) + 1 for i in range(num_layers)]
    return (sum(attn) / len(attn) if attn else 0.0), sum(mlp) / len(mlp)


def with_candidates(dims: tuple, num_layers: int, block_size: int) -> tuple:
    """``(kind, record)`` pairs with each Kimi-K3 kind's ``attn_res_candidates`` written: the pre-MLP mean for an
    MLP half, the pre-attention mean for a mixer half (``mean_candidates``); other kinds' records unchanged."""
    pre_mlp = {kind.name: kind.pre_mlp for kind in KINDS}  # this module's kinds (no registry look-up: a circle)
    attn, mlp = mean_candidates(num_layers, block_size)
    return tuple((name, replace(d, attn_res_candidates=mlp if pre_mlp.get(name, False) else attn)
                  if isinstance(d, AttnResDims) else d) for name, d in dims)


class AttnResidual:
    """The cost of one ``AttentionResidualMixer`` per half (none when ``attn_res_block_size`` is 0 or ``mixes`` is
    False): ``2 * hidden`` parameters; per token and candidate an RMS, a dot with the score vector and a weighted sum
    (3 x hidden MACs); memory-bound; saves the candidates' fp32 normalised copy (the eager reference's autograd
    graph, read from attn_res_kernels/_eager/reference.py, not walked)."""

    mixes = True
    pre_mlp = False
    """Its mixer is the pre-MLP one (``attn_res_candidates``: the pre-MLP mean) rather than the pre-attention one."""

    @classmethod
    def recipe_keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls.dims_type) if f.name not in DERIVED)

    def layer_arch(self, model, execution):
        return replace(super().layer_arch(model, execution), dims=self.dims(model))

    def _res(self, d) -> tuple[bool, float]:
        on = self.mixes and bool(d.attn_res_block_size)
        return on, d.attn_res_candidates if on else 0.0

    def res_params(self, shape) -> int:
        return 2 * shape.arch.hidden_size if self._res(shape.arch.dims)[0] else 0

    def res_macs(self, d, h: int) -> float:
        return 3.0 * self._res(d)[1] * h

    def res_roofline(self, parts, shape, gpu) -> None:
        n = self._res(shape.arch.dims)[1]
        if n:
            rows = shape.tokens / shape.tp if shape.sequence_parallel else shape.tokens
            fwd = R.membound_seconds(rows * shape.arch.hidden_size * (n * (R.ACT_BYTES + FP32_BYTES) + R.ACT_BYTES),
                                     gpu)
            parts.other("attn_res_mix", fwd, R.MEMBOUND_BWD_FACTOR * fwd)

    def res_saved(self, shape, parts) -> dict[str, float]:
        n = self._res(shape.arch.dims)[1]
        if n:
            rows = shape.tokens / shape.tp if shape.sequence_parallel else shape.tokens
            parts["attn_res_candidates"] = FP32_BYTES * rows * n * shape.arch.hidden_size
        return parts

    # the mixer's share, added to whatever the half's own kind (next in the MRO) prices
    def fwd_flops_estimate(self, shape) -> float:
        return super().fwd_flops_estimate(shape) + 2.0 * shape.tokens * self.res_macs(shape.arch.dims,
                                                                                         shape.arch.hidden_size)

    def roofline(self, parts, shape, gpu) -> None:
        super().roofline(parts, shape, gpu)
        self.res_roofline(parts, shape, gpu)

    def saved(self, shape, impl):
        return self.res_saved(shape, super().saved(shape, impl))


class KimiK3DeltaKind(AttnResidual, KimiDeltaKind):
    """``kimi_k3_delta`` (``X``): input norm + Kimi-K3 KDA + pre-attention residual mixer."""

    name = "kimi_k3_delta"
    symbol = "X"
    dims_type = KimiK3DeltaDims
    builder = "primus_ext.measure.kimi_k3_builder:BUILDER"  # analytic: Primus's K3 layer is not built here
    part = "kda"
    label = "Kimi-K3 delta attention"

    def split_problem(self, model, execution):
        d = self.dims(model)
        if d.linear_num_key_heads != d.linear_num_value_heads or d.linear_key_head_dim != d.linear_value_head_dim:
            return ("Kimi-K3 delta attention: Primus's KimiDeltaAttention asserts linear_num_key_heads == "
                    "linear_num_value_heads and linear_key_head_dim == linear_value_head_dim",
                    "give keys and values the same heads and head width")
        if execution.tp > 1 and not execution.sequence_parallel:
            return ("Kimi-K3 delta attention: Primus's KimiDeltaAttention asserts sequence_parallel when TP > 1",
                    "set sequence_parallel: true")
        return super(KimiDeltaKind, self).split_problem(model, execution)

    def linears(self, d, h, tp):
        # q, k, v, b, g_proj column-parallel; f_a (hidden -> key head dim) duplicated; f_b; o_proj row-parallel
        return ((f"{self.part}_linear", d.in_proj_dim // tp, h, True),
                (f"{self.part}_gate", d.linear_key_head_dim, h, True),
                (f"{self.part}_gate", d.gate_dim // tp, d.linear_key_head_dim, True),
                (f"{self.part}_linear", h, d.v_dim // tp, True))

    def params(self, shape, *, impl="te") -> int:
        d, h, t, a = shape.arch.dims, shape.arch.hidden_size, shape.tp, shape.arch
        conv = d.conv_dim // t * d.linear_conv_kernel_dim  # three depthwise convs, no bias
        gate = h * d.linear_key_head_dim + d.linear_key_head_dim * d.gate_dim // t  # f_a (duplicated), f_b
        gate += d.gate_dim // t + d.linear_num_value_heads // t  # dt_bias (per channel), A_log (per head)
        return (P.norm_params(a, h) + h * d.in_proj_dim // t + conv + gate + P.norm_params(a, d.linear_value_head_dim)
                + d.v_dim // t * h + self.res_params(shape))

    def model_macs(self, model, seq_length, causal):
        d, h = self.dims(model), model.hidden_size
        return {"attention_linear": sum(n * k for _, n, k, _ in self.linears(d, h, 1)) + self.res_macs(d, h),
                "attention_core": d.conv_dim * d.linear_conv_kernel_dim + rule_macs_per_token(d)}


class KimiK3FirstDeltaKind(KimiK3DeltaKind):
    """``kimi_k3_delta_first`` (``J``): layer 0's KDA half; no checkpoint exists yet, so no pre-attention mixer."""

    name = "kimi_k3_delta_first"
    symbol = "J"
    mixes = False


class KimiK3MLAKind(AttnResidual, HybridAttentionKind):
    """``kimi_k3_mla`` (``L``): input norm + MLA (q / kv latent norms always built) + the sigmoid output gate
    ``linear_o_gate`` (hidden -> heads x v_head_dim, no bias) + pre-attention residual mixer."""

    name = "kimi_k3_mla"
    symbol = "L"
    dims_type = AttnResDims
    builder = "primus_ext.measure.kimi_k3_builder:BUILDER"
    layer_graph = False

    def layer_arch(self, model, execution):
        # KimiK3MLASelfAttention builds q_layernorm / kv_layernorm whatever qk_layernorm says
        return replace(layer_arch(model, moe=False), dims=self.dims(model), qk_layernorm=True)

    def split_problem(self, model, execution):
        if not model.multi_latent_attention:
            return ("Kimi-K3 full attention is MLA (KimiK3MLASelfAttention)", "set multi_latent_attention: true")
        return None

    @staticmethod
    def gate_width(a) -> int:
        return a.num_attention_heads * a.v_head_dim

    def params(self, shape, *, impl="te") -> int:
        a = shape.arch
        return super().params(shape, impl=impl) + a.hidden_size * self.gate_width(a) // shape.tp + self.res_params(
            shape)

    def model_macs(self, model, seq_length, causal):
        found = super().model_macs(model, seq_length, causal)
        d = self.dims(model)
        gate = model.hidden_size * model.num_attention_heads * model.v_head_dim
        return dict(found, attention_linear=found["attention_linear"] + gate + self.res_macs(d, model.hidden_size))

    def fwd_flops_estimate(self, shape) -> float:
        a = shape.arch
        return super().fwd_flops_estimate(shape) + 2.0 * shape.tokens * (a.hidden_size * self.gate_width(a) // shape.tp)

    def roofline(self, parts, shape, gpu) -> None:
        super().roofline(parts, shape, gpu)
        a = shape.arch
        parts.linear("attn_linear", shape.tokens, self.gate_width(a) // shape.tp, a.hidden_size, shape=shape, gpu=gpu)
        gated = R.membound_seconds(3 * shape.tokens * self.gate_width(a) / shape.tp * R.ACT_BYTES, gpu)
        parts.other("mla_output_gate", gated, R.MEMBOUND_BWD_FACTOR * gated)

    def saved(self, shape, impl):
        parts = super().saved(shape, impl)
        e, _, _ = A._sizes(shape, impl)
        parts["mla_output_gate"] = e * shape.tokens / shape.tp * self.gate_width(shape.arch)  # the gate's pre-sigmoid
        return parts


class MLPResidual(AttnResidual):
    """An MLP half with its pre-MLP residual mixer (its MACs under ``mlp``)."""

    dims_type = AttnResDims
    builder = "primus_ext.measure.kimi_k3_builder:BUILDER"
    layer_graph = False
    pre_mlp = True

    def params(self, shape, *, impl="te") -> int:
        return super().params(shape, impl=impl) + self.res_params(shape)

    def model_macs(self, model, seq_length, causal):
        return {"mlp": super().model_macs(model, seq_length, causal)["mlp"]
                + self.res_macs(self.dims(model), model.hidden_size)}


class KimiK3MLPKind(MLPResidual, HybridMLPKind):
    """``kimi_k3_mlp`` (``D``): pre-MLP residual mixer + norm + the dense SwiGLU (``situ``) MLP."""

    name = "kimi_k3_mlp"
    symbol = "D"


class KimiK3MoEKind(MLPResidual, HybridMoEKind):
    """``kimi_k3_moe`` (``N``): pre-MLP residual mixer + norm + ``StableLatentMoE`` (megatron-core latent MoE and an
    RMSNorm over the ``moe_latent_size``-wide combined expert output)."""

    name = "kimi_k3_moe"
    symbol = "N"
    routed_experts = True
    builder = "primus_ext.measure.kimi_k3_builder:MOE_BUILDER"

    def layer_arch(self, model, execution):
        return replace(layer_arch(model, moe=True), dims=self.dims(model))

    def params(self, shape, *, impl="te") -> int:
        latent = shape.arch.moe_latent_size
        return super().params(shape, impl=impl) + (P.norm_params(shape.arch, latent) if latent else 0)


KINDS = (KimiK3DeltaKind(), KimiK3FirstDeltaKind(), KimiK3MLAKind(), KimiK3MLPKind(), KimiK3MoEKind())
"""What the registry registers from this module (``kinds.registry``)."""
