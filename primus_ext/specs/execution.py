"""How the model is run: parallelism, batch, recompute, sharding, overlap, precision.

This is the part a tuner changes. Field names follow Megatron's arguments. ``data_parallel_size``
is derived from the cluster's world size by the recipe resolver (world = TP * PP * CP * DP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from primus_ext.specs.launch import DEFAULT_LAUNCH, LaunchSpec

RecomputeGranularity = Literal["full", "selective"]
RecomputeMethod = Literal["uniform", "block"]
Precision = Literal["bf16", "fp16", "fp8", "fp4", "fp32"]
PipelineSchedule = str
"""A name registered in ``primus_ext.model.pipeline.registry.SCHEDULES`` (open: schedules register themselves;
specs is the bottom layer and cannot import the registry, so ``recipe.checks`` checks the name)."""
Dispatcher = Literal["alltoall", "allgather", "flex"]
CPCommType = Literal["p2p", "a2a", "allgather", "a2a+p2p"]
FSDPKind = Literal["none", "torch_fsdp2", "megatron_fsdp"]
Fp8Recipe = Literal["delayed", "tensorwise", "mxfp8", "blockwise", "rowwise"]
Fp4Recipe = Literal["nvfp4", "mxfp4"]
AttentionKernel = Literal["fused", "flash2"]
CudaGraph = Literal["none", "layers", "full_iteration"]
OptimizerDtype = Literal["fp32", "fp16", "bf16", "fp8"]


@dataclass(frozen=True, kw_only=True)
class ExecutionSpec:
    """One parallel / batch / memory-saving configuration of a training step."""

    # --- parallelism ---------------------------------------------------------------------------
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: int | None = None
    """Model chunks per pipeline rank (Megatron's num_virtual_stages_per_pipeline_rank)."""
    context_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: int | None = None
    """``None`` = same as TP (Megatron's default)."""
    data_parallel_size: int = 1
    """Derived: world_size / (TP * PP * CP)."""
    sequence_parallel: bool = False
    cp_comm_type: CPCommType = "p2p"

    # --- pipeline layout -----------------------------------------------------------------------
    decoder_first_pipeline_num_layers: int | None = None
    decoder_last_pipeline_num_layers: int | None = None
    pipeline_model_parallel_layout: str | None = None
    """Megatron's layout string, e.g. ``"Et*3|(tt|)*29,m|L"``; kept verbatim."""
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    pipeline_schedule: PipelineSchedule = "1f1b"
    """Derived (``registry.spec_schedule``): interleaved when VPP > 1, zb-h1 when Primus's zero-bubble patch is
    on; any name in the schedule registry."""

    # --- batch ---------------------------------------------------------------------------------
    micro_batch_size: int = 1
    global_batch_size: int = 1
    seq_length: int = 4096

    # --- activation recompute ------------------------------------------------------------------
    recompute_granularity: RecomputeGranularity | None = None
    recompute_method: RecomputeMethod | None = None
    recompute_num_layers: int | None = None
    recompute_layer_ids: tuple[int, ...] = ()
    """Primus's ``recompute_layer_ids`` (``patches/recompute_layer_patches.py``): full recompute of exactly these
    global decoder-layer indices (0-based; ``num_layers + d`` is MTP depth d), with ``recompute_method`` unset.
    Empty = Megatron's ``recompute_method`` / ``recompute_num_layers`` decide."""
    recompute_modules: tuple[str, ...] = ()
    """Selective recompute targets (Megatron names: core_attn, mlp, moe, moe_act, layernorm,
    mla_up_proj, shared_experts). Empty with granularity 'selective' means Megatron's default
    (``core_attn``)."""
    activation_func_fp8_input_store: bool = False
    """megatron-core's ``activation_func_fp8_input_store``: the SwiGLU's input (the first MLP GEMM's output) saved
    for backward in fp8, cast back before the backward (the fused ``bias_swiglu`` / ``weighted_bias_swiglu``
    kernels of the dense MLP and the grouped experts). DeepSeek-V3's "cache the SwiGLU inputs in FP8" (report
    sec. 3.3.3, "Low-Precision Storage"); SwiGLU only (megatron-core refuses another activation)."""
    selective_ac_option: Literal["modules", "op"] = "modules"
    """What granularity 'selective' recomputes: ``modules`` = Megatron's ``recompute_modules``; ``op`` =
    torch's op-level selective activation checkpointing as torchtitan applies it
    (``activation_checkpoint.selective_ac_option = "op"``: keep every other matmul output and the
    attention outputs, recompute the rest)."""

    # --- parameter-efficient fine-tuning (Primus's LoRA, backends/megatron/peft) -------------------
    lora_rank: int = 0
    """LoRA adapter rank (Primus's ``lora.dim``); 0 = every parameter trains. With LoRA every base parameter is
    frozen (no gradient, no optimizer state, no weight-gradient GEMM; the backward still computes input
    gradients through them) and each target linear gets a trainable pair A (in x r), B (r x out)."""
    lora_targets: tuple[str, ...] = ()
    """Linear layers that get adapters (Primus's ``lora.target_modules``: linear_qkv, linear_proj, linear_fc1,
    linear_fc2; the MoE experts' fc1 / fc2 match too)."""

    # --- CPU offloading (megatron-core ModelParallelConfig; Transformer Engine's cpu_offload) ------
    cpu_offloading: bool = False
    """Offload the saved activations (and/or weights) of the first ``cpu_offloading_num_layers``
    transformer layers to host memory. Megatron forbids it with PP > 1 and with recompute."""
    cpu_offloading_num_layers: int = 0
    """Transformer layers whose saved tensors are offloaded (megatron-core: < num_layers)."""
    cpu_offloading_activations: bool = True
    cpu_offloading_weights: bool = False

    # --- sharding and optimizer ----------------------------------------------------------------
    use_distributed_optimizer: bool = False
    fsdp: FSDPKind = "none"
    fsdp_reduce_dtype: Literal["param", "fp32"] = "param"
    """The dtype torch FSDP2 reduce-scatters gradients in: ``param`` (megatron-core's and Primus's wrappers set no
    ``MixedPrecisionPolicy``: the parameter dtype, bf16) or ``fp32`` (torchtitan's and NeMo AutoModel's policy,
    ``reduce_dtype=float32``, over fp32 parameter shards)."""
    data_parallel_sharding_strategy: Literal[
        "no_shard", "optim", "optim_grads", "optim_grads_params"
    ] = "no_shard"
    """Megatron-FSDP's sharding level (torch FSDP2 always shards params, grads and optimizer)."""

    # --- precision-aware optimizer (megatron-core OptimizerConfig; model.memory.optimizer_state) ---
    use_precision_aware_optimizer: bool = False
    """Optimizer tensors in lower precision (Transformer Engine's FusedAdam; distributed optimizer only)."""
    main_params_dtype: Literal["fp32", "fp16"] = "fp32"
    exp_avg_dtype: OptimizerDtype = "fp32"
    exp_avg_sq_dtype: OptimizerDtype = "fp32"
    store_param_remainders: bool = True
    """With bf16 parameters, FusedAdam stores only the low 16 bits of each fp32 master (megatron-core default)."""

    # --- overlap -------------------------------------------------------------------------------
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    tp_comm_overlap: bool = False
    overlap_moe_expert_parallel_comm: bool = False
    moe_shared_expert_overlap: bool = False

    # --- precision -----------------------------------------------------------------------------
    precision: Precision = "bf16"
    """Compute precision of the GEMMs (fp8 = Megatron's ``--fp8 e4m3|hybrid`` with bf16 params)."""
    fp8_recipe: Fp8Recipe = "delayed"
    """How fp8 tensors are scaled (used when ``precision`` is fp8): Megatron's ``--fp8-recipe`` (``delayed``
    per-tensor from an amax history, its default; ``tensorwise`` per-tensor current scaling; ``mxfp8``
    1x32-block scales, Blackwell; ``blockwise`` 128-element / 128x128 blocks) or ``rowwise`` (per-row
    scales: torchao's float8 recipe of that name, read from torchtitan runs; not a Megatron choice)."""
    fp8_param_gather: bool = False
    """Megatron's ``--fp8-param-gather``: parameters kept in fp8 (and all-gathered in fp8), no bf16 copy."""
    fp4_recipe: Fp4Recipe = "nvfp4"
    """How fp4 tensors are scaled (used when ``precision`` is fp4, megatron-core's ``fp4: e2m1``): ``nvfp4``
    (megatron-core 0.16 ``fp4_recipe: nvfp4``, Transformer Engine's NVFP4BlockScaling: E2M1 data, one E4M3 scale
    per 16 elements and an fp32 scale per tensor) or ``mxfp4`` (Primus's ``fp4_recipe: mxfp4`` on MI355X: one E8M0
    scale per 32 elements). ``model.fp4`` says which GEMMs run in fp4 and what the quantisation costs."""
    fp4_param: bool = False
    """megatron-core's ``fp4_param`` (``--fp4-param-gather``): transformer-layer weights kept in fp4, no bf16 copy."""
    grad_reduce_in_bf16: bool = False
    """Keep the DDP gradient buffer (main grads) in bf16 and reduce in bf16 instead of fp32."""

    # --- attention kernel ----------------------------------------------------------------------
    attention_kernel: AttentionKernel = "fused"
    """The fused attention kernel class. ``fused``: what Megatron runs through Transformer Engine for
    ``attention_backend`` auto / fused / flash (cuDNN fused attention, FlashAttention-3 on Hopper), at
    ``Efficiency.attention``; ``flash2``: FlashAttention-2, PyTorch SDPA's flash backend (torchtitan), at
    ``roofline.FLASH2_RATIO`` of it."""

    # --- CUDA graphs ----------------------------------------------------------------------------
    cuda_graph: CudaGraph = "none"
    """What CUDA graphs replay (megatron-core ``cuda_graph_impl`` / ``cuda_graph_scope``). ``layers``: per-layer
    graphs (``local`` or ``transformer_engine``): no per-kernel launch overhead in the captured layers; a
    dropless MoE layer's expert part still runs eagerly (megatron captures whole MoE layers for drop-and-pad
    only), so its fixed MoE cost stays. ``full_iteration`` (``local`` with scope ``full_iteration``): forward
    and backward of every micro-batch in one graph: neither cost remains. Graph memory pools are not modelled."""

    # --- loss ----------------------------------------------------------------------------------
    cross_entropy_fusion_impl: Literal["native", "te"] = "native"
    """megatron-core's ``cross_entropy_fusion_impl`` (default native): ``native`` keeps exp(logits) in fp32
    for backward, ``te`` (Transformer Engine's parallel cross entropy) writes the gradient into the bf16
    logits in forward and keeps those. ``te`` only with ``cross_entropy_loss_fusion`` on: without it
    megatron-core runs the unfused vocab-parallel loss, which keeps fp32 exp(logits) like ``native``
    (megatron-core 0.16.1 models/common/language_module/language_module.py, ``compute_language_model_loss``)."""

    # --- MoE execution -------------------------------------------------------------------------
    moe_token_dispatcher_type: Dispatcher = "alltoall"
    moe_grouped_gemm: bool = True
    moe_router_force_load_balancing: bool = False
    moe_expert_capacity_factor: float | None = None
    moe_dispatch_fwd_dtype: Literal["bf16", "mxfp8"] = "bf16"
    """Wire dtype of the MoE dispatch's forward payload (megatron-core ``moe_dispatch_fwd_dtype``, its ``ncclep`` flex
    backend): ``mxfp8`` sends 1 byte per element and an E8M0 scale per 32 instead of bf16's 2 (``projection.comm``).
    The FP8 dispatch of DeepSeek-V3's DeepEP (report sec. 3.3.3, "Low-Precision Communication": dispatch in FP8,
    combine in BF16) is projected through it (its 1x128 scales differ by 3 % of the bytes)."""
    moe_combine_bwd_dtype: Literal["bf16", "mxfp8"] = "bf16"
    """Wire dtype of the combine's backward gradient (megatron-core ``moe_combine_bwd_dtype``): as above."""

    # --- what the frameworks' checks read beside the tuned axes ------------------------------------
    launch: LaunchSpec = DEFAULT_LAUNCH
    """The recipe's checkpoint format, fusion and Primus-Turbo switches and the launch environment
    (``CUDA_DEVICE_MAX_CONNECTIONS``): fixed for a recipe; legality only (``recipe/upstream_rules.py``)."""

    # --- derived views -------------------------------------------------------------------------
    @property
    def tp(self) -> int:
        return self.tensor_model_parallel_size

    @property
    def pp(self) -> int:
        return self.pipeline_model_parallel_size

    @property
    def vpp(self) -> int:
        return self.virtual_pipeline_model_parallel_size or 1

    @property
    def cp(self) -> int:
        return self.context_parallel_size

    @property
    def ep(self) -> int:
        return self.expert_model_parallel_size

    @property
    def etp(self) -> int:
        return self.expert_tensor_parallel_size or self.tensor_model_parallel_size

    @property
    def dp(self) -> int:
        return self.data_parallel_size

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def expert_data_parallel_size(self) -> int:
        """Expert-DP width under MoE parallel folding: world / (ETP * EP * PP)."""
        return self.world_size // (self.etp * self.ep * self.pp)

    @property
    def num_microbatches(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.dp)
