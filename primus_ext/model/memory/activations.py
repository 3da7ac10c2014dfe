"""Bytes one layer saves for backward, per micro-batch, on one rank (closed form).

Usage::

    from primus_ext.model.memory.saved import activation_bytes_per_layer, activation_parts
    activation_bytes_per_layer(shape)                  # Transformer-Engine spec (production GPU runs)
    activation_parts(shape, impl=LOCAL)                # named parts, megatron-core local spec on CPU

This module holds the formulas each kind's ``Kind.saved`` / ``saved_selective`` hooks sum (a leaf: it imports no
kind); ``memory.saved`` asks the shape's kind and applies recompute.

Every part is a tensor megatron-core 0.16.1 keeps alive between a layer's forward and its backward
(autograd ``save_for_backward`` / checkpoint inputs), counted once per storage. Symbols: ``T`` tokens
per rank (MBS * seq / CP), ``Ts = T / TP`` under sequence parallelism (else ``T``), ``e`` bytes per
activation element, heads/groups/ffn are per TP rank, experts' ffn per ETP rank, ``R`` routed
token slots per rank (``RankShape.routed_tokens_per_rank``).

Two implementations differ in what they save, so each is a named :class:`ActivationImpl`:

* ``TE`` - the Transformer-Engine spec: flash attention (saves q, k, v, the output and the fp32
  softmax statistics; no s x s scores), norms fused into the next linear (``LayerNormLinear``
  saves its input, the normalised output and rstd), fused SwiGLU (saves its input only), fused RoPE,
  fp8 GEMM inputs saved quantised (1 byte) when the recipe trains in fp8.
* ``LOCAL`` - the local spec as ``primus_ext.measure.build`` builds it on CPU: unfused attention
  (expanded k/v, fp32 softmax output and bf16 probabilities: Korthikanti et al.'s ``5as/h`` term),
  torch ``rms_norm`` (saves an fp32 copy of its input and the fp32 normalised value), unfused SwiGLU,
  cached RoPE cos/sin. Checked against the real module's saved tensors in
  ``tests/measure/test_memory_vs_megatron.py`` (exact for dense / MLA / output, MoE within the
  routing noise of the balanced router).

Recompute (Megatron's ``recompute_granularity``): ``full`` keeps only the checkpointed layer input;
``selective`` with ``recompute_modules`` (core_attn, layernorm, mlp, moe, moe_act, shared_experts,
mla_up_proj) replaces the named parts by what the checkpoint keeps. Pure and torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from primus_ext.model.fp4 import fp4_element_bytes
from primus_ext.model.rank_shape import RankShape


@dataclass(frozen=True, kw_only=True)
class ActivationImpl:
    """What one implementation of the layer saves (see the module docstring)."""

    name: str
    flash_attention: bool
    """True: flash/fused attention (q, k, v, out, fp32 LSE). False: scores materialised."""
    torch_rms_norm_fp32: bool
    """True: torch's CPU ``rms_norm`` keeps fp32 copies of input and normalised value (8 B/elem)."""
    fused_swiglu: bool
    """True: ``bias_swiglu_impl`` saves only its input; False: chunk/silu/mul save 2x that."""
    fused_input_norm: bool
    """TE spec: input_layernorm fused into linear_qkv (GQA) and pre_mlp_layernorm into fc1 (dense)."""
    rope_cache: bool
    """Local RoPE keeps its cos/sin per layer (8 bytes x seq x rotary dim)."""
    router_scores: bool
    """The learned router keeps its fp32 scores (T x experts); the force-balanced one does not."""
    fp8_linear_inputs: bool
    """fp8 recipes save GEMM inputs quantised (1 byte) - TE only."""


TE = ActivationImpl(name="te", flash_attention=True, torch_rms_norm_fp32=False, fused_swiglu=True,
                    fused_input_norm=True, rope_cache=False, router_scores=True, fp8_linear_inputs=True)
LOCAL = ActivationImpl(name="local", flash_attention=False, torch_rms_norm_fp32=True, fused_swiglu=False,
                       fused_input_norm=False, rope_cache=True, router_scores=False, fp8_linear_inputs=False)

RMS_STAT_BYTES = 4
"""rstd per token, fp32 (torch and TE RMSNorm)."""
LAYERNORM_STAT_BYTES = 8
"""mean + rstd per token, fp32 (LayerNorm)."""
INDEX_BYTES = 8
"""int64 indices (top-k expert ids, permutation / sort indices, cross-entropy targets)."""
FP32_BYTES = 4
ROPE_CACHE_BYTES = 8
"""Local RoPE's cached cos/sin per position and rotary channel (measured: 8 B, bf16 x 2 x 2)."""
_VALID_MODULES = frozenset({"core_attn", "layernorm", "mlp", "moe", "moe_act", "shared_experts", "mla_up_proj"})


def element_bytes(precision: str) -> int:
    """Bytes of an activation element: fp32 training keeps fp32, everything else bf16/fp16
    (fp8 recipes keep bf16 activations apart from the quantised GEMM inputs)."""
    return 4 if precision == "fp32" else 2


def loss_saved_bytes(shape: RankShape, fusion_impl: str = "native") -> float:
    """Bytes the cross-entropy loss keeps for backward, one micro-batch on one rank (vocab split by TP).

    ``native`` (megatron-core 0.16.1 fusions/fused_cross_entropy.py and tensor_parallel/cross_entropy.py):
    ``save_for_backward(exp_logits, ...)`` with the logits cast to fp32, 4 bytes per logit.
    ``te`` (Transformer Engine ``parallel_cross_entropy``, megatron-core ``cross_entropy_fusion_impl='te'``):
    the Triton kernel writes d(loss)/d(logits) into the logits tensor during forward and saves it, so the
    bf16 logits themselves (2 bytes per logit) are what is kept, and backward only rescales them in place.
    """
    per_logit = FP32_BYTES if fusion_impl == "native" else element_bytes(shape.precision)
    return per_logit * shape.tokens * shape.arch.vocab_size / shape.tp


def _norm(impl: ActivationImpl, layernorm: bool, e: int, tokens: float, width: int) -> float:
    stats = LAYERNORM_STAT_BYTES if layernorm else RMS_STAT_BYTES
    if impl.torch_rms_norm_fp32 and not layernorm:
        return 2 * FP32_BYTES * tokens * width + stats * tokens
    return e * tokens * width + stats * tokens


FP8_STORE_BYTES = 1
"""``activation_func_fp8_input_store``: the fused SwiGLU kernels save their input as fp8 (megatron-core
fusions/fused_bias_swiglu.py ``SwiGLUFunction.forward``: ``input.to(torch.float8_e4m3fn)`` when ``fp8_input_store``)."""


def _act_bytes(impl: ActivationImpl, gated: bool, e: int, tokens: float, ffn: float, fp8_store: bool = False) -> float:
    """What the activation function saves for ``tokens`` rows of width ``ffn`` (per split); ``fp8_store``: the
    fused SwiGLU keeps its input in fp8 (``RankShape.act_fp8_input``; the unfused local path has no such option)."""
    if not gated:
        return e * tokens * ffn
    if impl.fused_swiglu and fp8_store:
        return 2 * FP8_STORE_BYTES * tokens * ffn
    return (2 if impl.fused_swiglu else 4) * e * tokens * ffn


def _attention(shape: RankShape, impl: ActivationImpl, e: int, lin_e: float, ts: float) -> dict[str, float]:
    a = shape.arch
    t, b, s = shape.tokens, shape.micro_batch_size, shape.local_seq
    heads = shape.local_heads
    parts: dict[str, float] = {}
    if a.multi_latent_attention:
        qh, vh = a.qk_head_dim + a.qk_pos_emb_head_dim, a.v_head_dim
        rot = a.qk_pos_emb_head_dim
        layernorm = a.normalization == "LayerNorm"
        stats = LAYERNORM_STAT_BYTES if layernorm else RMS_STAT_BYTES
        ql, kl = a.q_lora_rank or 0, a.kv_lora_rank
        if impl.torch_rms_norm_fp32:
            # local: q_layernorm / kv_layernorm keep fp32 copies; the up-projections keep the norm output
            if ql:
                parts["mla_q_compressed"] = e * ts * ql + (_norm(impl, layernorm, e, ts, ql) if a.qk_layernorm else 0)
            parts["mla_kv_compressed"] = (
                e * ts * kl + _norm(impl, layernorm, e, ts, kl) if a.qk_layernorm else e * ts * (kl + rot))
        else:
            # TE: LayerNormColumnParallelLinear keeps its input (q_compressed; kv_compressed is a view of
            # the kv down-projection's output, kept whole), rstd and the normalised output.
            if ql:
                parts["mla_q_compressed"] = e * ts * ql + ((stats + lin_e * ql) * ts if a.qk_layernorm else 0)
            parts["mla_kv_compressed"] = e * ts * (kl + rot) + ((stats + lin_e * kl) * ts if a.qk_layernorm else 0)
        # inputs of core attention: q and k new after RoPE/concat, v made contiguous (measured).
        qkv_inputs = e * t * heads * (qh + qh + vh)
    else:
        d = a.kv_channels
        qh = vh = d
        rot = d
        groups = shape.local_query_groups
        if a.qk_layernorm:
            # per-head q_layernorm / k_layernorm over (heads + groups) rows of width kv_channels (TE's
            # norm takes its strided q / k view as a contiguous copy and keeps it with rstd)
            rows = t * (heads + groups)
            parts["qk_layernorm"] = _norm(impl, a.normalization == "LayerNorm", e, rows, d)
        if impl.flash_attention:
            # q and k are new after RoPE; TE's attention takes v (a strided view of the fused qkv
            # output under GQA) as a contiguous copy, so the fused output is not kept.
            qkv_inputs = e * t * (heads + 2 * groups) * d
        else:
            # local: v stays a view of the fused qkv output and keeps it whole (measured)
            qkv_inputs = e * t * (heads * d + groups * d + (heads + 2 * groups) * d)
    if impl.rope_cache:
        parts["rope_cache"] = ROPE_CACHE_BYTES * s * rot
    if impl.flash_attention:
        parts["attn_qkv"] = qkv_inputs
        parts["attn_softmax_stats"] = FP32_BYTES * b * heads * s
    else:
        # Under CP the local queries attend to the whole sequence: keys and values of every CP chunk
        # (build.py's one-rank stand-in for ring attention); CP's per-layer bool mask (s/CP x s, a
        # module buffer, 1 byte per score) is not per micro-batch and not counted (< 0.5 % at CP 2).
        cp = shape.cp
        if a.multi_latent_attention or shape.local_query_groups != heads or cp > 1:
            parts["attn_qkv"] = e * t * heads * (qh + cp * (qh + vh))  # q, k, v expanded to every head
        else:  # MHA: no expansion, the bmm keeps views of the roped q, k and of the qkv output (v)
            parts["attn_qkv"] = qkv_inputs
        probs = 0 if e == FP32_BYTES else e  # fp32 softmax output; bf16 probabilities for the bmm
        parts["attn_scores"] = (FP32_BYTES + probs) * b * heads * s * s * cp
    parts["attn_out"] = e * t * heads * vh + (lin_e * t * heads * vh if lin_e < e else 0)
    return parts


def _moe(shape: RankShape, impl: ActivationImpl, e: int, lin_e: float, ts: float) -> dict[str, float]:
    a = shape.arch
    k, experts = a.moe_router_topk, a.num_experts
    gated = a.gated
    parts: dict[str, float] = {}
    # top-k ids (int64) + probs (fp32); permutation indices (int64); routing map (bool) + probs map.
    router = (INDEX_BYTES + FP32_BYTES + INDEX_BYTES) * ts * k + (1 + e) * ts * experts
    if impl.router_scores:
        router += FP32_BYTES * ts * experts
    parts["router"] = router
    slots = shape.routed_tokens_per_rank
    ffn = a.moe_ffn_hidden_size / shape.etp
    width = a.expert_width  # routed tokens' width: the latent width under latent MoE
    if impl.fused_swiglu:  # TE: fused activation-with-probs keeps its input + fp32 probs
        per_slot = lin_e * width + _act_bytes(impl, gated, e, 1, ffn, shape.act_fp8_input) + FP32_BYTES
    else:  # local: activation, then act*probs keeps both (+ probs column)
        per_slot = e * width + _act_bytes(impl, gated, e, 1, ffn) + e * ffn + e
    parts["experts"] = slots * per_slot
    parts["experts_fc2_in"] = slots * lin_e * ffn
    if a.moe_latent_size:  # fc2_latent_proj's input, the combined latent tokens (fc1's is the norm output, kept)
        parts["latent_proj"] = lin_e * ts * a.moe_latent_size
    if a.moe_shared_expert_intermediate_size:
        shared = a.moe_shared_expert_intermediate_size / shape.tp
        parts["shared_experts"] = (_act_bytes(impl, gated, e, shape.tokens, shared, shape.act_fp8_input)
                                   + lin_e * shape.tokens * shared)
        if a.moe_shared_expert_gate:  # output * sigmoid(h @ gate_weight): keeps the output and the gate score
            parts["shared_experts"] += e * ts * a.hidden_size + e * ts
    return parts


def _sizes(shape: RankShape, impl: ActivationImpl) -> tuple[int, float, float]:
    """(element bytes, linear-input element bytes, tokens per rank along the sequence-parallel split). fp4: the
    column-wise quantised input TE keeps for the weight gradient, with its block scales (``model.fp4``)."""
    e = element_bytes(shape.precision)
    lin_e: float = e
    if impl.fp8_linear_inputs and shape.precision == "fp8":
        lin_e = 1
    elif impl.fp8_linear_inputs and shape.precision == "fp4":
        lin_e = fp4_element_bytes(shape.fp4_recipe)
    sp = shape.tp if shape.sequence_parallel and shape.tp > 1 else 1
    return e, lin_e, shape.tokens / sp


def output_saved(shape: RankShape, impl: ActivationImpl) -> dict[str, float]:
    """The output kind: final norm, the output projection's input, the loss's logits and targets."""
    a = shape.arch
    e, lin_e, ts = _sizes(shape, impl)
    parts: dict[str, float] = {}
    parts["final_norm"] = _norm(impl, a.normalization == "LayerNorm", e, ts, a.hidden_size)
    parts["output_in"] = lin_e * ts * a.hidden_size
    parts["logits_fp32"] = loss_saved_bytes(shape, "native")  # the loss's exp(logits) in fp32
    parts["loss_targets"] = (1 + INDEX_BYTES) * shape.tokens
    return parts


def decoder_saved(shape: RankShape, impl: ActivationImpl, *, mlp_input_fp8: bool) -> dict[str, float]:
    """A decoder layer up to its MLP block's input: both norms, the attention block, the pre-MLP norm's output
    (``mlp_input_fp8``: in fp8 when the linear inputs are, i.e. the MLP's first GEMM reads it directly)."""
    a = shape.arch
    e, lin_e, ts = _sizes(shape, impl)
    layernorm = a.normalization == "LayerNorm"
    parts: dict[str, float] = {}
    parts["input_norm"] = _norm(impl, layernorm, e, ts, a.hidden_size)
    parts["input_norm_out"] = lin_e * ts * a.hidden_size
    parts.update(_attention(shape, impl, e, lin_e, ts))
    parts["pre_mlp_norm"] = _norm(impl, layernorm, e, ts, a.hidden_size)
    parts["pre_mlp_norm_out"] = (lin_e if mlp_input_fp8 else e) * ts * a.hidden_size
    return parts


def dense_mlp_saved(shape: RankShape, impl: ActivationImpl) -> dict[str, float]:
    """A dense MLP: the activation's input and fc2's input."""
    e, lin_e, _ = _sizes(shape, impl)
    ffn = shape.arch.ffn_hidden_size / shape.tp
    return {"mlp_act": _act_bytes(impl, shape.arch.gated, e, shape.tokens, ffn, shape.act_fp8_input),
            "mlp_fc2_in": lin_e * shape.tokens * ffn}


def moe_saved(shape: RankShape, impl: ActivationImpl) -> dict[str, float]:
    """An MoE block: router, routed experts, shared experts."""
    e, lin_e, ts = _sizes(shape, impl)
    return _moe(shape, impl, e, lin_e, ts)


def selective_decoder(shape: RankShape, impl: ActivationImpl, parts: dict[str, float], *,
                      mlp_norm_separate: bool) -> tuple[set[str], float]:
    """Apply selective recompute's attention and layernorm modules to a decoder layer's ``parts`` (in place);
    return (the recomputed module names, a checkpoint input's bytes) for the MLP block's own rules.
    ``mlp_norm_separate``: the pre-MLP norm is its own module (not fused into the MLP's first GEMM)."""
    a = shape.arch
    e = element_bytes(shape.precision)
    sp = shape.tp if shape.sequence_parallel and shape.tp > 1 else 1
    residual = e * shape.tokens / sp * a.hidden_size  # a checkpoint's input (the residual stream)
    modules = set(shape.recompute_modules or ("core_attn",)) & _VALID_MODULES
    if "core_attn" in modules and "attn_scores" in parts:
        del parts["attn_scores"]
        if a.multi_latent_attention:
            qh = a.qk_head_dim + a.qk_pos_emb_head_dim
            parts["attn_qkv"] = e * shape.tokens * shape.local_heads * (2 * qh + a.v_head_dim)
        else:
            heads, groups, d = shape.local_heads, shape.local_query_groups, a.kv_channels
            parts["attn_qkv"] = e * shape.tokens * d * (heads + groups + heads + 2 * groups)
    elif "core_attn" in modules:
        parts.pop("attn_softmax_stats", None)  # flash: q, k, v stay saved as the checkpoint's inputs
    if "mla_up_proj" in modules and a.multi_latent_attention:
        _mla_up_proj(shape, impl, parts, e, sp)
    input_norm_separate = not impl.fused_input_norm or a.multi_latent_attention
    if "layernorm" in modules:
        if input_norm_separate:
            parts["input_norm"], parts["input_norm_out"] = residual, 0.0
        if mlp_norm_separate:
            parts["pre_mlp_norm"], parts["pre_mlp_norm_out"] = residual, 0.0
    return modules, residual


def _mla_up_proj(shape: RankShape, impl: ActivationImpl, parts: dict[str, float], e: int, sp: int) -> None:
    """Parts changed by recomputing MLA's up-projections and RoPE (megatron-core 0.16.1
    multi_latent_attention.py: ``CheckpointWithoutOutput`` over ``qkv_up_proj_and_rope_apply``, its
    outputs q, k, v resized to 0 once core attention ran). Whatever core attention kept of q, k, v goes
    with them: TE's flash attention saves them, the local bmm views of them, the core_attn checkpoint keeps
    them as inputs; the local CP stand-in's repeated k, v (``build.cp_core_attention_class``) are new
    tensors and stay. The checkpoint keeps its inputs: q_compressed and kv_compressed (saved anyway by the
    up-projections), k_pos_emb and rotary_pos_emb."""
    a = shape.arch
    parts.pop("attn_qkv", None)
    if "attn_scores" in parts and shape.cp > 1:  # local attention, core_attn not recomputed
        parts["attn_qkv"] = e * shape.tokens * shape.local_heads * shape.cp * (
            a.qk_head_dim + a.qk_pos_emb_head_dim + a.v_head_dim)
    if impl.rope_cache:
        # local: the rotary table (fp32) instead of RoPE's cached cos/sin, run without grad in the
        # checkpoint; k_pos_emb is a view of the kv down-projection's output, keeping it whole (already kept
        # unless torch's RMSNorm took kv_compressed as an fp32 copy), or gathered anew under sequence parallelism
        rot, kl = a.qk_pos_emb_head_dim, a.kv_lora_rank
        parts["rope_cache"] = FP32_BYTES * shape.local_seq * rot
        if sp > 1:
            parts["mla_k_pos_emb"] = e * shape.tokens * rot
        elif a.qk_layernorm and a.normalization != "LayerNorm":
            parts["mla_k_pos_emb"] = e * shape.tokens * (kl + rot)


def as_measured(shape: RankShape, impl: ActivationImpl, *, sequence_split: bool | None = None) -> RankShape:
    """``shape`` as ``primus_ext.measure.build`` builds it, for the formula a measurement compares with.

    ``sequence_split``: the module ran sequence parallelism's split (real TP ranks); in a one-rank world
    norms and residuals take the whole sequence. ``None``: split unless CP > 1, which
    ``measure.runner.layout_for`` always measures in a one-rank world. The local spec (CPU, per-expert
    GEMMs) runs without ``moe_act``, which megatron-core refuses there (``build._recompute_kwargs``; no
    module left: selective recomputes nothing)."""
    split = shape.cp == 1 if sequence_split is None else sequence_split
    if shape.sequence_parallel and not split:
        shape = replace(shape, sequence_parallel=False)
    if impl == LOCAL and shape.recompute == "selective" and "moe_act" in shape.recompute_modules:
        modules = tuple(m for m in shape.recompute_modules if m != "moe_act")
        shape = replace(shape, recompute_modules=modules, recompute="selective" if modules else "none")
    return shape


def op_sac_saved_bytes(shape: RankShape) -> float:
    """Bytes a dense layer keeps under torchtitan's op-level selective activation checkpointing
    (torchtitan parallelize_llama ``_apply_ac_to_transformer_block``, selective_ac_option 'op'): the
    checkpoint's input, the outputs of the ops in its save list - every other ``aten.mm`` (the 1st, 3rd,
    5th, 7th of wq, wk, wv, wo, w1, w3, w2: wq, wv, w1, w2), flash attention's output and fp32 logsumexp,
    and under TP the reduce-scatter outputs (wo, w2) - everything else is recomputed in backward."""
    a = shape.arch
    e = element_bytes(shape.precision)
    t, d = shape.tokens, a.kv_channels
    sp = shape.tp if shape.sequence_parallel and shape.tp > 1 else 1
    ts = t / sp
    heads, groups = shape.local_heads, shape.local_query_groups
    ffn = a.ffn_hidden_size / shape.tp
    saved = e * ts * a.hidden_size  # checkpoint input (the residual stream)
    saved += e * t * (heads * d + groups * d + ffn + a.hidden_size)  # wq, wv, w1, w2 outputs
    saved += e * t * heads * d + FP32_BYTES * shape.micro_batch_size * heads * shape.local_seq  # SDPA out + LSE
    if shape.tp > 1:
        saved += 2 * e * ts * a.hidden_size  # reduce_scatter outputs after wo and w2
    return saved
