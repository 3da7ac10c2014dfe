"""Per-kind builders of the real megatron-core modules ``build.build_layer`` measures (torch-side, so kept here
rather than on ``primus_ext.model.kinds.Kind``; ``BUILDERS`` is keyed by the kind registry's names).

A new layer kind names its ``KindBuilder`` in ``Kind.builder`` (a module of its own; ``kind_builder`` finds it):
``build(ctx)`` returns (module, make_inputs, recompute targets, extra expert parameters, layers timed);
``tests/model/kinds/test_kind_registry.py`` checks that every registered kind has one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from primus_ext.measure.attention import sdpa_core_attention_class
from primus_ext.measure.shims import mla_core_attention_class
from primus_ext.model.rank_shape import RankShape


def _builder_of(shape: RankShape) -> KindBuilder:
    found = kind_builder(shape.kind)
    assert found is not None, shape.kind  # build.build_layer refuses a kind without one first
    return found


def decoder_layer_spec(shape: RankShape, config, use_te: bool, *, sdpa: bool = False):
    """The GPT decoder layer's megatron spec for ``shape`` under ``config`` (TE or local, MLA, MoE, the CPU and
    one-rank substitutions): what ``build_layer`` times and what the built-in trainer stacks
    (``launcher.trainer.build``)."""
    from megatron.core.models.gpt import gpt_layer_specs as specs

    a = shape.arch
    experts = config.num_moe_experts if _builder_of(shape).experts else None
    if use_te:
        return specs.get_gpt_layer_with_transformer_engine_spec(
            num_experts=experts, moe_grouped_gemm=config.moe_grouped_gemm, qk_layernorm=a.qk_layernorm,
            multi_latent_attention=a.multi_latent_attention)
    spec = specs.get_gpt_layer_local_spec(
        num_experts=experts, moe_grouped_gemm=config.moe_grouped_gemm, qk_layernorm=a.qk_layernorm,
        multi_latent_attention=a.multi_latent_attention, normalization=a.normalization)
    sub = spec.submodules
    attn_sub = sub.self_attention.submodules
    if a.multi_latent_attention:
        attn_sub.core_attention = mla_core_attention_class()
    cp = shape.cp if shape.cp > 1 and config.context_parallel_size == 1 else 1
    if sdpa:
        attn_sub.core_attention = sdpa_core_attention_class(attn_sub.core_attention, cp)
    elif cp > 1:
        attn_sub.core_attention = cp_core_attention_class(attn_sub.core_attention, cp)
    if config.sequence_parallel:
        from primus_ext.measure.shims import SPTorchNorm

        sub.input_layernorm = SPTorchNorm
        sub.pre_mlp_layernorm = SPTorchNorm
        for name in ("q_layernorm", "k_layernorm", "kv_layernorm"):
            if hasattr(attn_sub, name) and getattr(attn_sub, name) is not None and a.qk_layernorm:
                setattr(attn_sub, name, SPTorchNorm)
    return spec


def cp_core_attention_class(base: type, cp: int) -> type:
    """Core attention of one context-parallel rank in a one-rank world.

    The rank's ``seq/CP`` queries attend to the whole sequence: keys and values are repeated CP
    times (standing in for the chunks the ring exchange would bring) under the causal mask of
    megatron's load-balanced split (rank 0 holds chunks 0 and 2*CP-1 of 2*CP). Same convention as
    the unfused local attention at CP=1: the full score rectangle is computed, then masked.
    """

    class CPRankCoreAttention(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.register_buffer("cp_mask", None, persistent=False)  # model state, not an activation

        def forward(self, query, key, value, attention_mask, *args, **kwargs):
            sq = query.size(0)
            keys = key.repeat(cp, *([1] * (key.dim() - 1)))
            values = value.repeat(cp, *([1] * (value.dim() - 1)))
            if self.cp_mask is None or tuple(self.cp_mask.shape[-2:]) != (sq, keys.size(0)):
                chunk = sq // 2
                q_pos = torch.cat([torch.arange(chunk), torch.arange((2 * cp - 1) * chunk, 2 * cp * chunk)])
                self.cp_mask = (torch.arange(keys.size(0))[None, :] > q_pos[:, None])[None, None].to(query.device)
            return super().forward(query, keys, values, self.cp_mask, *args, **kwargs)

    CPRankCoreAttention.__name__ = f"CP{cp}{base.__name__}"
    return CPRankCoreAttention


def _recompute_targets(layer: torch.nn.Module, config) -> tuple[torch.nn.Module, ...]:
    """Modules whose forward megatron re-runs in backward (timed by hooks for ``recompute_ms``)."""
    if config.recompute_granularity == "full":
        return (layer,)
    if config.recompute_granularity != "selective":
        return ()
    attn = layer.self_attention
    names = {
        "core_attn": [attn.core_attention],
        "layernorm": [layer.input_layernorm, layer.pre_mlp_layernorm],
        "mlp": [layer.mlp], "moe": [layer.mlp],
        "shared_experts": [getattr(layer.mlp, "shared_experts", None)],
        "mla_up_proj": [getattr(attn, "linear_q_up_proj", None), getattr(attn, "linear_kv_up_proj", None)],
    }
    found: list[torch.nn.Module] = []
    for mod_name in config.recompute_modules:
        found += [m for m in names.get(mod_name, []) if m is not None and m not in found]
    # drop modules nested inside another target (their time is already inside the parent's)
    return tuple(m for m in found if not any(m is not p and m in set(p.modules()) for p in found))


def _extra_expert_params(layer: torch.nn.Module, shape: RankShape, distributed: bool) -> int:
    experts = getattr(layer.mlp, "experts", None)
    if not _builder_of(shape).experts or distributed or experts is None:
        return 0
    built = experts.num_local_experts
    per_expert = sum(p.numel() for p in experts.parameters()) // built
    return (built - shape.arch.num_experts // shape.ep) * per_expert


def _causal_mask(seq: int, device: torch.device) -> torch.Tensor:
    return torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=device), 1)[None, None]


@dataclass(frozen=True, kw_only=True)
class _BuildContext:
    """What a kind's builder needs besides the shape: the config and the sizes ``build_layer`` settled."""

    shape: RankShape
    config: Any
    use_te: bool
    sdpa: bool
    distributed: bool
    device: torch.device
    dtype: torch.dtype
    sp_split: int
    vocab: int


_Built = tuple[torch.nn.Module, Callable[[], dict[str, Any]], tuple[torch.nn.Module, ...], int, int]
"""(module, make_inputs, recompute targets, extra expert params, layers timed)."""


def _build_decoder(ctx: _BuildContext) -> _Built:
    """``dense`` / ``moe``: a ``TransformerBlock`` of ``timed_layers`` layers, no final norm."""
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.transformer.transformer_block import TransformerBlock

    shape, config, dev, a = ctx.shape, ctx.config, ctx.device, ctx.shape.arch
    tokens_seq, mbs = shape.local_seq, shape.micro_batch_size
    module = TransformerBlock(config, decoder_layer_spec(shape, config, ctx.use_te, sdpa=ctx.sdpa),
                             post_layer_norm=False)
    rope = None
    if not a.multi_latent_attention:
        rope = RotaryEmbedding(a.kv_channels, rotary_percent=1.0)(tokens_seq).to(dev)
    targets = tuple(t for layer in module.layers for t in _recompute_targets(layer, config))
    extra = sum(_extra_expert_params(layer, shape, ctx.distributed) for layer in module.layers)

    def make_inputs() -> dict[str, torch.Tensor | None]:
        x = torch.randn(tokens_seq // ctx.sp_split, mbs, a.hidden_size, device=dev, dtype=ctx.dtype)
        return {"hidden_states": x.requires_grad_(True), "attention_mask": _causal_mask(tokens_seq, dev),
                "rotary_pos_emb": rope}
    return module, make_inputs, targets, extra, config.num_layers


def _half_spec(spec, keep: str):
    """A GPT layer spec cut to the half a hybrid stack's layer holds (``mamba_stack_spec``): ``attention``
    (input norm + self-attention) or ``mlp`` (pre-MLP norm + MLP / MoE); the other half's modules are
    megatron-core's identities, as the hybrid spec leaves them."""
    from megatron.core.transformer.identity_op import IdentityFuncOp, IdentityOp

    sub = spec.submodules
    if keep == "attention":
        sub.pre_mlp_layernorm, sub.mlp, sub.mlp_bda = IdentityOp, IdentityOp, IdentityFuncOp
    else:
        sub.input_layernorm, sub.self_attention, sub.self_attn_bda = IdentityOp, IdentityOp, IdentityFuncOp
    return spec


def _build_half(ctx: _BuildContext) -> _Built:
    """``hybrid_attention`` / ``hybrid_mlp`` / ``hybrid_moe``: one hybrid-stack ``TransformerLayer`` half."""
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.transformer.transformer_block import TransformerBlock

    shape, config, dev, a = ctx.shape, ctx.config, ctx.device, ctx.shape.arch
    keep = _builder_of(shape).half
    spec = _half_spec(decoder_layer_spec(shape, config, ctx.use_te, sdpa=ctx.sdpa), keep)
    module = TransformerBlock(config, spec, post_layer_norm=False)
    rope = None
    if keep == "attention" and not a.multi_latent_attention:
        rope = RotaryEmbedding(a.kv_channels, rotary_percent=1.0)(shape.local_seq).to(dev)
    extra = sum(_extra_expert_params(layer, shape, ctx.distributed) for layer in module.layers)

    def make_inputs() -> dict[str, torch.Tensor | None]:
        x = torch.randn(shape.local_seq // ctx.sp_split, shape.micro_batch_size, a.hidden_size, device=dev,
                        dtype=ctx.dtype)
        return {"hidden_states": x.requires_grad_(True), "attention_mask": _causal_mask(shape.local_seq, dev),
                "rotary_pos_emb": rope}
    return module, make_inputs, (), extra, config.num_layers


def _build_embedding(ctx: _BuildContext) -> _Built:
    """``embedding``: ``LanguageModelEmbedding`` (rope: no position table)."""
    from megatron.core.models.common.embeddings.language_model_embedding import LanguageModelEmbedding

    shape, dev, vocab = ctx.shape, ctx.device, ctx.vocab
    tokens_seq, mbs = shape.local_seq, shape.micro_batch_size
    module = LanguageModelEmbedding(ctx.config, vocab_size=vocab, max_sequence_length=tokens_seq,
                                    position_embedding_type="rope")

    def make_inputs() -> dict[str, torch.Tensor | None]:
        ids = torch.randint(0, vocab, (mbs, tokens_seq), device=dev)
        pos = torch.arange(tokens_seq, device=dev).expand(mbs, tokens_seq)
        return {"input_ids": ids, "position_ids": pos}
    return module, make_inputs, (), 0, 1


def _build_output(ctx: _BuildContext) -> _Built:
    """``output``: final norm + output layer + vocab-parallel cross entropy (``OutputLayerWithLoss``)."""
    shape, dev, vocab = ctx.shape, ctx.device, ctx.vocab
    tokens_seq, mbs = shape.local_seq, shape.micro_batch_size
    module = OutputLayerWithLoss(ctx.config, vocab, use_te=ctx.use_te)

    def make_inputs() -> dict[str, torch.Tensor | None]:
        x = torch.randn(tokens_seq // ctx.sp_split, mbs, shape.arch.hidden_size, device=dev, dtype=ctx.dtype)
        labels = torch.randint(0, vocab, (mbs, tokens_seq), device=dev)
        return {"hidden_states": x.requires_grad_(True), "labels": labels}
    return module, make_inputs, (), 0, 1


def _local_norm(config) -> type:
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    from primus_ext.measure.shims import SPTorchNorm

    return SPTorchNorm if config.sequence_parallel else WrappedTorchNorm


def mamba_layer_spec(config, *, use_te: bool, d_conv: int = 4, chunk_size: int = 128):
    """megatron-core's ``mamba_stack_spec`` ``mamba_layer`` (models/mamba/mamba_layer_specs.py@0.16.1): TE fuses the
    norm into ``in_proj`` (``TELayerNormColumnParallelLinear``); the local form keeps it as the layer's ``norm``
    in front of a ``ColumnParallelLinear`` (same parameters). Call after ``mamba_stubs.mamba_modules()``."""
    from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
    from megatron.core.ssm.mamba_layer import MambaLayer, MambaLayerSubmodules
    from megatron.core.ssm.mamba_mixer import MambaMixer, MambaMixerSubmodules
    from megatron.core.transformer.identity_op import IdentityOp
    from megatron.core.transformer.spec_utils import ModuleSpec

    if use_te:
        from megatron.core.extensions.transformer_engine import TELayerNormColumnParallelLinear, TERowParallelLinear

        in_proj, out_proj, norm = TELayerNormColumnParallelLinear, TERowParallelLinear, IdentityOp
    else:
        from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear

        in_proj, out_proj, norm = ColumnParallelLinear, RowParallelLinear, _local_norm(config)
    mixer = ModuleSpec(module=MambaMixer, params={"d_conv": d_conv, "chunk_size": chunk_size},
                       submodules=MambaMixerSubmodules(in_proj=in_proj, out_proj=out_proj))
    return ModuleSpec(module=MambaLayer, submodules=MambaLayerSubmodules(
        norm=norm, mixer=mixer, mamba_bda=get_bias_dropout_add))


def _build_mamba(ctx: _BuildContext) -> _Built:
    """``mamba``: one megatron-core ``MambaLayer`` at per-rank sizes (heads and groups / TP in a one-rank world).
    Without mamba_ssm / causal_conv1d (a CPU) it builds with its real parameters and its forward raises
    ``NotImplementedError``: the measurement falls back to the analytic cost (``mamba_stubs``)."""
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.spec_utils import build_module

    from primus_ext.measure.mamba_stubs import mamba_modules

    mamba_modules()
    shape, config, dev, a = ctx.shape, ctx.config, ctx.device, ctx.shape.arch
    split = 1 if ctx.distributed else shape.tp
    config.mamba_num_heads = a.mamba_num_heads // split
    config.mamba_head_dim = a.mamba_head_dim
    config.mamba_num_groups = a.mamba_num_groups // split
    config.mamba_state_dim = a.mamba_state_dim
    spec = mamba_layer_spec(config, use_te=ctx.use_te, d_conv=a.mamba_d_conv, chunk_size=a.mamba_chunk_size)
    groups = ProcessGroupCollection.use_mpu_process_groups()
    module = build_module(spec, config=config, layer_number=1, pg_collection=groups)

    def make_inputs() -> dict[str, torch.Tensor | None]:
        x = torch.randn(shape.local_seq // ctx.sp_split, shape.micro_batch_size, a.hidden_size, device=dev,
                        dtype=ctx.dtype)
        return {"hidden_states": x.requires_grad_(True)}
    return module, make_inputs, (), 0, 1


@dataclass(frozen=True, kw_only=True)
class KindBuilder:
    """How ``build_layer`` builds one layer kind (torch-side, so kept here rather than on ``model.kinds.Kind``)."""

    build: Callable[[_BuildContext], _Built]
    experts: bool = False
    """Built with routed experts: the MoE config keys, the expert groups, the ``moe`` recompute modules."""
    half: str = ""
    """A hybrid stack's half layer: ``attention`` or ``mlp`` kept (``_build_half``)."""


BUILDERS: dict[str, KindBuilder] = {
    "dense": KindBuilder(build=_build_decoder),
    "moe": KindBuilder(build=_build_decoder, experts=True),
    "embedding": KindBuilder(build=_build_embedding),
    "output": KindBuilder(build=_build_output),
    "mamba": KindBuilder(build=_build_mamba),
    "hybrid_attention": KindBuilder(build=_build_half, half="attention"),
    "hybrid_mlp": KindBuilder(build=_build_half, half="mlp"),
    "hybrid_moe": KindBuilder(build=_build_half, experts=True, half="mlp"),
}
"""Registry name (``primus_ext.model.kinds.known_kinds()``) -> its builder: the built-in kinds'; a kind with a
``Kind.builder`` of its own is added on first use (``kind_builder``)."""


def kind_builder(name: str) -> KindBuilder | None:
    """The builder of the kind called ``name``: ``BUILDERS``', else the one its ``Kind.builder`` names (imported
    once); ``None`` for a kind with neither."""
    found = BUILDERS.get(name)
    if found is None:
        import importlib

        from primus_ext.model.kinds.registry import UnknownKind, get_kind

        try:
            path = get_kind(name).builder
        except UnknownKind:
            return None
        if path:
            module, _, attr = path.partition(":")
            found = BUILDERS[name] = getattr(importlib.import_module(module), attr)
    return found


class OutputLayerWithLoss(torch.nn.Module):
    """The last stage's tail as ``GPTModel`` runs it: final norm -> output layer -> CE loss [b, s]."""

    def __init__(self, config, vocab_size: int, *, use_te: bool):
        super().__init__()
        from megatron.core import tensor_parallel
        from megatron.core.transformer.torch_norm import WrappedTorchNorm

        from primus_ext.measure.shims import SPTorchNorm

        norm_cls: Any = SPTorchNorm if config.sequence_parallel else WrappedTorchNorm
        if use_te:
            from megatron.core.extensions.transformer_engine import TENorm

            norm_cls = TENorm
        self.final_layernorm = norm_cls(config=config, hidden_size=config.hidden_size,
                                        eps=config.layernorm_epsilon)
        self.output_layer = tensor_parallel.ColumnParallelLinear(
            config.hidden_size, vocab_size, config=config, init_method=config.init_method, bias=False,
            skip_bias_add=False, gather_output=False)
        self._cross_entropy = tensor_parallel.vocab_parallel_cross_entropy

    def forward(self, hidden_states: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits, _ = self.output_layer(self.final_layernorm(hidden_states))
        loss = self._cross_entropy(logits, labels.transpose(0, 1).contiguous())
        return loss.transpose(0, 1).contiguous()

