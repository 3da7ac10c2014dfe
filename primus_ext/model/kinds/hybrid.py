"""The non-Mamba layers of a hybrid model (megatron-core 0.16.1 models/mamba/mamba_layer_specs.py
``mamba_stack_spec``): each is half a GPT layer, its own one of ``num_layers``.

* ``hybrid_attention`` (``*``): ``TransformerLayer`` with input norm + self-attention, no MLP;
* ``hybrid_mlp`` (``-``): ``MLPLayer`` with pre-MLP norm + dense MLP, no attention;
* ``hybrid_moe`` (``E``): ``MoETransformerLayer`` with pre-MLP norm + MoE block, no attention.

A ``*`` and a ``-`` together hold and cost what one ``dense`` layer does (likewise ``*`` + ``E`` and ``moe``):
the formulas are the decoder kinds', split at the pre-MLP norm. Selective recompute applies (``recomputable``):
its modules are checkpointed inside ``TransformerLayer`` / ``MoELayer`` themselves; full recompute does not:
``MambaStack`` has no layer-checkpointing path (ssm/mamba_block.py@0.16.1), so ``rank_shape`` never asks for it.
"""

from __future__ import annotations

from primus_ext.model import hybrid as Hy
from primus_ext.model import macs
from primus_ext.model import params as P
from primus_ext.model import roofline as R
from primus_ext.model.kinds.base import Kind, KindComm, no_recompute
from primus_ext.model.kinds.decoder import MoEKind, drop_recomputed_moe
from primus_ext.model.memory import activations as A
from primus_ext.model.rank_shape import layer_arch


def norm_residual_half(parts, shape, gpu) -> None:
    """One norm and one residual add (a GPT layer has two of each: ``roofline.norm_residual_parts``)."""
    rows = shape.tokens / shape.tp if shape.sequence_parallel else shape.tokens
    h = shape.arch.hidden_size
    norm = R.membound_seconds(R.NORM_PASSES * rows * h * R.ACT_BYTES, gpu)
    parts.other("layernorm", norm, R.MEMBOUND_BWD_FACTOR * norm)
    residual = R.membound_seconds(3 * rows * h * R.ACT_BYTES, gpu)  # read 2, write 1
    parts.other("residual", residual, residual)


def _norm(shape) -> int:
    return P.norm_params(shape.arch, shape.arch.hidden_size)


def _residual(shape) -> float:
    """A checkpoint's input: the residual stream (``activations.selective_decoder``)."""
    sp = shape.tp if shape.sequence_parallel and shape.tp > 1 else 1
    return A.element_bytes(shape.precision) * shape.tokens / sp * shape.arch.hidden_size


def _modules(shape) -> set[str]:
    return set(shape.recompute_modules or ("core_attn",))


def _pre_mlp_saved(shape, impl, *, fp8_input: bool) -> dict[str, float]:
    """The pre-MLP norm's saved bytes (``activations.decoder_saved``'s last two parts)."""
    parts = A.decoder_saved(shape, impl, mlp_input_fp8=fp8_input)
    return {"pre_mlp_norm": parts["pre_mlp_norm"], "pre_mlp_norm_out": parts["pre_mlp_norm_out"]}


class HalfLayer(Kind):
    """What the three share: placed by their symbol (``Kind.present``), the model's arch (its MoE block's for
    ``E``), selective recompute only (inside ``TransformerLayer`` / ``MoELayer``; no full recompute in a
    ``MambaStack``)."""

    def layer_arch(self, model, execution):
        return layer_arch(model, moe=False)

    def shape_fields(self, fields: dict) -> dict:
        return dict(fields, selective_ac="modules") if fields["recompute"] == "selective" else no_recompute(fields)


class HybridAttentionKind(HalfLayer):
    """``hybrid_attention``: input norm + self-attention (GQA or MLA) + residual."""

    name = "hybrid_attention"
    symbol = Hy.ATTENTION
    decoder_layer = True
    recomputable = True
    attention = True
    layer_graph = True

    def params(self, shape, *, impl="te") -> int:
        return _norm(shape) + P.attention_params(shape, impl=impl)

    def roofline(self, parts, shape, gpu) -> None:
        R.attention_parts(parts, shape, gpu)
        norm_residual_half(parts, shape, gpu)

    def fwd_flops_estimate(self, shape) -> float:
        a = shape.arch
        q_dim = a.qk_head_dim + a.qk_pos_emb_head_dim if a.multi_latent_attention else a.kv_channels
        v_dim = a.v_head_dim if a.multi_latent_attention else a.kv_channels
        core = 2.0 * shape.micro_batch_size * shape.local_seq**2 * shape.local_heads * (q_dim + v_dim)
        return 2.0 * shape.tokens * P.attention_params(shape) + core

    def saved(self, shape, impl) -> dict[str, float]:
        parts = A.decoder_saved(shape, impl, mlp_input_fp8=False)
        del parts["pre_mlp_norm"], parts["pre_mlp_norm_out"]
        return parts

    def saved_selective(self, shape, impl, parts):
        A.selective_decoder(shape, impl, parts, mlp_norm_separate=False)  # no MLP half
        return parts

    def comm(self, shape, sequence_parallel) -> KindComm:
        return KindComm(pairs=(("attn", "tp"),), parts=frozenset(("attn", "cp")))

    def model_macs(self, model, seq_length, causal) -> dict[str, float]:
        return {"attention_linear": macs.attention_linear_macs(model),
                "attention_core": macs.attention_core_macs(model, seq_length, causal=causal)}


class HybridMLPKind(HalfLayer):
    """``hybrid_mlp``: pre-MLP norm + dense MLP + residual."""

    name = "hybrid_mlp"
    symbol = Hy.MLP
    decoder_layer = True
    recomputable = True
    layer_graph = True

    def params(self, shape, *, impl="te") -> int:
        return _norm(shape) + P.dense_mlp_params(shape)

    def roofline(self, parts, shape, gpu) -> None:
        R.dense_mlp_parts(parts, shape, gpu)
        norm_residual_half(parts, shape, gpu)

    def fwd_flops_estimate(self, shape) -> float:
        return 2.0 * shape.tokens * P.dense_mlp_params(shape)

    def saved(self, shape, impl) -> dict[str, float]:
        parts = _pre_mlp_saved(shape, impl, fp8_input=True)
        parts.update(A.dense_mlp_saved(shape, impl))
        return parts

    def saved_selective(self, shape, impl, parts):
        # as the dense kind's MLP half: TE fuses the pre-MLP norm into fc1, the local spec keeps it separate
        modules, separate = _modules(shape), not impl.fused_input_norm
        if "layernorm" in modules and separate:
            parts["pre_mlp_norm"], parts["pre_mlp_norm_out"] = _residual(shape), 0.0
        if "mlp" in modules:
            parts["mlp_act"] = parts["mlp_fc2_in"] = 0.0
            if not separate:  # TE: the checkpoint starts at the fused norm's input
                parts["pre_mlp_norm"], parts["pre_mlp_norm_out"] = _residual(shape), 0.0
        return parts

    def comm(self, shape, sequence_parallel) -> KindComm:
        return KindComm(pairs=(("mlp", "tp"),), parts=frozenset(("mlp",)))

    def model_macs(self, model, seq_length, causal) -> dict[str, float]:
        return {"mlp": macs.dense_mlp_macs(model)}


class HybridMoEKind(HalfLayer, MoEKind):
    """``hybrid_moe``: pre-MLP norm + router / routed experts / shared experts + residual (the MoE kind's expert
    split, router and host-sync overhead)."""

    name = "hybrid_moe"
    symbol = Hy.MOE
    attention = False

    present = Kind.present  # by its symbol, not by ``moe_layer_pattern`` as the moe kind

    def layer_arch(self, model, execution):
        return layer_arch(model, moe=True)
    lora_adapters = False

    def params(self, shape, *, impl="te") -> int:
        return _norm(shape) + P.moe_mlp_params(shape)

    def roofline(self, parts, shape, gpu) -> None:
        R.moe_mlp_parts(parts, shape, gpu)
        norm_residual_half(parts, shape, gpu)

    def fwd_flops_estimate(self, shape) -> float:
        per_expert = P.expert_params(shape) / max(1, shape.local_experts)
        gemm = P.router_params(shape) + P.shared_expert_params(shape)
        return 2.0 * shape.tokens * gemm + 2.0 * shape.routed_tokens_per_rank * per_expert

    def saved(self, shape, impl) -> dict[str, float]:
        parts = _pre_mlp_saved(shape, impl, fp8_input=False)
        parts.update(A.moe_saved(shape, impl))
        return parts

    def saved_selective(self, shape, impl, parts):
        # the MoE layer's pre-MLP norm is a module of its own in both specs; the MoE modules as the moe kind's
        modules = _modules(shape)
        if "layernorm" in modules:
            parts["pre_mlp_norm"], parts["pre_mlp_norm_out"] = _residual(shape), 0.0
        return drop_recomputed_moe(modules, parts)

    def comm(self, shape, sequence_parallel) -> KindComm:
        full = super().comm(shape, sequence_parallel)
        return KindComm(pairs=tuple(p for p in full.pairs if p[0] != "attn"), parts=full.parts - {"attn", "cp"},
                        ep=True)

    def model_macs(self, model, seq_length, causal) -> dict[str, float]:
        return {"mlp": macs.moe_mlp_macs(model)}


KINDS = (HybridAttentionKind(), HybridMLPKind(), HybridMoEKind())
"""What the registry registers from this module (``kinds.registry``)."""
