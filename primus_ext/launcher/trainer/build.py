"""Build the megatron-core GPT one rank trains: config, model chunks, DDP wrapper, optimizer.

Call inside an initialised process group with megatron's ``parallel_state`` set up
(``worker.py``). The local layer spec (torch modules) is used unless transformer-engine imports on a
CUDA device. On CPU the shims of ``primus_ext.measure.shims`` must be applied first.
"""

from __future__ import annotations

from typing import Any

import torch

from primus_ext.launcher.trainer.plan import TrainPlan

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
           "fp8": torch.bfloat16, "fp4": torch.bfloat16}


def _activation(name: str) -> tuple[Any, bool]:
    import torch.nn.functional as F
    from megatron.core.activations import squared_relu

    return {"swiglu": (F.silu, True), "geglu": (F.gelu, True), "gelu": (F.gelu, False),
            "squared_relu": (squared_relu, False)}[name]


def transformer_config(plan: TrainPlan, *, cpu: bool, use_te: bool):
    """megatron ``TransformerConfig`` for the plan's model and execution."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    m, e = plan.model, plan.execution
    act, gated = _activation(m.activation)
    dtype = _DTYPES[e.precision]
    kw: dict[str, Any] = dict(
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        ffn_hidden_size=m.ffn_hidden_size,
        num_attention_heads=m.num_attention_heads,
        num_query_groups=m.num_query_groups,
        kv_channels=m.kv_channels,
        normalization=m.normalization,
        gated_linear_unit=gated,
        activation_func=act,
        add_bias_linear=m.add_bias_linear,
        add_qkv_bias=m.add_qkv_bias,
        qk_layernorm=m.qk_layernorm,
        window_size=m.window_size,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        use_cpu_initialization=cpu,
        tensor_model_parallel_size=e.tp,
        pipeline_model_parallel_size=e.pp,
        virtual_pipeline_model_parallel_size=e.virtual_pipeline_model_parallel_size if e.vpp > 1 else None,
        expert_model_parallel_size=e.ep,
        expert_tensor_parallel_size=e.etp,
        sequence_parallel=bool(e.sequence_parallel and e.tp > 1),
        # batch_isend_irecv is followed by torch.cuda.synchronize(): plain isend/irecv on CPU
        batch_p2p_comm=not cpu,
        deallocate_pipeline_outputs=True,
    )
    if e.recompute_granularity == "full":
        kw.update(recompute_granularity="full", recompute_method=e.recompute_method or "uniform",
                  recompute_num_layers=e.recompute_num_layers or 1)
    elif e.recompute_granularity == "selective":
        kw.update(recompute_granularity="selective", recompute_modules=list(e.recompute_modules) or ["core_attn"])
    if m.is_moe:
        kw.update(
            num_moe_experts=m.num_experts,
            moe_router_topk=m.moe_router_topk,
            moe_ffn_hidden_size=m.expert_ffn_hidden_size,
            moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
            moe_shared_expert_gate=m.moe_shared_expert_gate,
            moe_layer_freq=[int(x) for x in m.moe_layer_pattern] or 1,
            moe_token_dispatcher_type="allgather" if cpu else e.moe_token_dispatcher_type,
            moe_grouped_gemm=use_te and e.moe_grouped_gemm,
            moe_router_force_load_balancing=e.moe_router_force_load_balancing,
            moe_router_pre_softmax=m.moe_router_topk == 1,
        )
    if use_te and e.precision == "fp8":
        # the recipe's scaling; torchao's rowwise (read from torchtitan runs only) has no TE recipe
        kw.update(fp8="hybrid", fp8_recipe="tensorwise" if e.fp8_recipe == "rowwise" else e.fp8_recipe)
    if use_te and e.precision == "fp4" and e.fp4_recipe == "nvfp4":
        kw.update(fp4="e2m1", fp4_recipe="nvfp4", fp4_param=e.fp4_param)  # megatron-core 0.16 (TE >= 2.7)
    return TransformerConfig(**kw)


def layer_spec(plan: TrainPlan, config, *, use_te: bool):
    from megatron.core.models.gpt import gpt_layer_specs as specs

    m = plan.model
    experts = m.num_experts if m.is_moe else None
    if use_te:
        return specs.get_gpt_layer_with_transformer_engine_spec(
            num_experts=experts, moe_grouped_gemm=config.moe_grouped_gemm, qk_layernorm=m.qk_layernorm)
    spec = specs.get_gpt_layer_local_spec(num_experts=experts, moe_grouped_gemm=False,
                                          qk_layernorm=m.qk_layernorm, normalization=m.normalization)
    if config.sequence_parallel:  # CPU shim 4: torch norms under sequence parallelism
        from primus_ext.measure.shims import SPTorchNorm

        spec.submodules.input_layernorm = SPTorchNorm
        spec.submodules.pre_mlp_layernorm = SPTorchNorm
    return spec


def _sp_block_spec(spec, config, vp_stage: int | None):
    """The block spec with the final norm made SP-capable (CPU shim 4; megatron would use WrappedTorchNorm)."""
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build

    from primus_ext.measure.shims import SPTorchNorm

    layers = get_num_layers_to_build(config, vp_stage=vp_stage)
    return TransformerBlockSubmodules(layer_specs=[spec] * layers, layer_norm=SPTorchNorm)


def build_model_chunks(plan: TrainPlan, config, *, use_te: bool, device: torch.device) -> list[torch.nn.Module]:
    """The GPT model chunks this rank holds (one per virtual stage), moved to ``device``."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel

    m, e = plan.model, plan.execution
    spec = layer_spec(plan, config, use_te=use_te)
    vocab = m.padded_vocab_size(e.tp)
    chunks = []
    for vp in range(e.vpp):
        block_spec = _sp_block_spec(spec, config, vp if e.vpp > 1 else None) if config.sequence_parallel \
            and not use_te else spec
        pre = ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp) if e.vpp > 1 else \
            ps.is_pipeline_first_stage()
        post = ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp) if e.vpp > 1 else \
            ps.is_pipeline_last_stage()
        model = GPTModel(
            config=config, transformer_layer_spec=block_spec, vocab_size=vocab,
            max_sequence_length=max(m.max_position_embeddings, e.seq_length),
            pre_process=pre, post_process=post,
            share_embeddings_and_output_weights=not m.untie_embeddings_and_output_weights,
            position_embedding_type=m.position_embedding_type,
            vp_stage=vp if e.vpp > 1 else None,
        )
        chunks.append(model.to(device))
    return chunks


def wrap_and_optimizer(plan: TrainPlan, config, chunks: list[torch.nn.Module], *, cpu: bool):
    """Float16Module (bf16/fp16), megatron DDP, and the optimizer (megatron's Adam; ``LocalAdam`` on CPU)."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer.module import Float16Module

    e = plan.execution
    if config.bf16 or config.fp16:
        chunks = [Float16Module(config, c) for c in chunks]
    dist_opt = e.use_distributed_optimizer and not cpu  # LocalAdam needs the full reduced grads
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=not e.grad_reduce_in_bf16,
        overlap_grad_reduce=e.overlap_grad_reduce,
        use_distributed_optimizer=dist_opt,
        overlap_param_gather=e.overlap_param_gather and dist_opt,
    )
    wrapped = [
        DistributedDataParallel(config=config, ddp_config=ddp_config, module=c,
                                disable_bucketing=i > 0)
        for i, c in enumerate(chunks)
    ]
    if cpu:  # megatron's optimizers allocate their loss-scale tensors on 'cuda'
        return wrapped, LocalAdam(wrapped, lr=plan.lr)
    opt_config = OptimizerConfig(optimizer="adam", lr=plan.lr, weight_decay=0.0, bf16=config.bf16,
                                 fp16=config.fp16, params_dtype=config.params_dtype,
                                 use_distributed_optimizer=e.use_distributed_optimizer, clip_grad=1.0)
    return wrapped, get_megatron_optimizer(opt_config, wrapped)


class LocalAdam:
    """Adam over fp32 master copies of the DDP-reduced ``main_grad``s (the CPU stand-in for
    megatron's ``Float16OptimizerWithFloat16Params`` / ``FP32Optimizer``, which need CUDA).

    Same duties per step: read the reduced grads, update fp32 masters, copy back to the params.
    No loss scaling (bf16 does not need it) and no gradient clipping.
    """

    def __init__(self, chunks: list[torch.nn.Module], *, lr: float):
        self.params = [p for c in chunks for p in c.parameters() if p.requires_grad]
        self.masters = [p.detach().float().clone().requires_grad_(True) for p in self.params]
        self.inner = torch.optim.Adam(self.masters, lr=lr)
        self.scale_loss = None
        """No loss scaling: assigned to ``config.grad_scale_func`` (megatron skips ``None``)."""

    def zero_grad(self) -> None:
        self.inner.zero_grad(set_to_none=True)

    def step(self) -> tuple[bool, float, None]:
        for p, m in zip(self.params, self.masters, strict=True):
            grad = getattr(p, "main_grad", None)
            grad = grad if grad is not None else p.grad
            m.grad = None if grad is None else grad.float()
        self.inner.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.masters, strict=True):
                p.copy_(m)
        norms = [m.grad.norm() for m in self.masters if m.grad is not None]
        return True, float(torch.stack(norms).norm()) if norms else 0.0, None
