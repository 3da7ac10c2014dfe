"""Build the real megatron-core module one rank of the target run executes for a layer kind.

Usage (inside ``shims.parallel_context``)::

    built = build_layer(shape, device="cpu")
    out = built.module(**built.make_inputs())

Kinds: ``dense`` / ``moe`` -> a ``TransformerBlock`` (no final norm) of one layer, or of one period of an
alternating sliding-window pattern (``RankShape.timed_layers``), from the GPT layer spec (MHA/GQA or MLA, MoE with
shared experts); ``embedding`` -> ``LanguageModelEmbedding``;
``output`` -> final norm + ``ColumnParallelLinear`` output layer + vocab-parallel cross entropy. Each kind's
builder is an entry of ``kind_builders.BUILDERS`` keyed by the ``primus_ext.model.kinds`` registry's names (kept
out of ``model/``, which stays torch-free); the kind's traits (expert split, attention, sequence split,
recompute) come from the registry.
The transformer-engine spec is used only when TE imports and the device is CUDA; otherwise the
local spec (torch modules), with the shims of ``shims.py`` and, on a GPU, PyTorch's fused SDPA for
the core attention (``attention.py``) and its grouped GEMM for the experts (``grouped.py``).

Per-rank shapes. When the process group has the run's TP/EP sizes (``distributed=True``, ranks
spawned by ``spawn.py``) the config carries the *global* sizes and megatron divides them. In a
one-rank world (``distributed=False``) the config is built at *per-rank* sizes so the GEMMs have
the shapes one rank of the target run computes, without the communication:

- hidden stays (activations are full width between layers); heads/TP and query groups/TP with
  kv_channels kept, so QKV is ``hidden x (heads+2*groups)/TP*kv`` and the projection ``heads/TP*kv x
  hidden``; ffn/TP; shared-expert ffn/TP; vocab/TP for embedding and output;
- MLA: heads/TP; the down-projections stay whole (TE's duplicated layout on the GPU target);
- MoE: local experts = experts/EP at expert ffn/ETP; the rank's own tokens are routed among them
  with force-balanced routing, which yields the balanced per-rank token slots
  ``MBS*seq/CP*topk*ETP/TP`` whenever topk*ETP/TP*imbalance is an integer <= local experts
  (otherwise the nearest is used and ``notes`` say so);
- seq/CP tokens with a causal mask over the local chunk (CP's attention to remote chunks and the
  sequence-parallel split of norms are not represented at world 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from primus_ext.measure.attention import NOTE as SDPA_NOTE
from primus_ext.measure.grouped import apply_torch_grouped_gemm, grouped_unavailable
from primus_ext.measure.kind_builders import (  # noqa: F401 (OutputLayerWithLoss, cp_core_attention_class: re-exported)
    BUILDERS,
    KindBuilder,
    OutputLayerWithLoss,
    _BuildContext,
    cp_core_attention_class,
    kind_builder,
)
from primus_ext.measure.shims import resolve_device
from primus_ext.model.costs import STAND_IN_SPEC
from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.rank_shape import RankShape

DROPOUT = 0.0
"""Hidden/attention dropout of the measured layers: Llama-3 / DeepSeek-V3 / Mixtral pretraining
recipes in Megatron and Primus set both to 0 (shared/primus_configs)."""

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
           "fp8": torch.bfloat16, "fp4": torch.bfloat16}


class UnsupportedLayer(ValueError):
    """The shape cannot be built on this device / library (recorded as a per-layer failure)."""


@dataclass(kw_only=True)
class BuiltLayer:
    """A built module plus what is needed to run it for one micro-batch."""

    shape: RankShape
    module: torch.nn.Module
    device: torch.device
    dtype: torch.dtype
    config: Any
    distributed: bool
    make_inputs: Callable[[], dict[str, torch.Tensor | None]]
    """Fresh keyword arguments of ``module(...)``; the differentiable input requires grad."""
    recompute_targets: tuple[torch.nn.Module, ...] = ()
    """Sub-modules whose forward megatron re-runs in backward under the shape's recompute."""
    notes: tuple[str, ...] = ()
    spec_kind: str = "local"
    """``local`` (torch modules), ``local+torch`` (the local spec with PyTorch's fused attention and grouped
    expert GEMMs, a GPU without TE) or ``te`` (transformer-engine)."""
    param_names: dict[str, int] = field(default_factory=dict)
    extra_params: int = 0
    """Parameters of experts built only to carry the per-rank token slots (not the rank's), all layers."""
    layers: int = 1
    """Transformer layers in ``module``: one period of a sliding-window pattern (``RankShape.timed_layers``); what is
    measured on the block is divided by it, the mean per layer."""

    @property
    def param_count(self) -> int:
        """Parameters the rank holds for one layer: the module's, less ``extra_params``, per layer."""
        return (sum(p.numel() for p in self.module.parameters()) - self.extra_params) // self.layers


def te_available(device: torch.device) -> bool:
    if device.type != "cuda":
        return False
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        return False
    return True


def uses_torch_stand_ins(device: torch.device, use_te: bool) -> bool:
    """PyTorch's fused kernels in place of TE's: core attention through ``attention.py`` and MoE experts
    through ``grouped.py``, on a GPU without TE (on CPU the local spec's own modules are what a CPU
    training run executes)."""
    return device.type == "cuda" and not use_te


def _activation(name: str) -> tuple[Callable[..., torch.Tensor], bool]:
    import torch.nn.functional as F
    from megatron.core.activations import squared_relu

    table = {"swiglu": (F.silu, True), "geglu": (F.gelu, True), "gelu": (F.gelu, False),
             "squared_relu": (squared_relu, False)}
    if name not in table:
        raise UnsupportedLayer(f"activation {name!r} is not one of {sorted(table)}")
    return table[name]


def _div(value: int, by: int, what: str) -> int:
    if value % by:
        raise UnsupportedLayer(f"{what}={value} is not divisible by {by}")
    return value // by


def _moe_routing(shape: RankShape, local_experts: int) -> tuple[int, int, list[str]]:
    """(experts to build, router top-k, notes) reproducing the balanced per-rank token slots.

    One rank computes ``tokens * topk*ETP/TP*imbalance`` token slots over its local experts. In a
    one-rank world the rank's own tokens are routed with top-k = that factor; when it exceeds the
    local expert count, extra experts are built so each token can take that many slots (their
    parameters are not reported, ``BuiltLayer.extra_params``).
    """
    a = shape.arch
    target = a.moe_router_topk * shape.etp / shape.tp * shape.moe_imbalance
    topk = max(1, round(target))
    built = max(local_experts, topk)
    notes = []
    if abs(topk - target) > 1e-9:
        notes.append(f"routed slots per token {topk} vs target {target:g} (topk*ETP/TP*imbalance)")
    if built > local_experts:
        notes.append(f"built {built} experts (local {local_experts}) so tokens take {topk} slots; "
                     "params reported for the local experts")
    if built < a.num_experts:
        notes.append(f"router scores {built} built experts, not all {a.num_experts} (one-rank world)")
    return built, topk, notes


def transformer_config(shape: RankShape, *, distributed: bool, device: torch.device, use_te: bool,
                       dtype: torch.dtype | None = None, grouped: bool = False):
    """The megatron ``TransformerConfig`` (``MLATransformerConfig`` for MLA) for ``shape``, and the notes on what
    the measurement leaves out."""
    config_class, kw, notes = config_kwargs(shape, distributed=distributed, device=device, use_te=use_te,
                                            dtype=dtype, grouped=grouped)
    return config_class(**kw), notes


def config_kwargs(shape: RankShape, *, distributed: bool, device: torch.device, use_te: bool,
                  dtype: torch.dtype | None = None, grouped: bool = False) -> tuple[type, dict[str, Any], list[str]]:
    """(config class, keyword arguments, notes) of ``transformer_config``: the one translation of a layer's
    architecture into megatron's config, which the built-in trainer takes too (``launcher.trainer.build``: the
    model that trains is the model that was timed) before it sets the run's own fields."""
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    a = shape.arch
    split = 1 if distributed else shape.tp
    esplit = 1 if distributed else shape.etp
    act, gated = _activation(a.activation)
    dtype = dtype or _DTYPES[shape.precision]
    notes: list[str] = []
    if shape.precision in ("fp8", "fp4") and not use_te:
        notes.append(f"{shape.precision} needs transformer-engine: measured in bf16")
    elif shape.precision == "fp4" and shape.fp4_recipe != "nvfp4":
        notes.append("mxfp4 is Primus's ROCm recipe, not megatron-core's: measured in bf16")
    layers = shape.timed_layers
    builder, kind = _builder(shape), get_kind(shape.kind)
    ep, etp = kind.expert_split(shape)
    kw: dict[str, Any] = dict(
        num_layers=layers,
        hidden_size=a.hidden_size,
        num_attention_heads=_div(a.num_attention_heads, split, "num_attention_heads"),
        kv_channels=a.kv_channels,
        ffn_hidden_size=_div(a.ffn_hidden_size or a.moe_ffn_hidden_size or 4 * a.hidden_size, split, "ffn"),
        normalization=a.normalization,
        gated_linear_unit=gated,
        activation_func=act,
        add_bias_linear=a.add_bias_linear,
        add_qkv_bias=a.add_qkv_bias,
        qk_layernorm=a.qk_layernorm,
        window_size=a.window_size,
        window_attn_skip_freq=shape.window_pattern or None,
        hidden_dropout=DROPOUT,
        attention_dropout=DROPOUT,
        use_cpu_initialization=device.type == "cpu",
        params_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        tensor_model_parallel_size=shape.tp if distributed else 1,
        sequence_parallel=bool(distributed and shape.sequence_parallel and shape.tp > 1),
        # expert groups exist only for an MoE layer (megatron rejects EP > 1 without experts)
        expert_model_parallel_size=ep if distributed else 1,
        expert_tensor_parallel_size=etp if distributed else 1,
    )
    if not distributed:
        notes += _world1_notes(shape, use_te)
    if layers > 1:
        notes.append(f"{layers} layers timed ({layers - 1} with window {a.window_size[0]}, 1 with full attention): "
                     "costs are their mean per layer (peak memory: the block's)")
    if use_te and shape.precision == "fp8":
        # delayed scaling runs the same per-tensor fp8 GEMMs as tensorwise; tensorwise needs no amax history
        # to warm up over a few timed passes. torchao's rowwise recipe has no TE equivalent.
        recipe = shape.fp8_recipe if shape.fp8_recipe in ("mxfp8", "blockwise") else "tensorwise"
        if shape.fp8_recipe == "rowwise":
            notes.append("fp8 rowwise (torchao) has no Transformer Engine recipe: measured with tensorwise scaling")
        kw.update(fp8="hybrid", fp8_recipe=recipe)
    if use_te and shape.precision == "fp4" and shape.fp4_recipe == "nvfp4":
        kw.update(fp4="e2m1", fp4_recipe="nvfp4")  # megatron-core 0.16 TransformerConfig (TE >= 2.7)
    if not a.multi_latent_attention:
        kw["num_query_groups"] = _div(a.num_query_groups, split, "num_query_groups")
    if builder.experts:
        if a.moe_latent_size and not use_te:  # megatron-core 0.16.1 moe_layer.py: "TransformerEngine is required"
            raise UnsupportedLayer("latent MoE (moe_latent_size) needs Transformer Engine: megatron-core builds its "
                                   "latent projections as TELinear and its latent experts as TEGroupedMLP only")
        local = a.num_experts if distributed else _div(a.num_experts, shape.ep, "num_experts")
        built, topk, more = (local, a.moe_router_topk, []) if distributed else _moe_routing(shape, local)
        notes += more
        kw.update(
            num_moe_experts=built,
            moe_router_topk=topk,
            moe_ffn_hidden_size=_div(a.moe_ffn_hidden_size, esplit, "moe_ffn_hidden_size"),
            moe_shared_expert_intermediate_size=(
                _div(a.moe_shared_expert_intermediate_size, split, "shared expert ffn")
                if a.moe_shared_expert_intermediate_size else None
            ),
            moe_shared_expert_gate=a.moe_shared_expert_gate,
            moe_latent_size=a.moe_latent_size or None,
            moe_token_dispatcher_type="alltoall" if device.type == "cuda" else "allgather",
            moe_grouped_gemm=use_te or grouped,
            moe_router_force_load_balancing=True,
            moe_router_pre_softmax=topk == 1,  # megatron requires it for top-1; cost unchanged
        )
    if kind.recomputable:
        kw.update(_recompute_kwargs(shape, use_te or grouped, notes))
    if a.multi_latent_attention:
        kw.update(multi_latent_attention=True, q_lora_rank=a.q_lora_rank, kv_lora_rank=a.kv_lora_rank,
                  qk_head_dim=a.qk_head_dim, qk_pos_emb_head_dim=a.qk_pos_emb_head_dim,
                  v_head_dim=a.v_head_dim)
        return MLATransformerConfig, kw, notes
    return TransformerConfig, kw, notes


def _world1_notes(shape: RankShape, use_te: bool) -> list[str]:
    """What a one-rank world leaves out of a per-rank measurement (the projection adds it back)."""
    notes = []
    kind = get_kind(shape.kind)
    groups = [f"{n}={v}" for n, v in (("TP", shape.tp), ("EP", kind.expert_split(shape)[0])) if v > 1]
    if groups:
        notes.append(f"{', '.join(groups)} emulated at per-rank sizes in one rank: no communication timed")
    if shape.sequence_parallel and shape.tp > 1 and kind.takes_sequence_split:
        notes.append("sequence parallel: norms and residuals ran on the whole local sequence, not seq/TP")
    if shape.cp > 1 and kind.attention and use_te:
        notes.append(f"CP={shape.cp}: attention over the local seq/CP chunk only (TE spec in one rank)")
    elif shape.cp > 1 and kind.attention:
        notes.append(f"CP={shape.cp}: local queries attend to the whole sequence (KV repeated, "
                     "load-balanced causal mask); the KV exchange is not timed")
    return notes


def _recompute_kwargs(shape: RankShape, grouped_experts: bool, notes: list[str]) -> dict[str, Any]:
    if shape.recompute == "full":
        return dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    if shape.recompute == "selective":
        modules = list(shape.recompute_modules) or ["core_attn"]
        if not grouped_experts and "moe_act" in modules:  # megatron-core refuses it for per-expert GEMMs
            modules.remove("moe_act")
            notes.append("moe_act recompute needs grouped expert GEMMs: measured without it")
        if not shape.arch.multi_latent_attention and "mla_up_proj" in modules:
            modules.remove("mla_up_proj")
        if not _builder(shape).experts:
            modules = [m for m in modules if m not in ("moe", "shared_experts")]
        return dict(recompute_granularity="selective", recompute_modules=modules)
    return {}


def _builder(shape: RankShape) -> KindBuilder:
    found = kind_builder(shape.kind)
    if found is None:
        raise UnsupportedLayer(f"unknown layer kind {shape.kind!r} (builders: {', '.join(BUILDERS)})")
    return found


def build_layer(shape: RankShape, *, device: str | torch.device | None = None,
                dtype: torch.dtype | None = None, distributed: bool = False,
                stand_ins: bool | None = None) -> BuiltLayer:
    """Build the module for ``shape`` (call inside ``parallel_context``; see module docstring).

    ``dtype`` overrides the precision's parameter/activation dtype (bf16 for bf16/fp8, fp16, fp32).
    ``stand_ins``: PyTorch's fused attention and grouped expert GEMMs in the local spec (default: on a GPU
    without TE, ``uses_torch_stand_ins``; ``True`` on CPU runs the same modules there, for tests).
    """
    dev = resolve_device(device)
    use_te = te_available(dev)
    stand_ins = uses_torch_stand_ins(dev, use_te) if stand_ins is None else stand_ins and not use_te
    builder = _builder(shape)
    sdpa = stand_ins and get_kind(shape.kind).attention
    moe_stand_in = stand_ins and builder.experts
    why_not = grouped_unavailable(shape, dtype or _DTYPES[shape.precision], dev) if moe_stand_in else None
    grouped = moe_stand_in and why_not is None
    grouped_note = apply_torch_grouped_gemm() if grouped else ""
    config, notes = transformer_config(shape, distributed=distributed, device=dev, use_te=use_te, dtype=dtype,
                                       grouped=grouped)
    if sdpa:
        notes.append(SDPA_NOTE)
    if grouped:
        notes.append(grouped_note)
        if config.recompute_granularity == "selective" and "moe_act" in config.recompute_modules:
            notes.append("moe_act recompute (a function, no module to time) is inside bwd_ms, not recompute_ms")
    elif moe_stand_in:
        notes.append(f"experts: one GEMM per local expert (SequentialMLP), no grouped GEMM: {why_not}")
    dtype = config.params_dtype
    a = shape.arch
    sp_split = shape.tp if config.sequence_parallel else 1
    vocab = a.vocab_size if distributed else _div(a.vocab_size or 0, shape.tp, "vocab_size")
    ctx = _BuildContext(shape=shape, config=config, use_te=use_te, sdpa=sdpa, distributed=distributed, device=dev,
                        dtype=dtype, sp_split=sp_split, vocab=vocab)
    module, make_inputs, targets, extra, layers = builder.build(ctx)

    module = module.to(device=dev, dtype=dtype)  # what Float16Module does: params in bf16/fp16
    return BuiltLayer(shape=shape, module=module, device=dev, dtype=dtype, config=config,
                      distributed=distributed, make_inputs=make_inputs, recompute_targets=targets,
                      notes=tuple(notes), spec_kind="te" if use_te else STAND_IN_SPEC if stand_ins else "local",
                      extra_params=extra, layers=layers,
                      param_names={n: p.numel() for n, p in module.named_parameters()})
