"""The decoder-layer kinds: ``dense`` (attention + MLP) and ``moe`` (attention + routed experts).

Both are megatron-core ``TransformerLayer``s: recomputable, attending, captured by per-layer CUDA graphs. The
formulas live where they always did (``model.params``, ``model.roofline``, ``model.memory.activations``); these
classes choose which apply.
"""

from __future__ import annotations

from primus_ext.model import params as P
from primus_ext.model import roofline as R
from primus_ext.model.kinds.base import Kind, KindComm
from primus_ext.model.memory import activations as A
from primus_ext.model.rank_shape import layer_arch


class DecoderKind(Kind):
    """What the two decoder kinds share: norms, attention, residuals, recompute; the MLP block is theirs."""

    decoder_layer = True
    recomputable = True
    attention = True
    layer_graph = True
    lora_adapters = True

    def mlp_params(self, shape) -> int:
        """The MLP block's parameters, without its norm."""
        raise NotImplementedError

    def params(self, shape, *, impl="te") -> int:
        return P.decoder_params(shape, self.mlp_params(shape), impl=impl)

    def roofline(self, parts, shape, gpu) -> None:
        R.attention_parts(parts, shape, gpu)
        self._mlp_roofline(parts, shape, gpu)
        R.norm_residual_parts(parts, shape, gpu)

    def _mlp_roofline(self, parts, shape, gpu) -> None:
        raise NotImplementedError

    def fwd_flops_estimate(self, shape) -> float:
        a = shape.arch
        flops = self._gemm_flops(shape)
        q_dim = a.qk_head_dim + a.qk_pos_emb_head_dim if a.multi_latent_attention else a.kv_channels
        v_dim = a.v_head_dim if a.multi_latent_attention else a.kv_channels
        heads = a.num_attention_heads // shape.tp
        flops += 2.0 * shape.micro_batch_size * shape.local_seq**2 * heads * (q_dim + v_dim)
        return flops * shape.timed_layers  # a window pattern's whole period is built and run

    def _gemm_flops(self, shape) -> float:
        raise NotImplementedError


class DenseKind(DecoderKind):
    """``dense``: a transformer layer with a dense MLP."""

    name = "dense"

    def present(self, model) -> bool:  # a GPT model's layers that ``moe_layer_pattern`` leaves dense
        return not model.hybrid_layer_pattern and model.num_dense_layers > 0

    def layer_arch(self, model, execution):
        return layer_arch(model, moe=False)

    def mlp_params(self, shape) -> int:
        return P.dense_mlp_params(shape)

    def _mlp_roofline(self, parts, shape, gpu) -> None:
        R.dense_mlp_parts(parts, shape, gpu)

    def op_sac_gemms_s(self, shape, gpu):
        # torchtitan's call order is known for a Llama block only (analytic.op_sac_recompute_s)
        return None if shape.arch.multi_latent_attention else R.dense_op_sac_gemms(shape, gpu)

    def _gemm_flops(self, shape) -> float:
        return 2.0 * shape.tokens * (P.attention_params(shape) + P.dense_mlp_params(shape))

    def saved(self, shape, impl) -> dict[str, float]:
        parts = A.decoder_saved(shape, impl, mlp_input_fp8=True)
        parts.update(A.dense_mlp_saved(shape, impl))
        return parts

    def saved_selective(self, shape, impl, parts):
        # TE fuses the pre-MLP norm into fc1 (TELayerNormColumnParallelLinear): no module of its own
        mlp_norm_separate = not impl.fused_input_norm
        modules, residual = A.selective_decoder(shape, impl, parts, mlp_norm_separate=mlp_norm_separate)
        if "mlp" in modules:
            parts["mlp_act"] = parts["mlp_fc2_in"] = 0.0
            if not mlp_norm_separate:  # TE: the checkpoint starts at the fused norm's input
                parts["pre_mlp_norm"], parts["pre_mlp_norm_out"] = residual, 0.0
        return parts

    def comm(self, shape, sequence_parallel) -> KindComm:
        return KindComm(pairs=(("attn", "tp"), ("mlp", "tp")), parts=frozenset(("attn", "mlp", "cp")))


class MoEKind(DecoderKind):
    """``moe``: a transformer layer whose MLP is a router + routed experts (+ shared experts)."""

    name = "moe"
    routed_experts = True

    def present(self, model) -> bool:
        return not model.hybrid_layer_pattern and model.num_moe_layers > 0

    def layer_arch(self, model, execution):
        return layer_arch(model, moe=True)

    def mlp_params(self, shape) -> int:
        return P.moe_mlp_params(shape)

    def expert_params(self, shape) -> int:
        return P.expert_params(shape)

    def router_params(self, shape) -> int:
        return P.router_params(shape)

    def expert_split(self, shape) -> tuple[int, int]:
        return shape.ep, shape.etp

    def _mlp_roofline(self, parts, shape, gpu) -> None:
        R.moe_mlp_parts(parts, shape, gpu)

    def overhead_s(self, shape, gpu) -> float:
        # the router's host synchronisation, unless a full-iteration graph removes it (ExecutionSpec.cuda_graph)
        return gpu.efficiency.moe_layer_overhead_s if shape.cuda_graph != "full_iteration" else 0.0

    def _gemm_flops(self, shape) -> float:
        per_expert = P.expert_params(shape) / max(1, shape.local_experts)
        gemm = (P.attention_params(shape) + P.router_params(shape) + P.shared_expert_params(shape)
                + P.latent_proj_params(shape))
        return 2.0 * shape.tokens * gemm + 2.0 * shape.routed_tokens_per_rank * per_expert

    def saved(self, shape, impl) -> dict[str, float]:
        parts = A.decoder_saved(shape, impl, mlp_input_fp8=False)  # as before: kept at the activation width
        parts.update(A.moe_saved(shape, impl))
        return parts

    def saved_selective(self, shape, impl, parts):
        # the MoE layer's pre-MLP norm is a module of its own in both specs
        modules, _ = A.selective_decoder(shape, impl, parts, mlp_norm_separate=True)
        return drop_recomputed_moe(modules, parts)

    def comm(self, shape, sequence_parallel) -> KindComm:
        pairs = [("attn", "tp")]
        if shape.etp > 1:
            pairs.append(("etp", "etp"))
        if shape.arch.moe_shared_expert_intermediate_size and shape.tp > 1:
            pairs.append(("shared", "tp"))
        return KindComm(pairs=tuple(pairs), parts=frozenset(("attn", "etp", "shared", "cp", "ep")), ep=True)


KINDS = (DenseKind(), MoEKind())
"""What the registry registers from this module (``kinds.registry``)."""


def drop_recomputed_moe(modules: object, parts: dict[str, float]) -> dict[str, float]:
    """``parts`` without the MoE tensors that selective recompute of ``modules`` rebuilds instead of saving
    (megatron-core 0.16.1 ``recompute_modules``: moe, moe_act, shared_experts)."""
    if "moe" in modules:
        for name in ("router", "experts", "experts_fc2_in", "shared_experts", "latent_proj"):
            parts[name] = 0.0
    if "moe_act" in modules:
        parts["experts_fc2_in"] = 0.0
    if "shared_experts" in modules:
        parts["shared_experts"] = 0.0
    return parts
