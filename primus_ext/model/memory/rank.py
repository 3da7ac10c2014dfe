"""One pipeline rank's bytes: the single arithmetic behind ``estimate_memory`` and the pre-filter.

Usage (``memory.estimate`` calls it; its module docstring describes the terms)::

    ctx = stage_context(model, execution, None)                                # memory.stage
    ranks = [(rank, rank_profile(ctx, rank)) for rank in range(execution.pp)]
    peak, stages = rank_memory(model, execution, gpu.fp8_any_layout, biggest_layer_params(ctx), ranks, detail=True)

``estimate_memory`` runs it on every rank with ``detail`` (a ``StageMemory`` each: the five totals and their named
parts); ``fits`` / ``peak_bytes`` on one rank per distinct stage composition without, memoised. Pure, torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from primus_ext.model.fp8 import layer_weight_bytes
from primus_ext.model.memory import state
from primus_ext.model.memory.optimizer_state import dp_sharded
from primus_ext.model.memory.schedule import held_activations, megatron_held
from primus_ext.model.memory.stage import RankProfile
from primus_ext.model.params import ROUTER_PARAM_BYTES
from primus_ext.model.pipeline.registry import resolve
from primus_ext.model.pipeline.zbv import wgrad_share
from primus_ext.specs import ExecutionSpec, ModelSpec

# --- "other" memory: named constants -----------------------------------------------------------
CUDA_CONTEXT_BYTES = 0.6e9
"""CUDA/HIP context + kernel images of a torch process: ~500-600 MiB on H100 with CUDA 12 (nvidia-smi
of an idle torch 2.x process)."""
NCCL_BUFFER_BYTES = 0.5e9
"""NCCL channel buffers: NCCL_BUFFSIZE = 4 MiB per channel per peer (NCCL docs), for the TP, DP,
PP and EP communicators a training rank keeps (estimate, order of magnitude)."""
OUTSIDE_ALLOCATOR_BYTES = CUDA_CONTEXT_BYTES + NCCL_BUFFER_BYTES
"""Device memory a training process holds outside torch's caching allocator, where the GPU profile states no
measured figure (``GPUSpec.outside_allocator_bytes``; the AMD profiles do: 10.15 GiB, measured)."""
GEMM_WORKSPACE_BYTES = 0.1e9
"""cuBLAS (32 MiB per handle on Hopper, torch's default CUBLAS_WORKSPACE_CONFIG) + TE cuBLASLt
workspaces on the compute and communication streams."""
FIXED_OTHER_BYTES = OUTSIDE_ALLOCATOR_BYTES + GEMM_WORKSPACE_BYTES
"""What stays allocated through the optimizer step beside the parameters, gradients and optimizer state (with the
default outside-allocator figure; ``rank_memory`` uses the GPU's)."""
FRAGMENTATION_FRACTION = 0.03
"""Caching-allocator overhead (reserved - allocated) as a fraction of the activations and transient buffers.
Measured on Primus's MI355X runs (``../shared/validation/logs``, max reserved - max allocated after the first
iteration): DeepSeek-V2-Lite 7.5 GiB (4.4 % of its projected activations and transients), Llama-3.2-1B 0.85 GiB
(1.5 %); Megatron-Bridge's Llama-3.2-1B on H100 0.22 GiB. Not counted: the block the allocator adds when the
optimizer's state, created at the end of the first iteration inside cached free blocks, leaves no free block for
the next iteration's largest tensor: Llama-3.2-1B's max reserved grew by 16 400 MB in iteration 2, its fp32
logits (4 x 8192 x 131 200 x 4 B) exactly, to 15.4 GiB over the allocated peak. That block is elastic (on a
failed allocation torch's allocator frees its cached free segments and retries), so a tighter GPU need not hold
it; published runs that ran on GPUs tighter than the projection (GPT-OSS-120B B200 row 49: +5 points with it
counted) say so too. It is the largest part of the model's error on a roomy GPU's device usage (benchmarks/
memory_error.py)."""


@dataclass(frozen=True, kw_only=True)
class StageMemory:
    """Peak bytes on one GPU of one pipeline rank."""

    rank: int
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    other_bytes: float
    total_bytes: float
    microbatches_in_flight: float
    """Micro-batches whose activations are held at the peak (chunk-weighted under VPP)."""
    detail: Mapping[str, float]
    """Named parts (bytes) behind the five totals."""

    @property
    def peak_bytes(self) -> float:
        """Alias of ``total_bytes`` (the stage's peak), for readers of per-stage peaks."""
        return self.total_bytes


def rank_memory(model: ModelSpec, e: ExecutionSpec, fp8_any_layout: bool, biggest: int,
                ranks: Iterable[tuple[int, RankProfile]], *, detail: bool = False,
                outside_allocator: float = OUTSIDE_ALLOCATOR_BYTES) -> tuple[float, list[StageMemory]]:
    """The largest per-GPU bytes of the pipeline ranks ``ranks`` (``(rank, rank_profile(ctx, rank))`` pairs) under
    ``e`` and, when ``detail``, each rank's ``StageMemory`` (else none). ``fp8_any_layout``: the GPU's FP8 GEMMs
    take every operand layout (``GPUSpec.fp8_any_layout``; False = the conservative Hopper answer); ``biggest`` =
    ``biggest_layer_params(ctx)``; ``outside_allocator``: the GPU's device bytes outside torch's allocator
    (``GPUSpec.outside_allocator_bytes``, else ``OUTSIDE_ALLOCATOR_BYTES``). What the ranks share is computed once,
    before the loop."""
    sharding = state.sharding_bytes(e)
    param_b, grad_b = sharding[0], sharding[1]
    weight = layer_weight_bytes(e, fp8_any_layout, param_bytes=param_b)
    schedule = resolve(e)
    pp, vpp = e.pipeline_model_parallel_size, e.virtual_pipeline_model_parallel_size or 1
    megatron, zb = schedule.batch_kernel is not None, schedule.splits_wgrad
    m = max(1, e.global_batch_size // (e.micro_batch_size * e.data_parallel_size))
    extra = 1 if e.overlap_moe_expert_parallel_comm else 0
    share = 0.0 if megatron else wgrad_share(model.hidden_size, model.num_attention_heads, e.seq_length)
    peak, stages = 0.0, []
    for rank, p in ranks:
        # --- parameters, gradients, optimizer --------------------------------------------------
        params, grads, opt_dense, opt_expert, fsdp_layer, fsdp_loss = state.state_bytes(
            e, sharding, p.total_params, p.expert_params, p.router_params, p.edge_params, biggest, weight,
            p.output_params, p.trainable)
        fsdp_gather = max(fsdp_layer, fsdp_loss)
        opt = opt_dense + opt_expert
        # --- activations -----------------------------------------------------------------------
        if megatron:  # 1F1B / interleaved: their counts in closed form
            activations = megatron_held(pp, vpp, m, rank, extra, p.chunk_saved, p.prefix, p.per_mb)
        else:
            w_bytes = p.per_mb * p.wgrad_fraction if zb else 0.0  # split-W: inputs kept for the W pass
            activations, flights, zb_hold = max((held_activations(f, p.chunk_saved) + w * w_bytes, f, w * w_bytes)
                                                for f, w in schedule.held_states(rank, pp, vpp, m, extra, share))
        # --- other -----------------------------------------------------------------------------
        freed = loss_overlap(p.loss_saved + p.logits if p.loss_saved else 0.0, p.working + p.backward_ws,
                             fsdp_layer, fsdp_loss, zb)
        transient = p.working + p.backward_ws + p.logits + p.a2a - freed + fsdp_gather
        fragmentation = FRAGMENTATION_FRACTION * (activations + transient)
        fixed = outside_allocator + GEMM_WORKSPACE_BYTES
        other = transient + fragmentation + fixed
        held = params + grads + opt + activations
        step_excess = state.optimizer_step_excess(e, sharding, params, grads, opt, held + other, fixed)
        other += step_excess
        total = held + other
        if total > peak:
            peak = total
        if not detail:
            continue
        if megatron:
            flights, zb_hold = schedule.chunk_in_flight(rank, pp, vpp, m, extra), 0.0
        if dp_sharded(e)[2]:  # FSDP shards every parameter (the edge ones are dense) and keeps no fp8 cache
            edge_part = p.edge_params / sharding[3] * state.fsdp_shard_bytes(e, param_b)
            router_extra, fp8_cache = 0.0, 0.0
        else:
            edge_part = p.edge_params * param_b
            router_extra = p.router_params * (ROUTER_PARAM_BYTES - param_b)
            fp8_cache = (p.total_params - p.edge_params - p.router_params) * weight[1]
        parts = {
            "params.decoder_layers": params - edge_part - router_extra - fp8_cache,
            "params.embedding_output_mtp": edge_part, "params.router_fp32_extra": router_extra,
            "params.fp8_weight_cache": fp8_cache,
            "params.count": p.total_params, "params.expert_count": p.expert_params,
            "params.lora_adapter_count": sum(p.trainable) if p.trainable else 0.0,
            "grads.at_optimizer_step": grads * (state.step_grad_bytes(e, grad_b) / grad_b),
            "optimizer.dense_shard": opt_dense, "optimizer.expert_shard": opt_expert,
            "activations.per_microbatch": p.per_mb, "activations.zb_deferred_wgrad": zb_hold,
            "other.recompute_working_set": p.working, "other.backward_workspace": p.backward_ws,
            "other.loss_logits": p.logits, "other.loss_freed_before_layer_backward": -freed,
            "other.moe_a2a_buffers": p.a2a, "other.fsdp_gathered": fsdp_gather,
            "other.fragmentation": fragmentation, "other.outside_allocator": outside_allocator,
            "other.gemm_workspace": GEMM_WORKSPACE_BYTES,
            "other.optimizer_step_excess": step_excess,
        }
        stages.append(StageMemory(rank=rank, params_bytes=params, grads_bytes=grads, optimizer_bytes=opt,
                                  activations_bytes=activations, other_bytes=other, total_bytes=total,
                                  microbatches_in_flight=activations / p.per_mb if p.per_mb else flights[0],
                                  detail=parts))
    return peak, stages


def loss_overlap(loss_part: float, layer_part: float, fsdp_layer: float, fsdp_loss: float, zb: bool) -> float:
    """Bytes the loss stage's peak holds less than the sum of its parts. Autograd runs the loss's and the
    output layer's backward first and frees their saved tensors and the native loss's logits gradient
    (``loss_part``: ``RankProfile.loss_saved`` + logits) before the last layer recomputes its forward and runs
    its backward (``layer_part``: recompute working set + backward workspace), so on top of the layers' saved
    bytes only the larger phase is held, each with its own FSDP units (``fsdp_loss`` / ``fsdp_layer``, summed
    as their maximum). 0 where ``loss_saved`` is (several chunks, MTP, no output layer) and under ZB-H1
    (``zb``), whose deferred weight-gradient passes may keep the logits gradient for later."""
    if not loss_part or zb:
        return 0.0
    gathered = max(fsdp_layer, fsdp_loss)
    # sum of the parts - the larger phase: loss_part + layer_part + gathered - max(loss_part + fsdp_loss,
    # layer_part + fsdp_layer)
    return min(layer_part + gathered - fsdp_loss, loss_part + gathered - fsdp_layer)

