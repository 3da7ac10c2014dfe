"""Raw Megatron arguments (a merged flat mapping) -> ``ModelSpec`` + ``ExecutionSpec``.

Resolution follows Megatron's own argument handling: defaults, aliases (VPP given three ways,
``recompute_activations``), derived values (``ffn_hidden_size``, ``kv_channels``, ``num_query_groups``,
the vocabulary from the tokenizer, DP from the world size) and normalisations (sequence parallel
and TP comm overlap are switched off at TP=1, VPP=1 means no interleaving). Malformed values become
``Problem``s (path = the Megatron argument name); nothing is raised.

Usage::

    model, execution, problems = resolve_specs(args, load_system("mi300x", 4), name="llama3.1_8B")
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from primus_ext.errors import Problem
from primus_ext.hardware import format_profiles
from primus_ext.hardware.capabilities import fp8_problem
from primus_ext.model.stages import layout_vpp
from primus_ext.recipe import deepseek_v4 as V4
from primus_ext.recipe import kimi_k3 as K3
from primus_ext.recipe.args import MAX_LAYERS, MEGATRON_DEFAULTS, ArgReader
from primus_ext.recipe.features import dispatcher, lora, loss_impl, recompute_layer_ids, window_skip, wire_dtypes
from primus_ext.recipe.graphs import cuda_graph_mode
from primus_ext.recipe.hybrid import HYBRID_KEYS, hybrid_problems
from primus_ext.recipe.key_effects import architecture_problems, unmodelled_keys, unmodelled_warning
from primus_ext.recipe.launch import launch_spec
from primus_ext.recipe.linear_attention import LFM_KEY
from primus_ext.recipe.moe_pattern import PatternError, moe_pattern
from primus_ext.recipe.optimizer import optimizer_dtypes
from primus_ext.recipe.pipeline_keys import schedule_from_keys, schedule_vpp
from primus_ext.recipe.precision_keys import fp4_recipe, fp8_recipe
from primus_ext.recipe.precision_keys import precision as precision_of_keys
from primus_ext.recipe.releases import read_release_keys
from primus_ext.recipe.stacks import recompute_note, stack_model
from primus_ext.recipe.tokenizers import ASSUMED_VOCAB, NULL_TOKENIZER_EOD, PRIMUS_MOCK_VOCAB, vocab_size_of
from primus_ext.recipe.torchtitan_keys import TORCHTITAN_KEYS, torchtitan_fields
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

VPP_KEYS = (
    "virtual_pipeline_model_parallel_size",
    "num_virtual_stages_per_pipeline_rank",
    "num_layers_per_virtual_pipeline_stage",
)
FSDP_KEYS = ("use_torch_fsdp2", "use_megatron_fsdp", "use_custom_fsdp")

SPEC_ALIASES: dict[str, tuple[str, ...]] = {
    "virtual_pipeline_model_parallel_size": VPP_KEYS,
    "activation": ("swiglu", "squared_relu", "quick_geglu"),
    "moe_layer_pattern": ("moe_layer_freq",),
    "precision": ("fp8", "fp4", "bf16", "fp16"),
    "fsdp": FSDP_KEYS,
    "pipeline_schedule": ("patch_zero_bubble", "patch_primus_pipeline", *VPP_KEYS),
    "recompute_granularity": ("recompute_granularity", "recompute_activations"),
}
"""Spec field -> the Megatron arguments that set it (for pointing a problem at what the user wrote)."""

RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
"""Megatron's ``--recompute-modules`` choices (megatron-core TransformerConfig.recompute_modules)."""

_OTHER_READ = (
    "num_layers", "hidden_size", "num_attention_heads", "tokenizer_type", "tokenizer_model",
    "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers", "pipeline_model_parallel_layout",
    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split", "enable_zero_bubble",
    "recompute_method", "recompute_num_layers", "recompute_modules", "use_distributed_optimizer",
    "data_parallel_sharding_strategy", "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
    "overlap_moe_expert_parallel_comm", "moe_shared_expert_overlap", "grad_reduce_in_bf16",
    "moe_router_force_load_balancing", "moe_expert_capacity_factor", "first_k_dense_replace",
    "zero_bubble_v_schedule", "pp_algorithm", "cpu_offloading", "cpu_offloading_num_layers",
    "cpu_offloading_activations", "cpu_offloading_weights", "cross_entropy_fusion_impl",
    "fp8_param_gather", "fp8_recipe", "fp4_recipe", "fp4_param",
    "moe_router_num_groups", "moe_router_group_topk", "moe_shared_expert_gate",
    "cuda_graph_impl", "cuda_graph_scope", "enable_cuda_graph", "external_cuda_graph",
    "use_precision_aware_optimizer", "main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype",
    "store_param_remainders", "accumulate_allreduce_grads_in_fp32", "optimizer",
    "window_attn_skip_freq", "cross_entropy_loss_fusion", "moe_enable_deepep", "moe_flex_dispatcher_backend",
    "use_turbo_deepep", "recompute_layer_ids", "lora", "stage", "activation_func_fp8_input_store",
    "moe_dispatch_fwd_dtype", "moe_combine_bwd_dtype", "use_transformer_engine_op_fuser", *HYBRID_KEYS, LFM_KEY,
    *TORCHTITAN_KEYS, *V4.KEYS,
)
READ_KEYS: frozenset[str] = frozenset(
    (*MEGATRON_DEFAULTS, *_OTHER_READ, *(k for keys in SPEC_ALIASES.values() for k in keys))
)
"""Every argument the resolver reads (part of the known-key catalogue)."""


def _activation(a: ArgReader) -> str:
    chosen = [k for k in ("swiglu", "squared_relu", "quick_geglu") if a.bool(k)]
    if len(chosen) > 1:
        a.bad(chosen[1], f"conflicts with {chosen[0]}: choose one activation", fix=f"set {chosen[1]}: false")
    if not chosen:
        return "gelu"
    return {"swiglu": "swiglu", "squared_relu": "squared_relu", "quick_geglu": "geglu"}[chosen[0]]


def _window(a: ArgReader) -> tuple[int, int] | None:
    value = a.raw("window_size")
    if value is None:
        return None
    if isinstance(value, str):
        parts = value.strip("()[] ").split(",")
        try:
            value = [int(p) for p in parts]
        except ValueError:
            value = None
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        return (int(value[0]), int(value[1]))
    a.bad("window_size", "expected two integers (left, right)", fix="write window_size: [128, 0]")
    return None


def _vocab(a: ArgReader) -> tuple[int, str]:
    """(unpadded vocabulary, where it came from) as the run's tokenizer would give it."""
    null = NULL_TOKENIZER_EOD  # Megatron's NullTokenizer: vocab_size ids + an end-of-document id
    if a.primus and a.bool("mock_data"):
        # Primus patches/args/mock_data_patches.py: mock data forces NullTokenizer, vocab_size 131072 when unset
        vocab = a.int("vocab_size")
        if vocab is None:
            vocab = PRIMUS_MOCK_VOCAB
            a.warnings.append(f"mock_data: Primus trains with its NullTokenizer and a vocabulary of {vocab} (its "
                              "mock-data patch), not the tokenizer's; set vocab_size to project your tokenizer's")
        return vocab + null, "Primus mock data (NullTokenizer)"
    tokenizer_type = a.args.get("tokenizer_type")
    if a.given("vocab_size"):
        vocab = a.int("vocab_size") or 1
        return (vocab + null, "vocab_size + NullTokenizer's end-of-document id") \
            if tokenizer_type == "NullTokenizer" else (vocab, "vocab_size")
    if tokenizer_type == "NullTokenizer":
        a.bad("vocab_size", "NullTokenizer needs vocab_size (Megatron's NullTokenizer is built from it)",
              fix="set vocab_size")
        return 1, "missing"
    model = a.args.get("tokenizer_model")
    vocab = vocab_size_of(model if isinstance(model, str) else None,
                          tokenizer_type if isinstance(tokenizer_type, str) else None)
    if vocab is None:
        a.warnings.append(f"vocab_size is not set and tokenizer {model or tokenizer_type!r} is not in the known-"
                          f"tokenizer table: projected with an assumed vocabulary of {ASSUMED_VOCAB} (Primus's "
                          "NullTokenizer default); set vocab_size for the exact embedding and output layer")
        return ASSUMED_VOCAB, "assumed"
    return vocab, f"tokenizer {model or tokenizer_type}"


def resolve_model(a: ArgReader, *, name: str) -> ModelSpec:
    num_layers = a.int("num_layers", maximum=MAX_LAYERS, required=True) or 1
    read_hidden = a.int("hidden_size", required=True)
    read_heads = a.int("num_attention_heads", required=True)
    hidden, heads = read_hidden or 1, read_heads or 1
    activation = _activation(a)
    ffn = a.int("ffn_hidden_size")
    if ffn is None:
        # Megatron-LM arguments.py: 4h, or int(4h * 2/3 / 64) * 64 for SwiGLU.
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if activation == "swiglu" else 4 * hidden
    mla = a.bool("multi_latent_attention")
    groups = heads
    if not mla and (a.bool("group_query_attention") or not a.given("group_query_attention")):
        groups = a.int("num_query_groups") or heads
        if groups != heads and not a.given("group_query_attention"):
            a.warnings.append(
                f"num_query_groups={groups} taken as grouped-query attention although group_query_attention "
                "is not set (Megatron itself needs group_query_attention: true to use it)"
            )
    elif a.given("num_query_groups") and a.args.get("num_query_groups") != heads and not mla:
        a.warnings.append(
            f"num_query_groups={a.args.get('num_query_groups')} is ignored because group_query_attention is "
            "false (Megatron semantics: MHA)"
        )
    kv_channels = a.int("kv_channels")
    if kv_channels is None:
        if read_hidden and read_heads and hidden % heads:  # not a consequence of a size already refused
            a.bad("kv_channels", f"unset and hidden_size {hidden} is not divisible by num_attention_heads {heads}",
                  fix="set kv_channels (the per-head dimension)")
        kv_channels = max(1, hidden // heads)
    position = a.choice("position_embedding_type", ("rope", "mrope", "yarn", "learned_absolute", "none"))
    experts = a.int("num_experts", minimum=1)
    pattern: tuple[bool, ...] = ()
    if experts:
        try:
            pattern = moe_pattern(a.raw("moe_layer_freq"), num_layers)
        except PatternError as err:
            a.bad("moe_layer_freq", str(err), fix="an int N, a 0/1 list of num_layers entries, or '([0]*k+[1]*m)'")
        first_dense = a.int("first_k_dense_replace", minimum=0, maximum=MAX_LAYERS)
        if first_dense:
            # Hugging Face DeepSeek configs: layer i is MoE iff i >= first_k_dense_replace (and freq matches)
            pattern = tuple(moe and i >= first_dense for i, moe in enumerate(pattern))
    elif a.given("num_experts") and a.raw("num_experts") is not None:
        # num_experts itself is wrong (said above): the other MoE arguments are still read, so their own
        # problems are listed too, not found one run later
        for key in ("moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_router_topk", "moe_latent_size"):
            a.int(key)
        a.int("moe_router_num_groups", minimum=0)
        a.int("moe_router_group_topk", minimum=0)
    elif a.given("moe_ffn_hidden_size"):
        a.bad("num_experts", "moe_ffn_hidden_size is set but num_experts is not",
              fix="set num_experts, or drop the MoE arguments for a dense model")
    vocab, vocab_source = _vocab(a)
    return ModelSpec(
        name=name,
        num_layers=num_layers,
        hidden_size=hidden,
        ffn_hidden_size=ffn,
        num_attention_heads=heads,
        num_query_groups=groups,
        kv_channels=kv_channels,
        vocab_size=vocab,
        vocab_source=vocab_source,
        make_vocab_size_divisible_by=a.int("make_vocab_size_divisible_by") or 128,
        max_position_embeddings=a.int("max_position_embeddings") or a.int("seq_length") or 4096,
        activation=activation,  # type: ignore[arg-type]
        normalization=a.choice("normalization", ("RMSNorm", "LayerNorm"), "LayerNorm"),  # type: ignore[arg-type]
        add_bias_linear=a.bool("add_bias_linear", True),
        add_qkv_bias=a.bool("add_qkv_bias"),
        qk_layernorm=a.bool("qk_layernorm"),
        untie_embeddings_and_output_weights=a.bool("untie_embeddings_and_output_weights"),
        position_embedding_type="rope" if position in ("mrope", "yarn") else position,  # type: ignore[arg-type]
        window_size=_window(a),
        window_attn_skip_freq=window_skip(a, num_layers),
        num_experts=experts,
        moe_router_topk=a.int("moe_router_topk") or 2,
        moe_ffn_hidden_size=(a.int("moe_ffn_hidden_size") or ffn) if experts else None,
        moe_shared_expert_intermediate_size=a.int("moe_shared_expert_intermediate_size") if experts else None,
        moe_latent_size=a.int("moe_latent_size") if experts else None,  # latent MoE (megatron-core 0.16+)
        # megatron-core builds the gate only beside shared experts
        moe_shared_expert_gate=bool(experts and a.int("moe_shared_expert_intermediate_size"))
        and a.bool("moe_shared_expert_gate"),
        moe_layer_pattern=pattern,
        # group-limited routing (megatron-core TransformerConfig names; DeepSeek-V3: 8 groups, top-4)
        moe_router_num_groups=(a.int("moe_router_num_groups", minimum=0) or None) if experts else None,
        moe_router_group_topk=(a.int("moe_router_group_topk", minimum=0) or None) if experts else None,
        multi_latent_attention=mla,
        q_lora_rank=a.int("q_lora_rank"),
        kv_lora_rank=a.int("kv_lora_rank") or 32,
        qk_head_dim=a.int("qk_head_dim") or 128,
        qk_pos_emb_head_dim=a.int("qk_pos_emb_head_dim", minimum=0, default=64),  # type: ignore[arg-type]
        v_head_dim=a.int("v_head_dim") or 128,
        mtp_num_layers=a.int("mtp_num_layers", minimum=0) or 0,
        mtp_use_repeated_layer=a.bool("mtp_use_repeated_layer"),  # megatron-core core_v0.17.0+
    )


def _vpp(a: ArgReader, num_layers: int, pp: int) -> int | None:
    """VPP from whichever of Megatron's three spellings was given; conflicts are problems."""
    candidates: dict[str, int] = {}
    for key in VPP_KEYS[:2]:
        value = a.int(key, maximum=MAX_LAYERS)
        if value is not None:
            candidates[key] = value
    per_stage = a.int("num_layers_per_virtual_pipeline_stage")
    if per_stage is not None:
        layers_per_rank = num_layers // pp
        if layers_per_rank % per_stage:
            a.bad("num_layers_per_virtual_pipeline_stage",
                  f"{layers_per_rank} layers per pipeline rank (num_layers {num_layers} / PP {pp}) are not a "
                  f"multiple of {per_stage}",
                  fix="use num_virtual_stages_per_pipeline_rank instead, or a divisor of the layers per rank")
        else:
            candidates["num_layers_per_virtual_pipeline_stage"] = max(1, layers_per_rank // per_stage)
    if len(set(candidates.values())) > 1:
        first, *others = candidates
        for key in others:
            a.bad(key, f"gives VPP={candidates[key]} but {first} gives VPP={candidates[first]}",
                  fix="give the virtual pipeline size once")
    vpp = next(iter(candidates.values()), None)
    return vpp if vpp and vpp > 1 else None


def _layout_ok(a: ArgReader, layout: str) -> bool:
    """Refuse layout strings whose repeats would expand beyond any real model (``(t|)*10**9``)."""
    counts = [int(n) for n in re.findall(r"\*(\d{1,12})", layout)]
    if len(layout) > 10_000 or any(n > MAX_LAYERS for n in counts) or re.search(r"\*\d{13}", layout):
        a.bad("pipeline_model_parallel_layout", f"layout longer than {MAX_LAYERS} entries",
              fix='write e.g. "Et*3|(tt|)*29,m|L"')
        return False
    return True


def _fsdp(a: ArgReader) -> str:
    on = [k for k in FSDP_KEYS if a.bool(k)]
    if len(on) > 1 and set(on) != {"use_megatron_fsdp", "use_custom_fsdp"}:
        a.bad(on[1], f"conflicts with {on[0]}: choose one FSDP implementation", fix=f"set {on[1]}: false")
    if not on:
        return "none"
    return "torch_fsdp2" if on[0] == "use_torch_fsdp2" else "megatron_fsdp"


def _recompute_modules(a: ArgReader) -> tuple[str, ...]:
    value = a.raw("recompute_modules")
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        a.bad("recompute_modules", "expected a list of module names", fix=f"choose from {', '.join(RECOMPUTE_MODULES)}")
        return ()
    unknown = [v for v in value if v not in RECOMPUTE_MODULES]
    if unknown:
        a.bad("recompute_modules", f"unknown module(s) {unknown}", fix=f"choose from {', '.join(RECOMPUTE_MODULES)}")
    return tuple(v for v in value if v in RECOMPUTE_MODULES)


def resolve_execution(a: ArgReader, model: ModelSpec, system: SystemSpec,
                      environ: Mapping[str, str] | None = None) -> ExecutionSpec:
    tp = a.int("tensor_model_parallel_size") or 1
    pp = a.int("pipeline_model_parallel_size") or 1
    cp = a.int("context_parallel_size") or 1
    layout = a.raw("pipeline_model_parallel_layout")
    if layout is not None and not isinstance(layout, str):
        a.bad("pipeline_model_parallel_layout", "expected a layout string", fix='write e.g. "Et*3|(tt|)*29,m|L"')
        layout = None
    if layout and not _layout_ok(a, layout):
        layout = None
    vpp = _vpp(a, model.num_layers, pp)
    if vpp is None and layout:
        vpp = layout_vpp(layout, pp)  # Megatron derives VPP from the layout's stage count
        vpp = vpp if vpp > 1 else None
    schedule = schedule_from_keys(a, pp, vpp)
    vpp = schedule_vpp(schedule, pp, vpp)
    granularity = a.choice("recompute_granularity", ("full", "selective"))
    if granularity is None and a.bool("recompute_activations"):
        granularity = "selective"  # Megatron-LM arguments.py: --recompute-activations
    dp = max(1, system.world_size // (tp * pp * cp))
    mbs = a.int("micro_batch_size") or 1
    seq = a.int("seq_length", required=True) or 1
    etp = a.int("expert_tensor_parallel_size")
    capacity = a.float("moe_expert_capacity_factor")
    optimizer = optimizer_dtypes(a)
    lora_rank, lora_targets = lora(a)
    precision = precision_of_keys(a)
    if precision == "fp8" and (problem := fp8_problem(system.gpu)):
        a.bad("fp8", problem, fix=f"project this recipe in bf16 (fp8: null; fp8=null on the command line), or on a GPU "
              f"with FP8 tensor cores ({', '.join(format_profiles('fp8'))})")
    fsdp = _fsdp(a)
    bf16_main_grads = optimizer.pop("bf16_main_grads") and precision in ("bf16", "fp8", "fp4")
    return ExecutionSpec(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp,
        context_parallel_size=cp,
        expert_model_parallel_size=a.int("expert_model_parallel_size") or 1,
        expert_tensor_parallel_size=etp,
        data_parallel_size=dp,
        # Megatron-LM arguments.py turns both off when TP == 1 (with a warning).
        sequence_parallel=a.bool("sequence_parallel") and tp > 1,
        cp_comm_type=a.choice("cp_comm_type", ("p2p", "a2a", "allgather", "a2a+p2p"), "p2p"),  # type: ignore[arg-type]
        decoder_first_pipeline_num_layers=a.int("decoder_first_pipeline_num_layers", minimum=0),
        decoder_last_pipeline_num_layers=a.int("decoder_last_pipeline_num_layers", minimum=0),
        pipeline_model_parallel_layout=layout,
        account_for_embedding_in_pipeline_split=a.bool("account_for_embedding_in_pipeline_split"),
        account_for_loss_in_pipeline_split=a.bool("account_for_loss_in_pipeline_split"),
        pipeline_schedule=schedule,  # type: ignore[arg-type]
        micro_batch_size=mbs,
        global_batch_size=a.int("global_batch_size") or mbs * dp,
        seq_length=seq,
        recompute_granularity=granularity,  # type: ignore[arg-type]
        recompute_method=a.choice("recompute_method", ("uniform", "block")),  # type: ignore[arg-type]
        recompute_num_layers=a.int("recompute_num_layers", minimum=0),
        recompute_layer_ids=recompute_layer_ids(a, model.num_layers, model.mtp_num_layers),
        lora_rank=lora_rank,
        lora_targets=lora_targets,
        recompute_modules=_recompute_modules(a),
        activation_func_fp8_input_store=a.bool("activation_func_fp8_input_store"),
        # megatron-core ModelParallelConfig: cpu_offloading_activations defaults to True, weights False
        cpu_offloading=a.bool("cpu_offloading"),
        cpu_offloading_num_layers=a.int("cpu_offloading_num_layers", minimum=0) or 0,
        cpu_offloading_activations=a.bool("cpu_offloading_activations", True),
        cpu_offloading_weights=a.bool("cpu_offloading_weights"),
        use_distributed_optimizer=a.bool("use_distributed_optimizer"),
        fsdp=fsdp,  # type: ignore[arg-type]
        data_parallel_sharding_strategy=a.choice(  # type: ignore[arg-type]
            "data_parallel_sharding_strategy", ("no_shard", "optim", "optim_grads", "optim_grads_params"), "no_shard"
        ),
        overlap_grad_reduce=a.bool("overlap_grad_reduce"),
        overlap_param_gather=a.bool("overlap_param_gather"),
        tp_comm_overlap=a.bool("tp_comm_overlap") and tp > 1,
        overlap_moe_expert_parallel_comm=a.bool("overlap_moe_expert_parallel_comm"),
        moe_shared_expert_overlap=a.bool("moe_shared_expert_overlap"),
        precision=precision,  # type: ignore[arg-type]
        grad_reduce_in_bf16=a.bool("grad_reduce_in_bf16") or bf16_main_grads,
        fp8_param_gather=a.bool("fp8_param_gather"),
        fp8_recipe=fp8_recipe(a, system),  # type: ignore[arg-type]
        fp4_recipe=fp4_recipe(a, system, precision),  # type: ignore[arg-type]
        fp4_param=a.bool("fp4_param") and precision == "fp4",
        cross_entropy_fusion_impl=loss_impl(a),  # type: ignore[arg-type]
        cuda_graph=cuda_graph_mode(a),  # type: ignore[arg-type]
        **optimizer,
        moe_token_dispatcher_type=dispatcher(a),  # type: ignore[arg-type]
        **wire_dtypes(a),
        moe_grouped_gemm=a.bool("moe_grouped_gemm"),
        moe_router_force_load_balancing=a.bool("moe_router_force_load_balancing"),
        moe_expert_capacity_factor=capacity if capacity is not None and capacity >= 0 else None,
        launch=launch_spec(a, environ),
        **torchtitan_fields(a, granularity, fsdp),
    )


def _model_of(args: Mapping[str, Any], reader: ArgReader, name: str) -> tuple[ModelSpec, list[Problem]]:
    """The recipe's model (GPT-style, or the hybrid stack ``recipe.stacks`` reads it as) and the problems that refuse
    its architecture outright (empty when modelled); the other problems go to ``reader``."""
    refused, model = stack_model(args, reader, resolve_model(reader, name=name), architecture_problems(args))
    return model, refused


def resolve_model_keys(args: Mapping[str, Any], *, name: str = "model") -> tuple[ModelSpec, list[Problem]]:
    """The model half of ``resolve_all`` (no system needed: the keys of an architecture alone); its problems."""
    args, _, problems = read_release_keys(args)
    args = K3.k3_args(args)  # the modules Primus builds for a Kimi-K3 recipe (MLA, latent MoE)
    reader = ArgReader(args, problems)
    model, refused = _model_of(args, reader, name)
    return model, refused or list({(p.path, p.message): p for p in problems}.values())


def resolve_all(
    args: Mapping[str, Any], system: SystemSpec, *, name: str = "model", primus: bool = False,
    environ: Mapping[str, str] | None = None,
) -> tuple[ModelSpec, ExecutionSpec, list[Problem], list[str]]:
    """``resolve_specs`` plus the warnings (values Megatron would silently ignore or reinterpret).

    ``primus``: the arguments come from a Primus experiment, so Primus's argument patches apply (its
    mock-data tokenizer). ``environ``: the launch environment (``CUDA_DEVICE_MAX_CONNECTIONS``; default this
    process's)."""
    args, release_notes, problems = read_release_keys(args)  # an earlier Primus release's keys, as it meant them
    args = K3.k3_args(args)  # the modules Primus builds for a Kimi-K3 recipe (MLA, latent MoE)
    reader = ArgReader(args, problems, primus=primus)
    reader.warnings.extend(release_notes)
    model, refused = _model_of(args, reader, name)
    execution = V4.v4_execution(args, model, resolve_execution(reader, model, system, environ))
    if refused:  # the arguments describe another model family: its other problems would only confuse
        return model, execution, refused, reader.warnings
    if model.hybrid_layer_pattern:  # its legality problems: recipe.checks.check (the tuner's rule set too)
        reader.warnings.extend(hybrid_problems(model, execution, recompute_note(args))[1])
    unique = list({(p.path, p.message): p for p in problems}.values())  # a key read twice reports once
    found = unmodelled_keys(args)
    if model.hybrid_layer_pattern:
        found.pop("spec", None)  # megatron-core's (or Primus's copy of) mamba_stack_spec: what is projected
    warnings = [*reader.warnings, unmodelled_warning(found)] if found else reader.warnings
    return model, execution, unique, warnings


def resolve_specs(
    args: Mapping[str, Any], system: SystemSpec, *, name: str = "model"
) -> tuple[ModelSpec, ExecutionSpec, list[Problem]]:
    """Resolve merged Megatron arguments into specs. Problems name the Megatron argument at fault.

    When problems are returned the specs hold placeholders for the faulty values; do not project them.
    """
    model, execution, problems, _ = resolve_all(args, system, name=name)
    return model, execution, problems
