"""``deepseek_v4``: DeepSeek-V4's layers as the halves of a hybrid stack (``recipe.deepseek_v4`` writes the pattern
from ``compress_ratios``): an attention half by compression ratio, ``W`` (0: dense, sliding window), ``S`` (4:
compressed sparse attention, CSA) or ``H`` (128: heavily compressed attention, HCA), then an MoE half, ``V`` (learned
router) or ``U`` (hash router: the first ``num_hash_layers`` layers).

The modules priced are Primus's (primus/backends/megatron/core at Primus HEAD): ``DeepseekV4HybridLayer``
(models/deepseek_v4/deepseek_v4_block.py), its attention ``DeepseekV4Attention`` (transformer/deepseek_v4_attention.py):
low-rank queries (``linear_q_down_proj`` hidden -> q_lora_rank, ``q_layernorm``, ``linear_q_up_proj`` -> heads x
kv_channels), a single KV head (``linear_kv`` hidden -> kv_channels, K = V, ``kv_layernorm``), a grouped low-rank
output (``linear_o_a`` per group, ``linear_o_b``), a learned fp32 sink per head; a ``Compressor`` on CSA / HCA layers
(transformer/compressor.py: fused kv + gate projection, 2x wide when overlapping at ratio 4, a learned position
table, an RMSNorm) and an ``Indexer`` on CSA layers (transformer/indexer.py: low-rank query + head weights, its own
mini-compressor at ``index_head_dim``, top-``index_topk`` selection; frozen unless
``v4_indexer_distill_loss_coeff`` > 0, so no backward runs through it). Around each half a ``HyperMixer``
(transformer/hyper_connection.py): ``hc_mult`` residual streams, an fp32 ``fn`` (hc_mult x hidden -> (2 + hc_mult) x
hc_mult), ``scale`` (3) and ``base``, Sinkhorn-normalised mixing. The MoE half is ``DeepseekV4MoE``
(transformer/moe/v4_moe.py): SwiGLU experts and a shared expert as megatron-core's, a learned router
(v4_topk_router.py: weight + expert bias) or a hash router (v4_hash_router.py: weight; its ``tid2eid`` token table is a
frozen integer tensor, not counted as a parameter).

Parameters are exact against those modules (``tests/model/kinds/test_deepseek_v4.py`` builds them from the Primus
mirror); FLOPs, seconds and saved bytes are analytic (Primus's attention kernels are Triton / Gluon, ROCm only).
Primus's V4 attention splits no heads over TP (``num_attention_heads_per_partition = num_heads``) and no sequence
over CP: both refused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from primus_ext.model import params as P
from primus_ext.model import roofline as R
from primus_ext.model.kinds.base import Kind, KindComm, KindDims
from primus_ext.model.kinds.hybrid import HalfLayer, HybridMoEKind, norm_residual_half
from primus_ext.model.memory import activations as A
from primus_ext.model.rank_shape import layer_arch

FP32_BYTES = 4
"""The hyper-connection ``fn`` runs in fp32 (``HyperMixer``: "All HC params kept in fp32")."""
INDEXER_TRAINED_BWD = 2.0
"""Backward / forward of the indexer when it trains (distillation loss on): a GEMM's dgrad + wgrad."""


@dataclass(frozen=True, kw_only=True)
class DeepSeekV4Dims(KindDims):
    """DeepSeek-V4's own sizes (defaults: Primus primus/configs/models/megatron/deepseek_v4_base.yaml)."""

    o_groups: int = 8
    """Groups of the low-rank output projection."""
    o_lora_rank: int = 1024
    """Rank of each output group (0: a flat ``linear_proj``)."""
    index_n_heads: int = 64
    """Indexer heads (CSA)."""
    index_head_dim: int = 128
    """Indexer head width and its mini-compressor's width."""
    index_topk: int = 512
    """Compressed positions each query reads on a CSA layer."""
    attn_sliding_window: int = 128
    """Uncompressed keys each query reads (every V4 layer)."""
    hc_mult: int = 4
    """Residual streams of the hyper-connections (1: none)."""
    hc_sinkhorn_iters: int = 20
    """Sinkhorn iterations of each mixer."""
    v4_indexer_distill_loss_coeff: float = 0.0
    """> 0: the indexer trains (its distillation loss); 0: frozen, no backward through it."""


def compressor_params(h: int, width: int, ratio: int) -> int:
    """``Compressor(hidden_size=h, head_dim=width, ratio)``: ``wkv_gate`` (h -> 2 x coff x width, coff 2 when
    overlapping at ratio 4), ``ape`` (coff x ratio slots x width), ``kv_norm`` (width)."""
    coff = 2 if ratio == 4 else 1
    return h * 2 * coff * width + coff * ratio * width + width


def hc_params(h: int, k: int) -> int:
    """One ``HyperMixer``: ``fn`` (k h -> (2 + k) k, no bias), ``scale`` (3), ``base`` ((2 + k) k); none at k = 1."""
    out = (2 + k) * k
    return k * h * out + 3 + out if k > 1 else 0


def hc_macs(h: int, k: int, iters: int) -> float:
    """Forward multiply-accumulates of one mixer per token: ``fn``, the collapse (k streams -> 1), the expand (the
    k x k mixing of the streams plus the post weights), the Sinkhorn iterations (a row and a column pass over k x k)."""
    if k <= 1:
        return 0.0
    return k * h * (2 + k) * k + k * h + k * k * h + k * h + 2 * iters * k * k


def hc_seconds(tokens: float, h: int, k: int, gpu) -> float:
    """Forward seconds of one mixer: memory-bound (N = (2 + k) k is far too narrow for a GEMM's peak): the k streams
    read for the collapse and as fp32 for ``fn``, read and written again by the expand."""
    if k <= 1:
        return 0.0
    return R.membound_seconds(tokens * k * h * (3 * R.ACT_BYTES + FP32_BYTES), gpu)


def hc_saved(rows: float, h: int, k: int, e: int) -> dict[str, float]:
    """Bytes one mixer saves: the k streams (the expand's and collapse's input), their fp32 copy (``fn``'s input, an
    fp32 ``nn.Linear``), the sub-block's output (the post weights' input). From the module's forward, not walked."""
    if k <= 1:
        return {}
    return {"hc_streams": e * rows * k * h, "hc_fn_in": FP32_BYTES * rows * k * h, "hc_out": e * rows * h}


def window_keys(window: int, s: int) -> float:
    """Mean keys a causal query reads in a ``window``-wide window over ``s`` positions."""
    w = min(window, s)
    return w - w * w / (2.0 * s)


def compressed_keys(ratio: int, topk: int, s: int) -> float:
    """Mean compressed positions a causal query reads: all ``p / ratio`` before it (HCA), at most ``topk`` (CSA)."""
    c = s / ratio
    if not topk or c <= topk:
        return c / 2.0
    return topk - topk * topk / (2.0 * c)


class DeepSeekV4AttentionKind(HalfLayer):
    """``dsv4_attention`` (``W``): input norm + hyper-connection mixer + ``DeepseekV4Attention`` at compression ratio
    ``ratio`` + residual."""

    name = "dsv4_attention"
    symbol = "W"
    decoder_layer = True
    recomputable = True
    attention = True
    dims_type = DeepSeekV4Dims
    builder = "primus_ext.measure.deepseek_v4_builder:BUILDER"  # analytic: Primus's V4 layer is not built here
    ratio = 0
    """The layer's ``compress_ratios`` entry."""

    def layer_arch(self, model, execution):
        return replace(layer_arch(model, moe=False), dims=self.dims(model))

    def check_dims(self, dims):
        found = [(key, "must be a positive integer", f"set {key} to a whole number >= 1")
                 for key in ("o_groups", "index_n_heads", "index_head_dim", "attn_sliding_window", "hc_mult")
                 if getattr(dims, key) < 1]
        if dims.o_lora_rank < 0:
            found.append(("o_lora_rank", "must be >= 0", "set o_lora_rank: 0 (flat output) or the group rank"))
        return found

    def split_problem(self, model, execution):
        if execution.tp > 1 or execution.cp > 1:
            return ("DeepSeek-V4 attention: Primus's DeepseekV4Attention splits no heads over tensor parallel and no "
                    f"sequence over context parallel (TP {execution.tp}, CP {execution.cp})",
                    "set tensor_model_parallel_size: 1 and context_parallel_size: 1")
        return None

    def linears(self, a, d) -> tuple[tuple[str, int, int], ...]:
        """(part, N, K) of each projection per token: q down / up, kv, the output, the compressor, the indexer."""
        h, nd, q = a.hidden_size, a.num_attention_heads * a.kv_channels, a.q_lora_rank or 0
        out = ((("attn_linear", d.o_lora_rank, nd // d.o_groups),) * d.o_groups
               + (("attn_linear", h, d.o_groups * d.o_lora_rank),) if d.o_lora_rank else (("attn_linear", h, nd),))
        found = (("attn_linear", q, h), ("mla_up_proj", nd, q), ("attn_linear", a.kv_channels, h), *out)
        if self.ratio:
            found += (("dsv4_compressor", 2 * (2 if self.ratio == 4 else 1) * a.kv_channels, h),)
        return found

    def indexer_macs(self, a, d, s: int) -> tuple[float, float]:
        """(projections, scoring) forward MACs per token of the CSA indexer (0, 0 elsewhere)."""
        if self.ratio != 4:
            return 0.0, 0.0
        proj = a.hidden_size * (d.index_head_dim + d.index_n_heads) + d.index_head_dim ** 2 * d.index_n_heads
        proj += a.hidden_size * 2 * 2 * d.index_head_dim  # its mini-compressor (overlapping, index_head_dim wide)
        return proj, d.index_n_heads * d.index_head_dim * compressed_keys(self.ratio, 0, s)

    def keys(self, d, s: int) -> float:
        """Mean keys one query reads: its window, plus the compressed positions of a CSA / HCA layer."""
        extra = compressed_keys(self.ratio, d.index_topk if self.ratio == 4 else 0, s) if self.ratio else 0.0
        return window_keys(d.attn_sliding_window, s) + extra

    def params(self, shape, *, impl="te") -> int:
        a, d = shape.arch, shape.arch.dims
        h, nd, q = a.hidden_size, a.num_attention_heads * a.kv_channels, a.q_lora_rank or 0
        out = nd * d.o_lora_rank + d.o_groups * d.o_lora_rank * h if d.o_lora_rank else nd * h
        attention = h * q + q + q * nd + h * a.kv_channels + a.kv_channels + out + a.num_attention_heads  # + sink
        if self.ratio:
            attention += compressor_params(h, a.kv_channels, self.ratio)
        if self.ratio == 4:
            attention += (h * (d.index_head_dim + d.index_n_heads) + d.index_head_dim ** 2 * d.index_n_heads
                          + compressor_params(h, d.index_head_dim, 4))
        return P.norm_params(a, h) + attention + hc_params(h, d.hc_mult)

    def model_macs(self, model, seq_length, causal) -> dict[str, float]:
        a, d = self.layer_arch(model, None), self.dims(model)
        proj, score = self.indexer_macs(a, d, seq_length)
        linear = sum(n * k for _, n, k in self.linears(a, d)) + proj + hc_macs(a.hidden_size, d.hc_mult,
                                                                               d.hc_sinkhorn_iters)
        core = a.num_attention_heads * 2 * a.kv_channels * self.keys(d, seq_length) + score
        return {"attention_linear": linear, "attention_core": core}

    def roofline(self, parts, shape, gpu) -> None:
        a, d, t = shape.arch, shape.arch.dims, shape.tokens
        for name, n, k in self.linears(a, d):
            parts.linear(name, t, n, k, shape=shape, gpu=gpu)
        width = 2 * a.kv_channels
        parts.other("core_attn", *R.core_attention_seconds(t * a.num_attention_heads, width,
                                                           self.keys(d, shape.seq_length), a.kv_channels, gpu))
        proj, score = self.indexer_macs(a, d, shape.seq_length)
        if proj:
            peak = gpu.peak_tflops("bf16") * 1e12
            flops = 2.0 * t * (proj + score)
            fwd = flops / (peak * R.gemm_efficiency(flops, gpu))
            parts.other("dsv4_indexer", fwd, INDEXER_TRAINED_BWD * fwd if d.v4_indexer_distill_loss_coeff else 0.0)
        hc = hc_seconds(t, a.hidden_size, d.hc_mult, gpu)
        parts.other("hc_mix", hc, R.MEMBOUND_BWD_FACTOR * hc)
        norm_residual_half(parts, shape, gpu)

    def fwd_flops_estimate(self, shape) -> float:
        macs = self.model_macs_of(shape)
        return 2.0 * shape.tokens * macs

    def model_macs_of(self, shape) -> float:
        a, d, s = shape.arch, shape.arch.dims, shape.seq_length
        proj, score = self.indexer_macs(a, d, s)
        return (sum(n * k for _, n, k in self.linears(a, d)) + proj + score
                + a.num_attention_heads * 2 * a.kv_channels * self.keys(d, s))

    def saved(self, shape, impl) -> dict[str, float]:
        """The input norm's input and output, q_a and its norm's output, q, the kv latent, the attention output and its
        log-sum-exp (fp32 per head), the output groups' low-rank activations; the compressed keys; the mixer's."""
        e, lin_e, rows = A._sizes(shape, impl)
        a, d = shape.arch, shape.arch.dims
        h, nd, q = a.hidden_size, a.num_attention_heads * a.kv_channels, a.q_lora_rank or 0
        parts = {"input_norm": A._norm(impl, a.normalization == "LayerNorm", e, rows, h),
                 "input_norm_out": lin_e * rows * h,
                 "q_down": e * rows * 2 * q, "q": e * rows * nd, "kv": e * rows * 2 * a.kv_channels,
                 "core_attn_out": e * rows * nd + FP32_BYTES * rows * a.num_attention_heads,
                 "o_low_rank": lin_e * rows * d.o_groups * d.o_lora_rank}
        if self.ratio:
            parts["compressed_kv"] = e * rows * 2 * a.kv_channels * (2 if self.ratio == 4 else 1)
        parts.update(hc_saved(rows, h, d.hc_mult, e))
        return parts

    def saved_selective(self, shape, impl, parts):
        if "core_attn" in set(shape.recompute_modules or ("core_attn",)):
            e, _, rows = A._sizes(shape, impl)
            parts["core_attn_out"] = e * rows * shape.arch.num_attention_heads * shape.arch.kv_channels
        return parts

    def comm(self, shape, sequence_parallel) -> KindComm:
        return KindComm(parts=frozenset(("cp",)))  # TP 1 (split_problem): no exchange


class CompressedSparseKind(DeepSeekV4AttentionKind):
    """``dsv4_csa`` (``S``): compression ratio 4, overlapping compressor + indexer top-k selection."""

    name = "dsv4_csa"
    symbol = "S"
    ratio = 4


class HeavilyCompressedKind(DeepSeekV4AttentionKind):
    """``dsv4_hca`` (``H``): compression ratio 128, every compressed position visible."""

    name = "dsv4_hca"
    symbol = "H"
    ratio = 128


class DeepSeekV4MoEKind(HybridMoEKind):
    """``dsv4_moe`` (``V``): pre-MLP norm + hyper-connection mixer + ``DeepseekV4MoE`` (learned router with an expert
    bias) + residual."""

    name = "dsv4_moe"
    symbol = "V"
    dims_type = DeepSeekV4Dims
    builder = "primus_ext.measure.deepseek_v4_builder:MOE_BUILDER"
    routed_experts = True
    router_bias = True
    """The learned router's ``expert_bias`` (one per expert); the hash router has none."""

    def layer_arch(self, model, execution):
        return replace(layer_arch(model, moe=True), dims=self.dims(model))

    def params(self, shape, *, impl="te") -> int:
        a = shape.arch
        return super().params(shape, impl=impl) + hc_params(a.hidden_size, a.dims.hc_mult) + (
            a.num_experts if self.router_bias else 0)

    def router_params(self, shape) -> int:
        return super().router_params(shape) + (shape.arch.num_experts if self.router_bias else 0)

    def roofline(self, parts, shape, gpu) -> None:
        super().roofline(parts, shape, gpu)
        hc = hc_seconds(shape.tokens, shape.arch.hidden_size, shape.arch.dims.hc_mult, gpu)
        parts.other("hc_mix", hc, R.MEMBOUND_BWD_FACTOR * hc)

    def saved(self, shape, impl) -> dict[str, float]:
        parts = super().saved(shape, impl)
        e, _, rows = A._sizes(shape, impl)
        parts.update(hc_saved(rows, shape.arch.hidden_size, shape.arch.dims.hc_mult, e))
        return parts

    def model_macs(self, model, seq_length, causal) -> dict[str, float]:
        d = self.dims(model)
        found = super().model_macs(model, seq_length, causal)
        return {"mlp": found["mlp"] + hc_macs(model.hidden_size, d.hc_mult, d.hc_sinkhorn_iters)}


class HashMoEKind(DeepSeekV4MoEKind):
    """``dsv4_hash_moe`` (``U``): the MoE half of the first ``num_hash_layers`` layers, experts chosen by a fixed
    token-id table (``DeepseekV4HashRouter``): its scoring weight is a parameter, no expert bias."""

    name = "dsv4_hash_moe"
    symbol = "U"
    router_bias = False


KINDS: tuple[Kind, ...] = (DeepSeekV4AttentionKind(), CompressedSparseKind(), HeavilyCompressedKind(),
                           DeepSeekV4MoEKind(), HashMoEKind())
"""What the registry registers from this module (``kinds.registry``)."""
