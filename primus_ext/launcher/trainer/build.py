"""Build the megatron-core GPT one rank trains: config, model chunks, DDP wrapper, optimizer.

The config and the decoder layer's spec are measurement's (``measure.build.config_kwargs``,
``measure.kind_builders.decoder_layer_spec``) for the layer the projection prices, with the run's own fields
(``RUN_FIELDS``): what ``train --verify`` trains is what ``bench`` timed.

Call inside an initialised process group with megatron's ``parallel_state`` set up
(``worker.py``). The local layer spec (torch modules) is used unless transformer-engine imports on a
CUDA device. On CPU the shims of ``primus_ext.measure.shims`` must be applied first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from primus_ext.launcher.trainer.plan import TrainPlan

if TYPE_CHECKING:
    from primus_ext.model.rank_shape import RankShape

RUN_FIELDS = ("num_layers", "pipeline_dtype", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
              "expert_model_parallel_size", "expert_tensor_parallel_size", "batch_p2p_comm",
              "deallocate_pipeline_outputs", "recompute_method", "recompute_num_layers", "moe_layer_freq",
              "moe_token_dispatcher_type", "moe_grouped_gemm", "moe_router_force_load_balancing", "fp8_recipe",
              "fp4_param", "use_cpu_initialization")
"""What the run sets beyond the timed layer's config (``measure.build.config_kwargs``): its depth and pipeline, its
expert layout, how many layers recompute, its dispatcher and the precision recipe it trains with. Every other field is
the layer the projection timed (tests/launcher/test_trainer_model.py)."""


def decoder_shape(plan: TrainPlan) -> RankShape:
    """The decoder layer the projection prices for this run (``model.rank_shapes``): the MoE layer of an MoE model,
    else the dense one."""
    from primus_ext.model.layers import rank_shapes

    return rank_shapes(plan.model, plan.execution)["moe" if plan.model.is_moe else "dense"]


def transformer_config(plan: TrainPlan, *, cpu: bool, use_te: bool):
    """megatron ``TransformerConfig`` for the plan's model and execution: the timed decoder layer's config
    (``measure.build.config_kwargs`` at the run's global sizes) with the run's ``RUN_FIELDS``."""
    from primus_ext.measure.build import config_kwargs

    m, e = plan.model, plan.execution
    config_class, kw, _ = config_kwargs(decoder_shape(plan), distributed=True,
                                        device=torch.device("cpu" if cpu else "cuda"), use_te=use_te)
    kw.update(
        num_layers=m.num_layers,
        pipeline_dtype=kw["params_dtype"],
        use_cpu_initialization=cpu,
        pipeline_model_parallel_size=e.pp,
        virtual_pipeline_model_parallel_size=e.virtual_pipeline_model_parallel_size if e.vpp > 1 else None,
        expert_model_parallel_size=e.ep,
        expert_tensor_parallel_size=e.etp,
        # batch_isend_irecv is followed by torch.cuda.synchronize(): plain isend/irecv on CPU
        batch_p2p_comm=not cpu,
        deallocate_pipeline_outputs=True,
    )
    if e.recompute_granularity == "full":
        # block 0 stays 0 (megatron-core checkpoints no layer then: model.recompute)
        n = e.recompute_num_layers
        kw.update(recompute_method=e.recompute_method or "uniform", recompute_num_layers=1 if n is None else n)
    if m.is_moe:
        kw.update(
            moe_layer_freq=[int(x) for x in m.moe_layer_pattern] or 1,
            moe_token_dispatcher_type="allgather" if cpu else e.moe_token_dispatcher_type,
            moe_grouped_gemm=use_te and e.moe_grouped_gemm,
            moe_router_force_load_balancing=e.moe_router_force_load_balancing,
        )
    if use_te and e.precision == "fp8":
        # the recipe's scaling; torchao's rowwise (read from torchtitan runs only) has no TE recipe
        kw.update(fp8_recipe="tensorwise" if e.fp8_recipe == "rowwise" else e.fp8_recipe)
    if use_te and e.precision == "fp4" and e.fp4_recipe == "nvfp4":
        kw.update(fp4_param=e.fp4_param)  # megatron-core 0.16 (TE >= 2.7)
    return config_class(**kw)


def layer_spec(plan: TrainPlan, config, *, use_te: bool):
    """The timed decoder layer's spec (``measure.kind_builders.decoder_layer_spec``) under the run's config."""
    from primus_ext.measure.kind_builders import decoder_layer_spec

    return decoder_layer_spec(decoder_shape(plan), config, use_te)


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
