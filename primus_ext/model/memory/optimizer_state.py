"""Adam's per-parameter bytes: the state the (distributed) optimizer keeps and the HBM traffic of its step.

megatron-core 0.16.1 ``OptimizerConfig`` / ``optimizer/__init__.py`` / ``optimizer/distrib_optimizer.py``:
by default fp32 master weights + fp32 ``exp_avg`` + fp32 ``exp_avg_sq`` (12 B/param beside bf16 parameters,
8 B when training in fp32, the parameters being their own masters). With ``use_precision_aware_optimizer``
(Transformer Engine's FusedAdam, distributed optimizer only) the moments take ``exp_avg_dtype`` /
``exp_avg_sq_dtype``, and FusedAdam keeps the master weights itself whenever ``main_params_dtype`` is not fp32
or the run is not fp8 with a current-scaling recipe (``use_precision_aware_optimizer_no_fp8_or_ds_fp8``):
as ``main_params_dtype``, or only the 16 low bits of the fp32 master under bf16 with ``store_param_remainders``
(an int16 shard, the high half being the bf16 parameter; TE >= 2.1). Otherwise megatron-core keeps the fp32
master as usual. ``dp_sharded``: which of optimizer state, gradients and parameters the data-parallel group
shards (the memory model and the step tail's reduce / gather follow the same rule). Pure and torch-free.
"""

from __future__ import annotations

from primus_ext.specs import ExecutionSpec

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
"""Bytes per element of the optimizer dtypes megatron accepts (fp8 moments are stored as uint8)."""


def _te_masters(e: ExecutionSpec) -> bool:
    """FusedAdam holds the master weights (``use_precision_aware_optimizer_no_fp8_or_ds_fp8``)."""
    return e.main_params_dtype != "fp32" or e.precision != "fp8" or e.fp8_recipe == "delayed"


def _remainders(e: ExecutionSpec) -> bool:
    """FusedAdam keeps only the 16 low bits of the fp32 master (the bf16 parameter holds the rest)."""
    return e.store_param_remainders and e.precision in ("bf16", "fp8", "fp4")  # config.bf16 (fp8 / fp4 runs too)


def master_bytes(e: ExecutionSpec) -> float:
    """Bytes per parameter of the master weights in the optimizer's shard (0 in fp32 training). Megatron-FSDP
    keeps its own fp32 main-weight buffer whatever the precision-aware settings (megatron-core 0.16.1
    ``DistributedOptimizer.__init__`` returns early for it; ``param_and_grad_buffer.py`` preserves fp32
    weights by default)."""
    if e.precision == "fp32":
        return 0.0
    if not (e.use_precision_aware_optimizer and _te_masters(e)) or e.fsdp == "megatron_fsdp":
        return 4.0
    return 2.0 if _remainders(e) else float(DTYPE_BYTES[e.main_params_dtype])


def moment_bytes(e: ExecutionSpec) -> float:
    """Bytes per parameter of Adam's two moments."""
    if not e.use_precision_aware_optimizer:
        return 8.0
    return float(DTYPE_BYTES[e.exp_avg_dtype] + DTYPE_BYTES[e.exp_avg_sq_dtype])


def adam_state_bytes(e: ExecutionSpec) -> float:
    """Optimizer state per parameter (sharded by the distributed optimizer / FSDP)."""
    return master_bytes(e) + moment_bytes(e)


def adam_step_bytes(e: ExecutionSpec) -> float:
    """HBM traffic per parameter of one Adam step: read master (or the fp32 parameter), grad and moments,
    write master and moments back, and write the bf16 model copy (30 B by default: 16 read + 12 + 2 written).
    The plain path reads fp32 main grads (a bf16 buffer is upcast first); FusedAdam holding the masters
    reads the buffer as it is, and with remainders also the bf16 parameter to rebuild the fp32 master."""
    master = master_bytes(e) or 4.0  # fp32 training updates the fp32 parameters themselves
    copy = 0.0 if e.precision == "fp32" else 2.0
    te = e.use_precision_aware_optimizer and _te_masters(e) and e.fsdp != "megatron_fsdp"
    grad = 2.0 if te and e.grad_reduce_in_bf16 and e.precision != "fp32" else 4.0
    rebuild = 2.0 if te and _remainders(e) else 0.0
    return 2 * master + grad + 2 * moment_bytes(e) + copy + rebuild


def dp_sharded(e: ExecutionSpec) -> tuple[bool, bool, bool]:
    """(optimizer state, gradients, parameters) sharded over the data-parallel group. DDP: the optimizer, by
    the distributed optimizer. Megatron-FSDP (megatron-core 0.16.1 megatron_fsdp/param_and_grad_buffer.py
    ``_init_each_parameter_group_buffers``): ``optim`` distributes the main weights, which the optimizer
    steps (so its state), ``optim_grads`` the gradients too, ``optim_grads_params`` the parameters too,
    ``no_shard`` nothing; ``use_distributed_optimizer`` adds nothing (``DistributedOptimizer.__init__``
    returns early under Megatron-FSDP). torch FSDP2 (``fully_shard``): all three."""
    if e.fsdp == "none":
        return e.use_distributed_optimizer, False, False
    strategy = "optim_grads_params" if e.fsdp == "torch_fsdp2" else e.data_parallel_sharding_strategy
    return strategy != "no_shard", strategy in ("optim_grads", "optim_grads_params"), strategy == "optim_grads_params"
