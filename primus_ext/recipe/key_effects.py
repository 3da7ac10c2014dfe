"""What each known recipe key does to a projection: modelled, refused, not modelled (warned), or no effect.

Every key of the catalogue (``catalogue.known_keys``) is in exactly one class:

* **modelled**: read by the resolver (``resolve.READ_KEYS``) and priced;
* **architecture**: selects a model family the projection cannot build (hybrid specs other than the modelled ones,
  other linear attention, diffusion, heterogeneous layers, RL training): a recipe that selects one is
  refused with a sentence, never projected as something else (``architecture_problems``);
* **architecture parameters** (``ARCHITECTURE_PARAMS``): sizes of those families (Mamba state, linear
  attention heads, DeepSeek-V4 compression, ...). Megatron ignores them unless the family is selected;
  so does the projection;
* **not modelled** (``UNMODELLED``): changes step time or memory, but the projection assumes a fixed
  value (Megatron's default unless said otherwise). A recipe that sets another value gets one warning
  naming each such key (``unmodelled_keys``) in the console, the JSON and the HTML report;
* **no effect** (``catalogue_data.NO_EFFECT``): logging, data, checkpointing, initialisation,
  learning-rate and loss-scale schedules, evaluation, numerics-only switches.

    unmodelled_keys({"gradient_accumulation_fusion": False})
    # {'gradient_accumulation_fusion': 'False (projected as True): weight-gradient GEMMs accumulate ...'}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from primus_ext.errors import Problem, shown
from primus_ext.recipe.releases import read_release_keys


@dataclass(frozen=True)
class Unmodelled:
    """A key that changes time or memory, projected as ``assumed``."""

    assumed: Any
    """The value the projection prices (Megatron-LM's default unless the effect says otherwise)."""
    effect: str
    """What the key changes, in a few words."""
    when: str | None = None
    """The switch the key is a setting of (``offload_time`` of ``offload``): without it on, the key does nothing."""


def _u(assumed: Any, effect: str, when: str | None = None) -> Unmodelled:
    return Unmodelled(assumed=assumed, effect=effect, when=when)


_FUSION = "kernel fusion: step time"
_TURBO = "a Primus-Turbo kernel choice: step time (efficiencies are calibrated per GPU family, not per kernel)"
_TP_SUB = "which TP communications overlap: step time (tp_comm_overlap is priced as all of them)"
_OFFLOAD = "CPU offloading: memory and step time"
_V4_KERNEL = ("a DeepSeek-V4 attention kernel choice: step time (priced at the GPU family's attention efficiency, "
              "not per kernel)")
_ZB, _TURBO_ON, _FSDP2, _EDGES = "patch_zero_bubble", "enable_primus_turbo", "use_torch_fsdp2", "first_last_layers_bf16"
"""Switches whose settings (``Unmodelled.when``) do nothing while they are off."""

UNMODELLED: dict[str, Unmodelled] = {
    # kernels and fusions (Megatron-LM arguments.py defaults)
    "gradient_accumulation_fusion": _u(True, "weight-gradient GEMMs accumulate into main_grad: step time, memory"),
    "apply_rope_fusion": _u(True, _FUSION),
    "bias_swiglu_fusion": _u(True, _FUSION),
    "bias_gelu_fusion": _u(True, _FUSION),
    "bias_dropout_fusion": _u(True, _FUSION),
    "bias_activation_fusion": _u(False, _FUSION),
    "persist_layer_norm": _u(False, _FUSION),
    "memory_efficient_layer_norm": _u(False, "layer-norm saved tensors: memory"),
    "moe_permute_fusion": _u(False, _FUSION),
    "moe_router_fusion": _u(False, _FUSION),
    "moe_use_legacy_grouped_gemm": _u(False, "grouped-GEMM implementation: step time"),
    "use_fused_weighted_squared_relu": _u(False, _FUSION),
    "fused_single_qkv_rope": _u(False, _FUSION),
    "fused_padded_mla_attention": _u(False, _FUSION),
    "disable_primus_topk_router": _u(False, "Primus's top-k router kernel: step time"),
    "moe_use_fused_router_with_aux_score": _u(False, _FUSION),
    "transformer_impl": _u("transformer_engine", "layer implementation (local spec is slower): step time"),
    "attention_backend": _u("auto", "attention kernel: step time and memory"),
    "use_te_activation_func": _u(False, _FUSION),
    "torch_compile": _u(None, "torch.compile of the model: step time"),
    "enable_primus_turbo": _u(False, _TURBO),
    "use_turbo_attention": _u(False, _TURBO, when=_TURBO_ON),
    "use_turbo_gemm": _u(False, _TURBO, when=_TURBO_ON),
    "use_turbo_grouped_gemm": _u(False, _TURBO, when=_TURBO_ON),
    "use_turbo_rms_norm": _u(False, _TURBO, when=_TURBO_ON),
    "use_turbo_norm_te_linear": _u(False, _TURBO, when=_TURBO_ON),
    "use_turbo_fused_act_with_probs": _u(False, _TURBO, when=_TURBO_ON),
    "use_turbo_mega_moe": _u(False, _TURBO, when=_TURBO_ON),
    "use_turbo_autotune": _u(False, _TURBO, when=_TURBO_ON),
    "turbo_gemm_backend": _u("default", _TURBO, when=_TURBO_ON),
    "turbo_grouped_gemm_backend": _u("default", _TURBO, when=_TURBO_ON),
    "turbo_grouped_gemm_without_padding": _u(False, _TURBO, when=_TURBO_ON),
    "enable_turbo_attention_float8": _u(False, "FP8 attention kernel: step time", when=_TURBO_ON),
    "use_sink_attention": _u(False, "attention-sink kernel: step time", when=_TURBO_ON),
    "turbo_sync_free_moe_stage": _u(0, "Primus sync-free MoE (stage 2+: Turbo DeepEP): step time", when=_TURBO_ON),
    "turbo_deepep_num_cu": _u(32, "compute units given to DeepEP: step time", when="use_turbo_deepep"),
    "turbo_deepep_use_comm_stream": _u(False, "DeepEP on its own stream: step time", when="use_turbo_deepep"),
    "use_kitchen": _u(False, "quantisation library kernels: step time"),
    "use_kitchen_attention": _u(False, "quantisation library attention: step time"),
    "deterministic_mode": _u(False, "deterministic kernels: step time"),
    "batch_invariant_mode": _u(False, "batch-invariant kernels: step time"),
    # precision details
    "fp8_wgrad": _u(True, "weight gradients in FP8: step time"),
    "fp8_dot_product_attention": _u(False, "FP8 attention: step time and memory"),
    "fp8_multi_head_attention": _u(False, "FP8 attention projections: step time and memory"),
    "fp8_param": _u(False, "parameters kept in FP8: memory"),
    "first_last_layers_bf16": _u(False, "first / last layers in BF16 under FP8 / FP4: step time"),
    "num_layers_at_start_in_bf16": _u(1, "BF16 layers at the start under FP8 / FP4: step time", when=_EDGES),
    "num_layers_at_end_in_bf16": _u(1, "BF16 layers at the end under FP8 / FP4: step time", when=_EDGES),
    "fp4_quantizer_factory": _u(None, "a user FP4 quantisation factory (fp4_recipe custom): step time and memory"),
    "mxfp4_gradient_stochastic_rounding": _u(False, "stochastic rounding of MXFP4 gradients: step time"),
    "keep_fp8_transpose_cache": _u(False, "FP8 transposed-weight cache: memory"),
    "keep_fp8_transpose_cache_when_using_custom_fsdp": _u(False, "FP8 transposed-weight cache: memory"),
    "no_fp8_weight_transpose_cache": _u(False, "FP8 transposed-weight cache: memory"),
    "disable_parameter_transpose_cache": _u(False, "transposed-weight cache: memory"),
    "reuse_grad_buf_for_mxfp8_param_ag": _u(False, "MXFP8 parameter all-gather buffer: memory"),
    "fp32_residual_connection": _u(False, "FP32 residual stream: memory and step time"),
    "fp16_lm_cross_entropy": _u(False, "half-precision loss: memory"),
    "hidden_dropout": _u(0.0, "dropout masks saved for backward: memory and step time"),
    "attention_dropout": _u(0.0, "attention dropout: step time"),
    # communication and overlap
    "overlap_p2p_comm": _u(True, "pipeline send / receive overlapped with compute (Megatron's default)"),
    "batch_p2p_comm": _u(True, "pipeline send / receive batching: step time"),
    "overlap_p2p_comm_warmup_flush": _u(False, "send / receive overlap in warm-up: step time", when="overlap_p2p_comm"),
    "overlap_param_gather_with_optimizer_step": _u(False, "parameter all-gather overlapped with the optimizer: "
                                                          "step time"),
    "ddp_bucket_size": _u(None, "data-parallel bucket size (how much reduction overlaps): step time"),
    "bucket_size": _u(None, "data-parallel bucket size (how much reduction overlaps): step time"),
    "ddp_num_buckets": _u(None, "data-parallel bucket count: step time"),
    "num_distributed_optimizer_instances": _u(1, "partial distributed optimizer: memory and step time"),
    "defer_embedding_wgrad_compute": _u(False, "deferred embedding weight gradients: step time"),
    "wgrad_deferral_limit": _u(0, "deferred embedding weight gradients: step time"),
    "delay_wgrad_compute": _u(False, "delayed weight gradients (EP overlap): step time"),
    "tp_comm_overlap_ag": _u(True, _TP_SUB, when="tp_comm_overlap"),
    "tp_comm_overlap_rs": _u(True, _TP_SUB, when="tp_comm_overlap"),
    "tp_comm_overlap_rs_dgrad": _u(False, _TP_SUB, when="tp_comm_overlap"),
    "tp_comm_bulk_dgrad": _u(True, _TP_SUB, when="tp_comm_overlap"),
    "tp_comm_bulk_wgrad": _u(True, _TP_SUB, when="tp_comm_overlap"),
    "tp_comm_split_ag": _u(True, _TP_SUB, when="tp_comm_overlap"),
    "tp_comm_split_rs": _u(True, _TP_SUB, when="tp_comm_overlap"),
    "tp_comm_atomic_ag": _u(False, _TP_SUB, when="tp_comm_overlap"),
    "tp_comm_atomic_rs": _u(False, _TP_SUB, when="tp_comm_overlap"),
    "tp_comm_overlap_disable_qkv": _u(False, _TP_SUB, when="tp_comm_overlap"),
    "tp_comm_overlap_disable_fc1": _u(False, _TP_SUB, when="tp_comm_overlap"),
    "tp_comm_overlap_cfg": _u(None, _TP_SUB, when="tp_comm_overlap"),
    "hierarchical_context_parallel_sizes": _u(None, "hierarchical CP groups: step time"),
    "hybrid_context_parallel": _u(False, "dynamic context parallelism: step time"),
    "max_seqlen_per_dp_cp_rank": _u(None, "dynamic context parallelism: step time"),
    "use_tp_pp_dp_mapping": _u(False, "rank order (which groups cross nodes): step time"),
    "use_sharp": _u(False, "in-network reduction: step time"),
    "sharp_enabled_group": _u(None, "in-network reduction: step time", when="use_sharp"),
    "nccl_ub": _u(False, "NCCL user buffers: step time"),
    "symmetric_ar_type": _u(None, "symmetric-memory all-reduce: step time"),
    "disable_symmetric_registration": _u(False, "symmetric-memory registration: step time"),
    "moe_router_topk_limited_devices": _u(None, "device-limited routing (fewer EP destinations): step time"),
    "moe_pad_expert_input_to_capacity": _u(False, "expert inputs padded to capacity: step time and memory"),
    "moe_router_padding_for_fp8": _u(False, "router padding for FP8: step time"),
    "moe_router_padding_for_quantization": _u(False, "router padding for quantised GEMMs: step time"),
    "moe_router_dtype": _u(None, "router in FP32: step time"),
    "moe_deepep_num_sms": _u(20, "streaming multiprocessors given to DeepEP: step time"),
    "moe_hybridep_num_sms": _u(16, "streaming multiprocessors given to HybridEP: step time"),
    "ep_overlap_early_attn_memory_release": _u(False, "EP overlap's early release of attention memory: memory"),
    "patch_moe_overlap": _u(False, "Primus's MoE overlap patch: step time"),
    "enable_odc": _u(False, "Primus one-sided data-parallel communication: step time"),
    "enable_odc_lb_mini": _u(False, "Primus micro-batch load balancing: step time"),
    "train_sync_interval": _u(None, "host synchronisation interval: step time"),
    # pipeline schedule knobs
    "microbatch_group_size_per_vp_stage": _u(None, "interleaved schedule grouping (projected as PP): step time"),
    "decoder_pipeline_manual_split_list": _u(None, "Primus's manual layer split across stages: step time and memory"),
    "num_layers_in_first_pipeline_stage": _u(None, "first stage's layers (write decoder_first_pipeline_num_layers)"),
    "num_layers_in_last_pipeline_stage": _u(None, "last stage's layers (write decoder_last_pipeline_num_layers)"),
    "standalone_embedding_stage": _u(False, "embedding on its own stage: step time and memory"),
    "mtp_standalone": _u(False, "multi-token prediction on its own stage: step time and memory"),
    "zero_bubble_max_pending_backward": _u("auto", "zero-bubble pending backwards: time, memory", when=_ZB),
    "zero_bubble_v_schedule_mem_setup": _u("half", "zero-bubble V memory setup: time, memory", when=_ZB),
    "zero_bubble_adaptive_memory_limit_percentile": _u(85, "zero-bubble memory limit: time, memory", when=_ZB),
    "enable_1f1b_v": _u(False, "1F1B-V schedule: step time and memory", when=_ZB),
    "enable_zb_runtime": _u(False, "zero-bubble runtime: step time", when=_ZB),
    "interleave_group_size": _u(None, "interleaved schedule grouping: step time", when=_ZB),
    "deallocate_pipeline_outputs": _u(True, "pipeline outputs freed after sending: memory"),
    # recompute and offloading
    "moe_layer_recompute": _u(False, "MoE layer recompute (write recompute_modules: [moe]): memory and step time"),
    "checkpoint_activations": _u(False, "full recompute (write recompute_granularity: full): memory and step time"),
    "distribute_saved_activations": _u(False, "recomputed layers' inputs split across TP: memory"),
    "num_microbatches_with_partial_activation_checkpoints": _u(None, "partial recompute per micro-batch: memory"),
    "fine_grained_activation_offloading": _u(False, _OFFLOAD),
    "offload": _u(False, _OFFLOAD),
    "cpu_offload": _u(False, _OFFLOAD),
    "offload_chunk_num": _u(None, _OFFLOAD, when="offload"),
    "offload_modules": _u(None, _OFFLOAD, when="offload"),
    "offload_ops": _u(None, _OFFLOAD, when="offload"),
    "offload_overlap_sr": _u(None, _OFFLOAD, when="offload"),
    "offload_time": _u(None, _OFFLOAD, when="offload"),
    "auto_offload_time": _u(None, _OFFLOAD, when="offload"),
    "min_offloaded_tensor_size": _u(None, _OFFLOAD, when="fine_grained_activation_offloading"),
    "cpu_offloading_double_buffering": _u(False, _OFFLOAD, when="cpu_offloading"),
    "optimizer_cpu_offload": _u(False, _OFFLOAD),
    "optimizer_offload_fraction": _u(1.0, _OFFLOAD),
    "overlap_cpu_optimizer_d2h_h2d": _u(False, _OFFLOAD),
    "use_torch_optimizer_for_cpu_offload": _u(False, _OFFLOAD),
    "pin_cpu_grads": _u(True, _OFFLOAD),
    "pin_cpu_params": _u(True, _OFFLOAD),
    "fsdp_double_buffer": _u(False, "Megatron-FSDP double buffering: memory", when="use_megatron_fsdp"),
    "fsdp_manual_registration": _u(False, "Megatron-FSDP buffer registration: step time", when="use_megatron_fsdp"),
    "outer_dp_sharding_strategy": _u("no_shard", "hybrid sharded data parallelism: memory and step time"),
    "data_parallel_replicate_degree": _u(1, "hybrid sharded data parallelism: memory and step time"),
    "preserve_fp32_weights": _u(True, "FP32 master weights under FP8 parameters: memory"),
    # sequences and losses
    "enable_packed_sequences": _u(False, "packed sequences (attention within documents only): step time"),
    "use_packed_attention": _u(False, "packed-sequence attention: step time"),
    "variable_seq_lengths": _u(False, "variable sequence lengths: step time"),
    "enable_fused_linear_ce": _u(False, "fused output layer + loss: memory and step time"),
    "fused_ce_mode": _u(None, "fused output layer + loss: memory and step time", when="enable_fused_linear_ce"),
    "fused_ce_chunks": _u(None, "fused output layer + loss: memory and step time", when="enable_fused_linear_ce"),
    "qk_clip": _u(False, "QK-clip (MuonClip) per step: step time"),
    "log_max_attention_logit": _u(False, "max attention logit computed each step: step time"),
    # small architecture details the layers do not carry
    "attention_output_gate": _u(False, "gated attention output (an extra projection): step time and memory"),
    "gated_linear_unit": _u(None, "gated MLP (set by swiglu / quick_geglu; alone it is not modelled)"),
    "softmax_type": _u("vanilla", "learnable / off-by-one softmax (attention sinks): step time"),
    "spec": _u(None, "a custom layer spec: the projection builds the standard GPT layer"),
    "mtp_layer_type": _u(None, "multi-token prediction layer type: step time and memory"),
    "moe_apply_probs_on_input": _u(False, "router probabilities applied on expert inputs: step time"),
    "vocab_extra_ids": _u(0, "extra vocabulary entries: step time and memory"),
    "allow_padding_num_layers": _u(False, "Primus pads num_layers over the stages: time, memory", when=_ZB),
    "num_moe_experts": _u(None, "experts under megatron-core's config name (write num_experts)"),
    "num_nextn_predict_layers": _u(None, "multi-token prediction under DeepSeek's name (write mtp_num_layers)"),
    "reduce_scatter_with_fp32_accumulation": _u(False, "reduce-scatter accumulating in FP32: step time"),
    # Primus flags read by its patches (not in its presets)
    "torch_fsdp2_reshard_after_forward": _u(True, "FSDP2 keeps gathered parameters: memory", when=_FSDP2),
    "use_fsdp2_fp32_param_optimizer": _u(False, "FSDP2 optimizer, FP32 parameters: memory", when=_FSDP2),
    "use_fsdp2_bf16_master_weight_optimizer": _u(False, "FSDP2 optimizer, BF16 masters: memory", when=_FSDP2),
    "use_fsdp2_fp8_all_gather": _u(False, "FSDP2 all-gather in FP8: step time", when=_FSDP2),
    "fsdp_prefetch_depth": _u(None, "FSDP2 prefetch depth: memory and step time", when=_FSDP2),
    "optimizer_foreach": _u(None, "foreach optimizer kernels: step time"),
    "overlap_grad_norm": _u(False, "gradient norm overlapped: step time"),
    "use_cpp_fp8_quantize": _u(False, "FP8 quantisation kernel: step time"),
    "use_dual_fp8_output_projection": _u(False, "FP8 output projection: step time"),
    "use_triton_ops": _u(False, "Triton kernels: step time"),
    "use_turbo_permute_padding": _u(False, _TURBO, when=_TURBO_ON),
    "fp8_all_gather_stochastic_rounding": _u(False, "FP8 parameter all-gather rounding: step time"),
    "fp8_precompute_data_cache": _u(False, "FP8 cast cache: memory"),
    "disable_delayed_scaling_patches": _u(False, "Primus's delayed-scaling patches: step time"),
    # DeepSeek-V4 (Primus deepseek_v4_base.yaml defaults; recipe.deepseek_v4 prices the layers, not these choices)
    "use_v4_attention_backend": _u("triton_v1", _V4_KERNEL),
    "use_v4_csa_attention_backend": _u("triton_v1", _V4_KERNEL),
    "use_v4_fp8_indexer": _u(False, "DeepSeek-V4 indexer scoring in FP8: step time"),
    "use_v4_compiled_sinkhorn": _u(False, "compiled Sinkhorn of the hyper-connections: step time"),
    "hc_use_sinkhorn": _u(True, "Sinkhorn-normalised hyper-connection mixing (priced memory-bound): step time"),
    "mtp_use_separate_hc_head": _u(False, "a hyper-connection head per MTP layer (hc_mult x hidden x hc_mult "
                                          "parameters, not counted): memory"),
}
"""Keys that change time or memory but that the projection prices at ``assumed``."""

EQUIVALENT_TO_UNSET = (None, False, 0, "", (), [])


def _same(value: Any, assumed: Any) -> bool:
    if value == assumed or (isinstance(value, float) and isinstance(assumed, float) and abs(value - assumed) < 1e-12):
        return True
    if assumed in EQUIVALENT_TO_UNSET and value in EQUIVALENT_TO_UNSET:
        return True
    if isinstance(value, Mapping) and "enable" in value:  # Primus's torch_compile: {enable: false, ...}
        return not value.get("enable")
    return value is None  # unset: Megatron's default, which is what ``assumed`` is


def unmodelled_keys(args: Mapping[str, Any]) -> dict[str, str]:
    """Keys of ``args`` set to a value the projection does not price: key -> ``value (projected as X): effect``
    (an earlier Primus release's keys read as it meant them: ``releases.read_release_keys``)."""
    args = read_release_keys(args)[0]
    out = {}
    for key, entry in UNMODELLED.items():
        if key not in args and key not in MEGATRON_UNSET_DIFFERS:
            continue
        if entry.when is not None and not _switched_on(args.get(entry.when)):
            continue
        value = args.get(key, MEGATRON_UNSET_DIFFERS.get(key))
        if not _same(value, entry.assumed):
            shown = repr(value) if not isinstance(value, str) else value
            out[key] = f"{shown[:60]} (projected as {entry.assumed!r}): {entry.effect}"
    return out


MEGATRON_UNSET_DIFFERS: dict[str, Any] = {
    "hidden_dropout": 0.1,  # Megatron-LM arguments.py --hidden-dropout default
    "attention_dropout": 0.1,  # Megatron-LM arguments.py --attention-dropout default
}
"""Unset keys whose Megatron default differs from what the projection assumes (a flat recipe that omits
them trains with the default)."""


def _switched_on(value: Any) -> bool:
    if isinstance(value, Mapping):  # Primus's torch_compile-style blocks
        return bool(value.get("enable"))
    return value not in EQUIVALENT_TO_UNSET


def unmodelled_warning(found: Mapping[str, str]) -> str:
    """One warning line for every not-modelled key a recipe sets."""
    items = "; ".join(f"`{key}` = {text}" for key, text in found.items())
    return f"not modelled, projected as the assumed value: {items}"


# --------------------------------------------------------------------------------------------------
# architectures the projection cannot build

_MODEL_TYPES = {
    "gpt": None,
    "mamba": None,  # megatron-core MambaModel / mamba_stack_spec: recipe.hybrid (other specs refused there)
    "deepseek_v4": None,  # Primus's DeepSeek-V4: recipe.deepseek_v4 (a hybrid stack of its halves)
    "kimi_k3": None,  # Primus's Kimi-K3: recipe.kimi_k3 (a hybrid stack of its halves)
    "diffusion_model": "diffusion models (Flux and other DiT trainers) are not modelled",
}


DIFFUSION_PREFIXES = ("flux", "diffusion", "wan", "dit")
"""``model_type`` values of Primus's diffusion trainers (``flux_schnell``, ``diffusion_model``, ...)."""


def _set(value: Any) -> bool:
    return value not in EQUIVALENT_TO_UNSET


ArchitectureRule = tuple[str, Callable[[Any], bool], str]
_GDN = "gated_delta_net"
"""The experimental attention variant that projects (``recipe.linear_attention``), its ``linear_attention_freq``
with it."""

ARCHITECTURE_RULES: tuple[ArchitectureRule, ...] = (
    ("experimental_attention_variant", lambda v: _set(v) and v != _GDN,
     "experimental attention variants other than gated_delta_net (DeepSeek sparse attention) are not modelled"),
    ("linear_attention_freq", _set, "linear-attention layers (linear_attention_freq) other than gated DeltaNet's are "
                                    "not modelled"),
    ("heterogeneous_layers_config_path", _set, "heterogeneous layers (per-layer configs) are not modelled"),
    ("heterogeneous_layers_config_encoded_json", _set, "heterogeneous layers (per-layer configs) are not modelled"),
    ("heterogeneous_block_specs", _set, "heterogeneous layers (per-layer configs) are not modelled"),
    ("use_legacy_models", _set, "legacy (non-megatron-core) models are not modelled"),
    ("perform_rl_step", _set, "reinforcement-learning steps (generation + training) are not modelled"),
    ("model_type", lambda v: v is not None and _MODEL_TYPES.get(str(v), "") is not None, ""),  # see _MODEL_TYPES
)
"""(key, selects-the-family test on its value, sentence) for every architecture the projection refuses."""

ARCHITECTURE_KEYS = frozenset(key for key, _, _ in ARCHITECTURE_RULES)

_ARCHITECTURE_PARAM_WORDS = """
mamba_d_conv mamba_expand
disable_mamba_mem_eff_path use_mamba_mem_eff_path hybrid_attention_enabled
kda_backend kda_chunk_size kda_gate_lower_bound kda_use_full_rank_gate use_short_conv
fla_cache_dir fla_mla_attn use_fla_data use_fla_fused_gated_norm use_fla_fused_rmsnorm use_fla_fused_swiglu
use_fla_short_conv
indexer_batch_size indexer_log_interval
dsa_indexer_head_dim dsa_indexer_loss_coeff dsa_indexer_n_heads dsa_indexer_topk dsa_indexer_use_sparse_loss
routed_expert_hidden_size latent_moe_use_norm mla_use_output_gate mla_use_nope
quantile_balancing_center_bias quantile_balancing_ema_decay quantile_balancing_margin_max
quantile_balancing_margin_min quantile_balancing_num_bins quantile_balancing_update_interval
grpo_clamp_eps_lower grpo_clamp_eps_upper grpo_default_temperature grpo_default_top_p grpo_entropy_term_weight
grpo_filter_groups_with_same_reward grpo_group_size grpo_iterations grpo_kl_beta grpo_prompts_per_step
langrl_env_config langrl_inference_server_conversation_template langrl_inference_server_type
rl_calculate_intra_group_similarity rl_importance_sampling_truncation_coef rl_inference_logprobs_is_correction
rl_offload_kv_cache_during_training rl_offload_optimizer_during_inference rl_partial_rollouts rl_prompts_per_eval
rl_remove_kv_cache_during_training rl_reset_cuda_graphs
axes_dim clip context_dim guidance_embed in_channels model_channels num_joint_layers num_single_layers out_channels
patch_size t5 theta vae vec_in_dim adaln_always_jit_fuser adaln_plain_ops cfg_dropout_prob guidance_scale
timestep_sampling_strategy vae_latent_mode vae_scale vae_shift
use_fla_fused_norm_gated use_fla_kda_in_kernel_gate use_fla_triton_kda use_kimi_k3_attention_backend
fp4_use_native_te_autocast mxfp4_backward_precision
"""
ARCHITECTURE_PARAMS = frozenset(_ARCHITECTURE_PARAM_WORDS.split())
"""Sizes and switches of families the projection refuses (Primus's diffusion FP4 switches included); Megatron ignores
them unless the family is selected."""


def architecture_problems(args: Mapping[str, Any], origins: Mapping[str, str] | None = None) -> list[Problem]:
    """One problem per architecture ``args`` selects that the projection cannot build (empty when none)."""
    origins = origins or {}
    problems = []
    for key, selects, sentence in ARCHITECTURE_RULES:
        value = args.get(key)
        if value is None or not selects(value) or (key == "linear_attention_freq" and (
                args.get("experimental_attention_variant") == _GDN or args.get("model_type") == "kimi_k3")):
            continue
        if key == "model_type":
            sentence = _MODEL_TYPES.get(str(value)) or (
                _MODEL_TYPES["diffusion_model"] if str(value).startswith(DIFFUSION_PREFIXES)
                else f"model_type {shown(value)} is not a GPT model: not modelled")
        problems.append(Problem(path=origins.get(key, key), value=value,
                                message=f"{sentence}: primus-ext projects GPT-style megatron-core models (dense, MoE, "
                                        "MLA) and megatron-core hybrid Mamba stacks only, so no figure is given "
                                        "for this recipe",
                                fix="project a GPT-style recipe; this architecture is not supported yet"))
    return problems
