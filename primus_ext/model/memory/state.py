"""Per-rank parameters, gradients, optimizer state and the data-parallel sharding transients (torch-free).

Usage (through ``memory.rank.rank_memory``, behind ``estimate_memory`` and the pre-filter)::

    sharding = sharding_bytes(execution)             # (param, grad, optimizer) B/param, dense / expert shards
    params, grads, opt_dense, opt_expert, gathered_layer, gathered_loss = state_bytes(execution, sharding, ...)
    optimizer_step_excess(execution, sharding, params, grads, opt_dense + opt_expert, fwd_bwd_total, fixed)

Megatron DDP keeps a contiguous main-grad buffer, fp32 unless ``grad_reduce_in_bf16``. torch FSDP2 as
megatron-core and Primus run it (``use_torch_fsdp2``, which requires ``use_distributed_optimizer: false``)
keeps everything as sharded DTensors over the data-parallel group:

* parameters in the model's dtype: bf16 for bf16 and fp8 runs (``params_dtype`` bf16, arguments.py:946 at
  d3528a2; training.py:1309 at d3528a2, :1263 at core_v0.16.1, wraps the model in ``Float16Module`` before
  ``TorchFullyShardedDataParallel``);
* gradients in that same dtype: neither megatron-core's wrapper (torch_fully_sharded_data_parallel.py:82-85,
  134 at both versions: ``fully_shard(mesh, reshard_after_forward)``, no ``mp_policy``) nor Primus's
  (primus/backends/megatron/core/distributed/torch_fully_sharded_data_parallel.py:141-182, Primus fd1eeab:
  a ``MixedPrecisionPolicy`` only for fp32 parameters or ``use_fsdp2_bf16_master_weight_optimizer``, both with
  ``reduce_dtype=bf16``) asks for another reduce dtype, and FSDP2 writes the reduce-scattered gradient in the
  sharded parameter's dtype (torch distributed/fsdp/_fully_shard/_fsdp_collectives.py ``foreach_reduce``:
  ``_to_dtype_if_needed(reduce_output, orig_dtype)``, ``orig_dtype`` = the sharded parameter's dtype);
* optimizer: megatron's ``Float16OptimizerWithFloat16Params`` (optimizer/__init__.py:605-606 at d3528a2,
  :460-461 at core_v0.16.1) clones each bf16 DTensor into an fp32 master (optimizer.py:675 at d3528a2, :674
  at core_v0.16.1, ``param.detach().clone().float()``: a DTensor shard), Adam's moments are ``zeros_like`` the
  master: 12 B per parameter of the shard. At the step ``_copy_model_grads_to_main_grads`` (optimizer.py:755-768
  at d3528a2, :754-767 at core_v0.16.1) replaces each bf16 gradient by an fp32 copy (``model_param.grad.float()``,
  then ``model_param.grad = None``): 4 B per parameter of the shard while the step runs, when the activations
  are gone.

All checked on the real modules (a megatron-core GPT in ``TorchFullyShardedDataParallel`` on a two-rank
gloo group, Megatron's optimizer): tests/model/memory/test_memory_fsdp2_megatron.py.
"""

from __future__ import annotations

from primus_ext.model.memory.optimizer_state import adam_state_bytes, dp_sharded
from primus_ext.model.params import ROUTER_PARAM_BYTES
from primus_ext.model.pipeline.registry import copies_of
from primus_ext.specs import ExecutionSpec

FSDP_GATHERED_LAYERS = 2
"""FSDP keeps the current layer's gathered parameters plus one prefetched layer (torch FSDP2: megatron-core
torch_fully_sharded_data_parallel.py:138-141 sets a backward prefetch of the previous layer under recompute,
Primus's wrapper :327-342 one of ``fsdp_prefetch_depth`` = 1; Megatron-FSDP default prefetch of one)."""
FP32_GRAD_BYTES = 4.0
"""The fp32 copy of a gradient ``Float16OptimizerWithFloat16Params`` steps on (``model_param.grad.float()``)."""


def grad_bytes(e: ExecutionSpec, param_b: float) -> float:
    """Bytes per parameter of the gradients held from backward to the optimizer step: torch FSDP2's sharded
    gradients are in the parameter dtype (module docstring); Megatron DDP's / Megatron-FSDP's main-grad
    buffer is fp32 unless ``grad_reduce_in_bf16`` (a DDP option megatron's training.py:1341 at d3528a2 passes
    only to ``DistributedDataParallelConfig``; FSDP2 gets ``TorchFullyShardedDataParallelConfig``, :1335)."""
    if e.fsdp == "torch_fsdp2":
        return param_b
    return 2.0 if (e.grad_reduce_in_bf16 and e.precision != "fp32") else 4.0


def reduce_bytes(e: ExecutionSpec) -> float:
    """Bytes per parameter the data-parallel gradient reduction moves: under torch FSDP2 the reduce dtype
    (``ExecutionSpec.fsdp_reduce_dtype``: the parameter dtype as megatron-core / Primus run it, fp32 under
    torchtitan's policy), otherwise the main-grad buffer's dtype (``grad_bytes``)."""
    param_b = 4.0 if e.precision == "fp32" else 2.0
    if e.fsdp == "torch_fsdp2" and e.fsdp_reduce_dtype == "fp32":
        return FP32_GRAD_BYTES
    return grad_bytes(e, param_b)


def step_grad_bytes(e: ExecutionSpec, grad_b: float) -> float:
    """Bytes per parameter of the gradients while the optimizer steps: under torch FSDP2 with 16-bit
    parameters the fp32 copies Megatron's Float16 optimizer makes, which replace the bf16 ones (freed as
    copied); otherwise the held gradients themselves."""
    if e.fsdp == "torch_fsdp2" and e.precision != "fp32":
        return FP32_GRAD_BYTES
    return grad_b


def fsdp_shard_bytes(e: ExecutionSpec, param_b: float) -> float:
    """Bytes per parameter of a fully sharded (optim_grads_params) parameter shard. Megatron-FSDP keeps fp8
    parameters (fp8_param_gather) in a uint8 model-weight buffer, sharded (megatron-core 0.16.1
    megatron_fsdp/param_and_grad_buffer.py ``_init_each_parameter_group_buffers``), fp32 master weights
    in the optimizer's main-weight buffer; the gathered layer's transpose is a transient. torch FSDP2 turns
    fp8_param_gather off with TE >= 2.0 (training/arguments.py:844-845 at d3528a2): bf16 shards."""
    return 1.0 if e.fsdp == "megatron_fsdp" and e.precision == "fp8" and e.fp8_param_gather else param_b


def sharding_bytes(e: ExecutionSpec) -> tuple[float, float, float, float, float]:
    """(param, grad, optimizer) bytes per param, and the dense / expert shard widths: the data-parallel ranks
    holding a parameter, both copies' under DualPipe (``registry.copies_of``)."""
    param_b = 4.0 if e.precision == "fp32" else 2.0
    copies = copies_of(e)
    return param_b, grad_bytes(e, param_b), adam_state_bytes(e), float(e.dp * e.cp * copies), \
        float(max(1, e.expert_data_parallel_size) * copies)


def fsdp2_gathered_bytes(param_b: float, grad_b: float, fp8_b: float, biggest: float,
                         output: float) -> tuple[float, float]:
    """Bytes of torch FSDP2's unsharded units near the start of backward, where the activations peak: (in a
    layer's backward, in the output layer's backward; 0 without an output layer). The units are the
    transformer layers, the embedding and the output layer (megatron-core torch_fully_sharded_data_parallel.py
    :60-65, Primus's :92-99). A layer's backward: its gathered parameters and the prefetched previous layer's,
    its unsharded gradients, the reduce-scatter input of the unit before it (the output layer's at the last
    layer of the loss stage), which ``FSDPParamGroup.post_backward`` keeps until the next post-backward so the
    collective overlaps (torch _fsdp_param_group.py ``reduce_scatter_states``, at most
    ``reduce_scatter_max_input_buffers`` = 1; ``comm_ctx.reduce_scatter_state`` in older releases), all in the
    reduce dtype (the parameter dtype here), and with fp8 GEMMs the layer's quantised weight TE saves from
    the recomputed forward (no cache: FSDP2 hands TE a newly gathered weight each time). The output layer's
    backward: its gathered weight and unsharded gradient, the last layer prefetched."""
    layer = biggest * (FSDP_GATHERED_LAYERS * param_b + grad_b + fp8_b) + max(biggest, output) * grad_b
    return layer, (output * (param_b + grad_b) + biggest * param_b if output else 0.0)


def state_bytes(e: ExecutionSpec, sharding: tuple[float, float, float, float, float], total_params: float,
                expert: float, router: float, edge: float, biggest: float,
                weight: tuple[float, float], output: float = 0.0,
                trainable: tuple[float, float] | None = None) -> tuple[float, ...]:
    """(parameters, gradients, dense optimizer shard, expert optimizer shard, FSDP-gathered transient in a
    layer's backward, the same in the output layer's backward) bytes
    of one rank holding ``total_params`` (``expert`` of them expert, ``router`` fp32 router, ``edge``
    embedding / output / MTP extras, ``output`` of the output layer) parameters; ``sharding`` =
    ``sharding_bytes(e)``, ``biggest`` = the largest layer's parameters (what FSDP gathers), ``weight`` =
    ``fp8.layer_weight_bytes`` (bytes per transformer-layer GEMM parameter and its fp8 cache). Called by
    ``memory.rank.rank_memory``, the one arithmetic behind ``estimate_memory`` and the pre-filter.

    ``trainable`` (LoRA, ``model.lora``): the (dense, expert) adapter parameters, the only ones with gradients
    and optimizer state (Primus's ``PEFT.freeze_model`` sets ``requires_grad = False`` on every base weight, and
    Megatron's DDP buffers and optimizer take only parameters that require a gradient); the frozen base weights
    stay, in the model's dtype, beside the adapters."""
    param_b, grad_b, opt_b, dp_dense, dp_expert = sharding
    dense_params = total_params - expert
    params = (total_params - edge - router) * sum(weight) + edge * param_b + router * ROUTER_PARAM_BYTES
    shard_opt, shard_grads, shard_params = dp_sharded(e)
    held_dense, held_expert = (dense_params, expert) if trainable is None else trainable
    if trainable is not None:
        params += (trainable[0] + trainable[1]) * param_b
    grads = (held_dense + held_expert) * grad_b
    opt_dense = held_dense / (dp_dense if shard_opt else 1) * opt_b
    opt_expert = held_expert / (dp_expert if shard_opt else 1) * opt_b
    fsdp_layer = fsdp_loss = 0.0
    if shard_grads:
        grads = (held_dense / dp_dense + held_expert / dp_expert) * grad_b
    if shard_params:
        adapters = (trainable[0] / dp_dense + trainable[1] / dp_expert) if trainable is not None else 0.0
        params = (dense_params / dp_dense + expert / dp_expert + adapters) * fsdp_shard_bytes(e, param_b)
        if e.fsdp == "torch_fsdp2":
            fsdp_layer, fsdp_loss = fsdp2_gathered_bytes(param_b, grad_b, weight[1], biggest, output)
        else:
            fsdp_layer = fsdp_loss = FSDP_GATHERED_LAYERS * biggest * param_b + biggest * grad_b
    # DualPipe's second model copy is in the counts: its plan gives each rank both copies' stages (model.stages)
    return params, grads, opt_dense, opt_expert, fsdp_layer, fsdp_loss


def optimizer_step_excess(e: ExecutionSpec, sharding: tuple[float, float, float, float, float], params: float,
                          grads: float, optimizer: float, fwd_bwd_total: float, fixed: float) -> float:
    """Bytes by which the optimizer step's peak (parameters, optimizer state, the gradients it steps on,
    ``fixed`` context / communicator / workspace bytes; the activations are freed by then) exceeds the
    forward-backward peak ``fwd_bwd_total``; 0 when it does not."""
    grad_b = sharding[1]
    step = params + grads * (step_grad_bytes(e, grad_b) / grad_b) + optimizer + fixed
    return step - fwd_bwd_total if step > fwd_bwd_total else 0.0
