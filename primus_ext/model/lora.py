"""LoRA fine-tuning as Primus runs it (``primus/backends/megatron/peft``): adapters and frozen base weights.

With ``lora.enabled`` every base parameter is frozen (``PEFT.freeze_model``: ``requires_grad = False``), so a
layer's backward still computes the input gradient through its linears (``dgrad``) but no weight gradient
(``wgrad``), and the frozen weights have no gradient buffer and no optimizer state. Each target linear
(``linear_qkv``, ``linear_proj``, ``linear_fc1``, ``linear_fc2``; the MoE experts' grouped fc1 / fc2 and the
shared experts' too) gets a ``ParallelLinearAdapter`` (``peft/utils.py``): ``linear_in`` (in -> r) and
``linear_out`` (r -> out), both split by TP (ETP for experts), so one rank holds ``r * (in + out) / TP``
adapter parameters per target; a TE grouped linear (the experts) shares one adapter across its GEMMs
(``LoRAMerge.transform``). Per token and target the adapter adds ``2 r (in + out) / TP`` forward FLOPs and
twice that in backward (input and weight gradients of both small GEMMs).

    lora_params(shape)                    # (dense, expert) adapter parameters one rank holds for a layer kind
    lora_cost(base_cost, shape, gpu)      # the layer's cost with frozen base weights and its adapters
    trained_in_full(shape)                # the shape measurements build (a LoRA run reuses them)

Pure and torch-free.
"""

from __future__ import annotations

from dataclasses import replace

from primus_ext.model.costs import LayerCost
from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.rank_shape import RankShape
from primus_ext.model.roofline import gemm_bytes, membound_seconds
from primus_ext.specs.system import GPUSpec

TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
"""Linear layers of megatron-core's GPT layer LoRA can target, as Primus names them (configs/modules/megatron/
sft_trainer.yaml ``lora.target_modules``; peft/lora.py matches module names)."""


def _targets(shape: RankShape) -> list[tuple[str, float, float, float, int, bool]]:
    """(target, tokens, in, out, split, expert) of every adapter of one layer kind (global in / out)."""
    a = shape.arch
    if not get_kind(shape.kind).lora_adapters or not shape.lora_rank:
        return []
    chosen = set(shape.lora_targets)
    t = shape.tokens  # the linears see the whole local sequence (sequence parallelism gathers it first)
    gate = 2 if a.gated else 1
    out: list[tuple[str, float, float, float, int, bool]] = []
    if a.multi_latent_attention:  # megatron-core's MLA has no linear_qkv; its output projection is linear_proj
        width = a.num_attention_heads * a.v_head_dim
    else:
        width = a.num_attention_heads * a.kv_channels
        qkv = (a.num_attention_heads + 2 * a.num_query_groups) * a.kv_channels
        out.append(("linear_qkv", t, a.hidden_size, qkv, shape.tp, False))
    out.append(("linear_proj", t, width, a.hidden_size, shape.tp, False))
    mlp = [(a.ffn_hidden_size, t, False)] if a.ffn_hidden_size else []
    if a.num_experts:
        mlp.append((a.moe_ffn_hidden_size, shape.routed_tokens_per_rank, True))
        if a.moe_shared_expert_intermediate_size:
            mlp.append((a.moe_shared_expert_intermediate_size, t, False))
    for width_ffn, tokens, expert in mlp:
        split = shape.etp if expert else shape.tp
        out.append(("linear_fc1", tokens, a.hidden_size, gate * width_ffn, split, expert))
        out.append(("linear_fc2", tokens, width_ffn, a.hidden_size, split, expert))
    return [row for row in out if row[0] in chosen]


def trained_in_full(shape: RankShape) -> RankShape:
    """The shape without LoRA: what a measurement builds and the store keys (``lora_cost`` prices the rest)."""
    return replace(shape, lora_rank=0, lora_targets=()) if shape.lora_rank else shape


def lora_params(shape: RankShape) -> tuple[int, int]:
    """(dense, expert) adapter parameters one rank holds for this layer kind (one adapter per grouped linear)."""
    dense = expert = 0
    for _, _, n_in, n_out, split, is_expert in _targets(shape):
        count = int(shape.lora_rank * (n_in + n_out) // split)
        if is_expert:
            expert += count
        else:
            dense += count
    return dense, expert


def skinny_gemm_seconds(m: float, n: float, k: float, gpu: GPUSpec, precision: str) -> float:
    """An adapter GEMM (one side of rank r): the roofline bound itself (Williams et al. 2009), the slower of
    its math at the large-GEMM efficiency and the HBM time of its operands, which dominates at r <= 64. Not
    ``roofline.gemm_seconds``: its size roll-off (``gemm_half_size_flops``) is fitted on whole layers and
    stands in for per-layer costs too (the H200 kernel sweep measured 2.1e9 FLOP against Hopper's fitted 3.0e10,
    RESULTS.md), so
    charging it to each of eight extra skinny GEMMs would bill those costs eight more times."""
    math_s = 2.0 * m * n * k / (gpu.peak_tflops(precision) * 1e12 * gpu.efficiency.gemm_max)
    return max(math_s, membound_seconds(gemm_bytes(m, n, k, precision), gpu))


def adapter_seconds(shape: RankShape, gpu: GPUSpec) -> float:
    """Forward seconds of one layer kind's adapters for one micro-batch (two skinny GEMMs per target)."""
    precision = "bf16" if shape.precision in ("fp8", "fp4") else shape.precision
    total = 0.0
    for _, tokens, n_in, n_out, split, _ in _targets(shape):
        total += skinny_gemm_seconds(tokens, shape.lora_rank, n_in / split, gpu, precision)  # x A
        total += skinny_gemm_seconds(tokens, n_out / split, shape.lora_rank, gpu, precision)  # (x A) B
    return total


def lora_cost(base: LayerCost, shape: RankShape, gpu: GPUSpec) -> LayerCost:
    """``base`` (the layer with trainable weights) as it runs under LoRA: no weight-gradient GEMMs for the frozen
    base (``wgrad_ms``, or half the backward where it was not measured apart), plus the adapters' forward and
    their backward (input and weight gradients: twice the forward). The embedding and output layers are frozen
    too: their weight gradient goes. Adapter GEMMs run in BF16 (they are plain megatron-core linears, outside
    Transformer Engine's FP8 autocast)."""
    if not shape.lora_rank:
        return base
    frozen_wgrad = base.wgrad_ms if base.wgrad_ms is not None else base.bwd_ms / 2
    adapter_ms = adapter_seconds(shape, gpu) * 1e3
    recompute = base.recompute_ms + (adapter_ms if shape.recompute == "full" else 0.0)  # full recompute re-runs them
    note = base.origin.note if base.origin.note.endswith("+lora") else f"{base.origin.note}+lora"
    return replace(base, fwd_ms=base.fwd_ms + adapter_ms,
                   bwd_ms=max(0.0, base.bwd_ms - frozen_wgrad) + 2 * adapter_ms,
                   wgrad_ms=adapter_ms, recompute_ms=recompute,
                   params=base.params + sum(lora_params(shape)),
                   origin=replace(base.origin, note=note))
