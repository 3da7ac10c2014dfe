"""Analytic roofline costs, the formulas: what ``model.analytic`` sums per layer kind into the fallback
``CostProvider`` when the timing store has no entry (``analytic_cost``, ``AnalyticCosts``).

Per layer kind at its per-rank shape (one micro-batch, one rank):
  * every GEMM (M tokens x N outputs x K inputs, sharded by TP / ETP, experts per local expert) costs
    ``2*M*N*K`` FLOPs at efficiency ``gemm_max * F / (F + gemm_half_size_flops)`` of the dense peak
    for the precision (``Efficiency.gemm_max`` / ``gemm_half_size_flops``: small GEMMs run far below
    peak), and never faster than reading its operands from HBM (``gemm_bytes``; memory-bound MoE
    expert GEMMs); backward = data-grad + weight-grad, each the forward GEMM's FLOPs and bytes;
  * core attention: QK^T and AV FLOPs with the causal mask (half the score matrix; sliding windows cut
    it further) at ``Efficiency.attention`` of peak for 128-wide heads (``FLASH2_RATIO`` of that for
    FlashAttention-2, ``ExecutionSpec.attention_kernel``), less for narrower heads
    (``attention_efficiency``: the softmax cost per score does not shrink with the head dim);
    backward = 2.5x forward (FlashAttention-2, Dao 2023, sec. 3: five matmuls in backward vs two in
    forward);
  * on a GPU family with kernel curves (``hardware/kernel_curves.yaml``, fitted to public kernel measurements:
    ``model.kernel_curve``), core attention instead takes the curve of the kernel its head dim runs, with the per-row
    work that makes narrow windows slow, at the level ``Efficiency.attention`` states for the reference shape; an MoE
    layer's experts take the family's grouped-GEMM curve where one was measured for their precision;
  * memory-bound ops (norms, residual adds, activation, RoPE, MoE permute/unpermute, cross-entropy)
    at HBM bandwidth * ``Efficiency.hbm``; backward moves ``MEMBOUND_BWD_FACTOR`` times the bytes;
  * ``Efficiency.kernel_overhead_s`` per layer per pass (launch / framework overhead), plus
    ``Efficiency.moe_layer_overhead_s`` for an MoE layer (router, dispatcher sync, permutation); CUDA
    graphs remove them (``fixed_overhead_s``);
  * FP8 GEMMs reach ``Efficiency.fp8_gemm_max`` of the FP8 peak instead of ``gemm_max``; FP4 GEMMs
    ``fp8_gemm_max * fp4_fp8_ratio`` of the FP4 peak, plus their quantisation passes (``model.fp4``);
  * attention's softmax share on a GPU whose special-function units differ from those of the GPUs its
    ``Efficiency.attention`` was fitted on (``attention_sfu_exp_per_s``: B300 / GB300) scales by the SFU ratio;
  * the host floor: a pass is never faster than megatron-core's host work for it where kernels are launched one by
    one (``model.host_floor``: measured on a CPU from the real modules, scaled by ``Efficiency.host_factor``);
  * recompute: the forward time of what is recomputed (full layer, or the selective modules; torchtitan's
    op-level selective checkpointing: ``op_sac_recompute_s``).
A leaf of the model layer: each kind's ``Kind.roofline`` hook adds its parts with these (``attention_parts``,
``dense_mlp_parts``, ...); it imports no kind. Pure and torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache, partial

from primus_ext.model import fp8, kernel_curve
from primus_ext.model.fp4 import fp4_element_bytes, quantise_seconds
from primus_ext.model.rank_shape import RankShape
from primus_ext.specs import GPUSpec

ACT_BYTES = 2
"""Activations are bf16 (fp8 recipes keep bf16 activations between GEMMs)."""
FP8_BYTES = 1
"""An FP8 GEMM operand element (E4M3 / E5M2; block scales are < 1 % of it and ignored)."""
LOGITS_BYTES = 4
"""Megatron computes the vocab-parallel cross-entropy in fp32."""
ATTENTION_BWD_FACTOR = 2.5
"""FlashAttention-2 backward / forward FLOPs (Dao 2023, sec. 3: 5 vs 2 matmuls)."""
REFERENCE_HEAD_DIM = 128
"""Head dim at which ``Efficiency.attention`` is stated (Llama / Qwen / GPT-3 / Mixtral heads)."""
ATTENTION_HALF_HEAD_DIM = 96.0
"""Head dim at which the softmax cost equals the matmul cost in ``attention_efficiency``: from
FlashAttention-3 forward throughput on H100 BF16 (Shah et al. 2024, fig. 5, seq 4k causal): head dim
64 runs at ~0.70x the TFLOP/s of head dim 128; (128 + d0) / (2 (64 + d0)) = 0.70 gives d0 = 96."""
FLASH2_RATIO = 0.35 / 0.75
"""FlashAttention-2 (``ExecutionSpec.attention_kernel`` "flash2": PyTorch SDPA's flash backend) as a fraction
of the fused (FlashAttention-3-class) kernel's throughput: FA2 reaches 35 % of H100 BF16 peak, FA3 75 %
(Shah et al. 2024, FlashAttention-3, arXiv:2407.08608, abstract). Measured on Hopper; applied as is elsewhere."""
MEMBOUND_BWD_FACTOR = 2.0
"""Backward of an elementwise op reads the saved input and the output grad, writes the input grad."""
NORM_PASSES = 2
"""A norm reads its input and writes its output (fused kernel)."""
SOFTMAX_CE_PASSES = 3
"""Vocab-parallel cross-entropy: max, exp-sum, loss over the fp32 logits (Megatron
``tensor_parallel/cross_entropy.py``)."""


def gemm_efficiency(flops: float, gpu: GPUSpec, precision: str = "bf16", recipe: str = "delayed") -> float:
    """Fraction of the precision's dense peak a GEMM of ``flops`` reaches; ``recipe``: the fp8 scaling recipe
    (row-wise scaled FP8 GEMMs reach ``fp8_rowwise_ratio`` of the per-tensor ones).

    ``gemm_half_size_flops`` is the BF16 size at half efficiency: a fixed time per GEMM, ``F_half / rate``.
    An FP8 GEMM keeps that time at its own large-GEMM rate, so its half size grows by the FP8 / BF16 rate
    ratio: FP8 speeds small GEMMs far less than large ones. Measured on an H200 (`benchmarks/
    gpu_kernel_sweep.py`, 2026-12-04): FP8 / BF16 throughput median 1.86 (1.47-2.17) at M >= 4096
    tokens, 0.98 (0.71-1.41) at <= 17 GFLOP (1024 x 1536 x 2048, a Qwen3-30B-A3B expert's fc1: 0.71-0.83);
    `python benchmarks/gpu_kernel_sweep.py --summarize benchmarks/kernels/h200-2026-12-04-sweep.json`."""
    eff = gpu.efficiency
    top = eff.gemm_max
    half = eff.gemm_half_size_flops
    if precision == "fp8" and gpu.fp8_dense_tflops > 0:
        top = eff.fp8_gemm_max * (eff.fp8_rowwise_ratio if recipe == "rowwise" else 1.0)
        base = eff.gemm_max * gpu.bf16_dense_tflops
        half *= top * gpu.fp8_dense_tflops / base if base > 0 else 1.0
    elif precision == "fp4":  # the same fixed time per GEMM at FP4's own large-GEMM rate (see above)
        top = eff.fp8_gemm_max * eff.fp4_fp8_ratio
        base = eff.gemm_max * gpu.bf16_dense_tflops
        half *= top * gpu.peak_tflops("fp4") / base if base > 0 else 1.0
    return top * flops / (flops + half)


def gemm_bytes(m: float, n: float, k: float, precision: str, recipe: str = "nvfp4") -> float:
    """HBM bytes one M x N x K GEMM moves at least: both operands read once (1 byte per element in
    FP8, 2 in BF16), the BF16 result written once. NVIDIA "GPU Performance Background User's Guide"
    (docs.nvidia.com/deeplearning/performance/dl-performance-gpu-background, "Math and Memory
    Bounds"): arithmetic intensity ``2MNK / (2(MK + NK + MN))`` for FP16 operands. FP4 operands: half a byte
    plus their block scales (``model.fp4.fp4_element_bytes``; ``recipe`` the fp4 recipe)."""
    operand = FP8_BYTES if precision == "fp8" else fp4_element_bytes(recipe) if precision == "fp4" else ACT_BYTES
    return (m * k + k * n) * operand + m * n * ACT_BYTES


def gemm_seconds(m: float, n: float, k: float, gpu: GPUSpec, precision: str, *, recipe: str = "delayed",
                 count: float = 1.0) -> float:
    """``count`` GEMMs of M x N x K: the slower of the math time at the size-dependent efficiency and
    the HBM time of their operands (roofline, Williams et al. 2009, CACM 52(4)). A GEMM whose
    arithmetic intensity is below the GPU's FLOP:byte ratio is memory-bound: e.g. an MoE expert's
    grouped GEMM with a few hundred tokens per expert, whose weights are read for few rows."""
    flops = 2.0 * m * n * k
    if flops <= 0 or count <= 0:
        return 0.0
    math_s = flops / (gpu.peak_tflops(precision) * 1e12 * gemm_efficiency(flops, gpu, precision, recipe))
    return count * max(math_s, membound_seconds(gemm_bytes(m, n, k, precision, recipe), gpu))


def membound_seconds(nbytes: float, gpu: GPUSpec) -> float:
    return nbytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.efficiency.hbm) if nbytes > 0 else 0.0


def gemm_recipe(shape: RankShape) -> str:
    """The scaling recipe the shape's GEMMs run with: the fp4 recipe for fp4, else the fp8 one."""
    return shape.fp4_recipe if shape.precision == "fp4" else shape.fp8_recipe


@dataclass
class _Parts:
    """Accumulates per-module forward / data-grad / weight-grad seconds."""

    fwd: dict[str, float]
    dgrad: dict[str, float]
    wgrad: dict[str, float]

    def gemm(self, name: str, seconds: float) -> None:
        self.fwd[name] = self.fwd.get(name, 0.0) + seconds
        self.dgrad[name] = self.dgrad.get(name, 0.0) + seconds
        self.wgrad[name] = self.wgrad.get(name, 0.0) + seconds

    def other(self, name: str, fwd: float, bwd: float) -> None:
        self.fwd[name] = self.fwd.get(name, 0.0) + fwd
        self.dgrad[name] = self.dgrad.get(name, 0.0) + bwd

    def linear(self, name: str, m: float, n: float, k: float, shape: RankShape, gpu: GPUSpec, *,
               count: float = 1.0) -> None:
        """``count`` linear layers' GEMMs (M tokens x N outputs x K inputs) in the shape's precision; in fp4 / fp8 with
        their quantisation passes (``model.fp4.quantise_seconds``, ``model.fp8.quantise_seconds``), under the same
        module name (a recomputed module re-runs its quantisation too)."""
        recipe = gemm_recipe(shape)
        self.gemm(name, gemm_seconds(m, n, k, gpu, shape.precision, recipe=recipe, count=count))
        if shape.precision == "fp4":
            self.other(name, *quantise_seconds(m, n, k, gpu, recipe, count=count))
        elif shape.precision == "fp8":
            self.other(name, *fp8.quantise_seconds(m, n, k, gpu, recipe, count=count))


def attention_efficiency(head_dim: float, gpu: GPUSpec, kernel: str = "fused") -> float:
    """Fraction of dense peak of fused attention at per-head matmul width ``head_dim`` (the mean of the
    QK and V widths). Per score element a flash kernel does ``4 * head_dim`` matmul FLOPs but a fixed
    softmax cost (exp on the special-function units, 256x slower than the tensor cores on H100: Shah
    et al. 2024, FlashAttention-3, arXiv:2407.08608, sec. 3.3), so the efficiency grows as
    ``d / (d + ATTENTION_HALF_HEAD_DIM)``; ``Efficiency.attention`` is the value at head dim 128 for the
    ``fused`` kernel, ``FLASH2_RATIO`` of it for ``flash2``. Divided by ``softmax_sfu_factor`` on a GPU whose
    special-function units differ from those ``Efficiency.attention`` was fitted on."""
    ref = REFERENCE_HEAD_DIM / (REFERENCE_HEAD_DIM + ATTENTION_HALF_HEAD_DIM)
    fused = gpu.efficiency.attention * head_dim / (head_dim + ATTENTION_HALF_HEAD_DIM) / ref
    fused /= softmax_sfu_factor(head_dim, gpu)
    return fused * FLASH2_RATIO if kernel == "flash2" else fused


def softmax_sfu_factor(head_dim: float, gpu: GPUSpec) -> float:
    """Attention's time on ``gpu`` over its time at the SFU rate ``Efficiency.attention`` was fitted at.

    In ``attention_efficiency``'s law the time per score element is ``head_dim`` (the matmuls) plus
    ``ATTENTION_HALF_HEAD_DIM`` (the softmax: its exponentials on the special-function units) in the same units,
    so the softmax is ``96 / (head_dim + 96)`` of it, 43 % at head dim 128. That share runs ``ref / own`` times as
    long, where ``ref`` is ``Efficiency.attention_sfu_exp_per_s`` (the SFU rate of the GPUs the efficiency was
    fitted on) and ``own`` the GPU's ``sfu_exp_per_s``. 1 when either is not stated or they are equal: every GPU
    with its own calibration (H100 / H200 / B200 / GB200 / AMD) is unchanged; B300 / GB300, which inherit
    B200 / GB200's efficiencies with twice the exponential rate (NVIDIA Blackwell Ultra), run attention at
    1 / (0.57 + 0.43 / 2) = 1.27x at head dim 128."""
    ref, own = gpu.efficiency.attention_sfu_exp_per_s, gpu.sfu_exp_per_s
    if ref <= 0 or own <= 0:
        return 1.0
    share = ATTENTION_HALF_HEAD_DIM / (head_dim + ATTENTION_HALF_HEAD_DIM)
    return 1.0 - share + share * ref / own


def core_attention_seconds(rows: float, width: float, keys: float, head_dim: float, gpu: GPUSpec,
                           kernel: str = "fused") -> tuple[float, float]:
    """(forward, backward) seconds of fused attention over ``rows`` query rows (tokens x local heads) of ``keys``
    mean unmasked keys, ``width`` = QK + V head dims. On the GPU family's kernel curves where public kernel data was
    fitted (``model.kernel_curve``: the head dim's own kernel, per-row work, latency), at the level the profile's
    ``Efficiency.attention`` states for the reference shape (the curves' own level unless the profile pins a
    measurement of its own: ``curve_level``); elsewhere the head-dim law ``attention_efficiency``, backward
    ``ATTENTION_BWD_FACTOR`` x forward."""
    curves = gpu.kernel_curves
    peak = gpu.peak_tflops("bf16") * 1e12
    if curves is None or curves.attention_fwd is None or curves.attention_bwd is None:
        fwd = 2.0 * rows * keys * width / (peak * attention_efficiency(width / 2, gpu, kernel))
        return fwd, ATTENTION_BWD_FACTOR * fwd
    scale = curve_level(gpu) * softmax_sfu_factor(width / 2, gpu) / (FLASH2_RATIO if kernel == "flash2" else 1.0)
    f, b = curves.attention_fwd, curves.attention_bwd
    common = {"rows": rows, "width": width, "keys": keys, "head_dim": head_dim, "peak_flops": peak}
    return (scale * kernel_curve.seconds(f, backward=False, other=b, **common),
            scale * kernel_curve.seconds(b, backward=True, other=f, **common))


@lru_cache(maxsize=256)
def curve_level(gpu: GPUSpec) -> float:
    """Time factor on the family's attention curves: their reference efficiency over the profile's
    ``Efficiency.attention`` (1 where the profile states the curves' own value)."""
    curves = gpu.kernel_curves
    if curves is None or curves.attention_fwd is None or curves.attention_bwd is None:
        return 1.0
    return kernel_curve.reference_efficiency(curves) / gpu.efficiency.attention


def causal_keys(shape: RankShape) -> float:
    """Mean keys one query attends to: s/2 causal, fewer under a sliding window."""
    s = shape.seq_length
    window = shape.arch.window_size
    if window and 0 <= window[0] < s:
        w = window[0] + 1
        windowed = w - w * w / (2.0 * s)
        freq = shape.arch.window_attn_skip_freq
        if freq > 0:  # every freq-th layer attends fully: the average over the pattern
            return (s / 2.0 + (freq - 1) * windowed) / freq
        return windowed
    return s / 2.0


def attention_parts(parts: _Parts, shape: RankShape, gpu: GPUSpec) -> None:
    a, t = shape.arch, shape.tokens
    g = partial(parts.linear, shape=shape, gpu=gpu)
    tp, heads = shape.tp, shape.local_heads
    if a.multi_latent_attention:
        qk = a.qk_head_dim + a.qk_pos_emb_head_dim
        if a.q_lora_rank:
            g("attn_linear", t, a.q_lora_rank, a.hidden_size)
            g("mla_up_proj", t, a.num_attention_heads * qk / tp, a.q_lora_rank)
        else:
            g("attn_linear", t, a.num_attention_heads * qk / tp, a.hidden_size)
        g("attn_linear", t, a.kv_lora_rank + a.qk_pos_emb_head_dim, a.hidden_size)
        kv_up = a.num_attention_heads * (a.qk_head_dim + a.v_head_dim) / tp
        g("mla_up_proj", t, kv_up, a.kv_lora_rank)
        g("attn_linear", t, a.hidden_size, a.num_attention_heads * a.v_head_dim / tp)
        width = qk + a.v_head_dim
    else:
        qkv = (a.num_attention_heads + 2 * a.num_query_groups) * a.kv_channels / tp
        g("attn_linear", t, qkv, a.hidden_size)
        g("attn_linear", t, a.hidden_size, a.num_attention_heads * a.kv_channels / tp)
        width = 2 * a.kv_channels
    head_dim = qk if a.multi_latent_attention else a.kv_channels
    parts.other("core_attn", *core_attention_seconds(t * heads, width, causal_keys(shape), head_dim, gpu,
                                                     shape.attention_kernel))
    rope = membound_seconds(2 * t * heads * width * ACT_BYTES, gpu)
    parts.other("rope", rope, MEMBOUND_BWD_FACTOR * rope)


def dense_mlp_parts(parts: _Parts, shape: RankShape, gpu: GPUSpec) -> None:
    """A dense MLP: fc1 (gated: two halves), fc2, the activation."""
    a, t = shape.arch, shape.tokens
    g = partial(parts.linear, shape=shape, gpu=gpu)
    gate = 2 if a.gated else 1
    ffn = a.ffn_hidden_size / shape.tp
    g("mlp", t, gate * ffn, a.hidden_size)
    g("mlp", t, a.hidden_size, ffn)
    act = membound_seconds(t * ffn * (gate + 1) * ACT_BYTES, gpu)
    parts.other("mlp_act", act, MEMBOUND_BWD_FACTOR * act)


def moe_mlp_parts(parts: _Parts, shape: RankShape, gpu: GPUSpec) -> None:
    """An MoE block: router, latent projections, the local experts' GEMMs and activation, permutation, shared
    experts. Routed tokens are ``arch.expert_width`` wide (the latent width under latent MoE)."""
    a, t = shape.arch, shape.tokens
    g = partial(parts.linear, shape=shape, gpu=gpu)
    gate = 2 if a.gated else 1
    local = max(1, shape.local_experts)
    per_expert = shape.routed_tokens_per_rank / local
    ffn = a.moe_ffn_hidden_size / shape.etp
    width = a.expert_width
    parts.gemm("router", gemm_seconds(shape.tokens, a.num_experts, a.hidden_size, gpu, "bf16"))
    if a.moe_latent_size:  # duplicated TELinear over this rank's (sequence-split) tokens: down, then back up
        rows = t / shape.tp if shape.sequence_parallel else t
        g("moe_latent_proj", rows, a.moe_latent_size, a.hidden_size)
        g("moe_latent_proj", rows, a.hidden_size, a.moe_latent_size)
    grouped = kernel_curve.grouped_curves(shape, gpu)
    for n, k in ((gate * ffn, width), (width, ffn)):
        if grouped is None:
            g("moe", per_expert, n, k, count=local)
            continue
        peak = gpu.peak_tflops(shape.precision) * 1e12
        fwd, bwd = (kernel_curve.grouped_seconds(curve, local, per_expert, n, k, peak, backward=backward)
                    for curve, backward in zip(grouped, (False, True), strict=True))
        parts.other("moe", fwd, bwd / 2)  # data-grad and weight-grad: half the measured backward each
        parts.wgrad["moe"] = parts.wgrad.get("moe", 0.0) + bwd / 2
    act = membound_seconds(shape.routed_tokens_per_rank * ffn * (gate + 1) * ACT_BYTES, gpu)
    parts.other("moe_act", act, MEMBOUND_BWD_FACTOR * act)
    # permute + unpermute: read and write every routed token's vector twice
    perm = membound_seconds(4 * shape.routed_tokens_per_rank * width * ACT_BYTES, gpu)
    parts.other("moe_permute", perm, perm)
    if a.moe_shared_expert_intermediate_size:
        shared = a.moe_shared_expert_intermediate_size / shape.tp
        g("shared_experts", t, gate * shared, a.hidden_size)
        g("shared_experts", t, a.hidden_size, shared)
        sact = membound_seconds(t * shared * (gate + 1) * ACT_BYTES, gpu)
        parts.other("shared_experts", sact, MEMBOUND_BWD_FACTOR * sact)


def norm_residual_parts(parts: _Parts, shape: RankShape, gpu: GPUSpec) -> None:
    rows = shape.tokens / shape.tp if shape.sequence_parallel else shape.tokens
    h = shape.arch.hidden_size
    norm = membound_seconds(2 * NORM_PASSES * rows * h * ACT_BYTES, gpu)  # pre-attention + pre-MLP norms
    parts.other("layernorm", norm, MEMBOUND_BWD_FACTOR * norm)
    residual = membound_seconds(2 * 3 * rows * h * ACT_BYTES, gpu)  # two adds: read 2, write 1
    parts.other("residual", residual, residual)


def embedding_parts(parts: _Parts, shape: RankShape, gpu: GPUSpec) -> None:
    """The word-embedding lookup: read and write each token's hidden vector."""
    a, t = shape.arch, shape.tokens
    lookup = membound_seconds(2 * t * a.hidden_size * ACT_BYTES, gpu)
    parts.other("embedding", lookup, MEMBOUND_BWD_FACTOR * lookup)


def output_parts(parts: _Parts, shape: RankShape, gpu: GPUSpec) -> None:
    """The final norm, the output projection (logits) and the cross-entropy loss."""
    a, t = shape.arch, shape.tokens
    vocab = a.vocab_size / shape.tp
    rows = t / shape.tp if shape.sequence_parallel else t
    norm = membound_seconds(NORM_PASSES * rows * a.hidden_size * ACT_BYTES, gpu)
    parts.other("layernorm", norm, MEMBOUND_BWD_FACTOR * norm)
    # megatron-core's output layer is tensor_parallel.ColumnParallelLinear, outside TE's fp8 autocast
    logits_precision = "bf16" if shape.precision in ("fp8", "fp4") else shape.precision
    parts.gemm("logits", gemm_seconds(t, vocab, a.hidden_size, gpu, logits_precision))
    ce = membound_seconds(SOFTMAX_CE_PASSES * t * vocab * LOGITS_BYTES, gpu)
    parts.other("cross_entropy", ce, ce)


def dense_op_sac_gemms(shape: RankShape, gpu: GPUSpec) -> tuple[float, float, float]:
    """The forward GEMMs op-level checkpointing re-runs in a Llama block (``op_sac_recompute_s``): wk, wo, and
    w3 (gated) / fc2, in seconds."""
    a, t, tp = shape.arch, shape.tokens, shape.tp
    g = partial(gemm_seconds, gpu=gpu, precision=shape.precision, recipe=gemm_recipe(shape))
    ffn = a.ffn_hidden_size / tp
    return (g(t, a.num_query_groups * a.kv_channels / tp, a.hidden_size),          # wk
            g(t, a.hidden_size, a.num_attention_heads * a.kv_channels / tp),       # wo
            g(t, ffn, a.hidden_size) if a.gated else g(t, a.hidden_size, ffn))     # w3 (gated) / fc2


__all__ = ["attention_efficiency", "gemm_efficiency", "gemm_seconds", "membound_seconds", "softmax_sfu_factor"]
