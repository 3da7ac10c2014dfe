"""Model FLOPs: the "model TFLOP/s" convention of Megatron-LM / NeMo / Megatron-Bridge.

    >>> from primus_ext.model.flops import model_flops_per_token
    >>> flops = model_flops_per_token(model, seq_length=8192)      # fwd + bwd, per token
    >>> tflops_per_gpu = flops * tokens_per_s_per_gpu / 1e12

Convention (model FLOPs, not hardware FLOPs: recompute is NOT counted, every GEMM is counted three
times: forward, backward data-grad, backward weight-grad; one multiply-add = 2 FLOPs):

    FLOPs/token = 3 * 2 * [ sum over decoder layers (attention linear MACs + core attention MACs
                            + MLP MACs) + MTP layers + h * V_padded * (1 + mtp_layers) ]

per layer (h hidden, a heads, g query groups, d kv_channels, s sequence length):
  * GQA/MHA linear: q h*a*d, k+v 2*h*g*d, out a*d*h            (Megatron ``attn_layer_flops``)
  * core attention: s*a*d (QK^T) + s*a*d (AV), halved when causal -> s*a*d in total
  * MLA (DeepSeek): q (lora or full), kv down h*(kv_lora+d_rope), kv up kv_lora*a*(d_qk+d_v),
    out a*d_v*h; core s*a*(d_qk+d_rope)/2 + s*a*d_v/2
  * MLP: h*ffn*(3 if gated else 2); MoE layer: topk routed experts + shared experts (router and
    norms are not counted, as in both sources)
  * MTP layer (DeepSeek-V3): one more MoE layer + eh projection 2h*h + its own logits.

Sources: Megatron-LM ``megatron/training/training.py:num_floating_point_operations`` (core_r0.13+,
causal attention halved, MLA term), NeMo ``nemo/utils/flops_formulas.py`` (llama3, deepseekv3) and
Narayanan et al. 2021 (arXiv:2104.04473) appendix, eq. 72*B*s*l*h^2*(1 + s/(6h) + V/(12hl)) for
GPT with 4h MLP and full (non-causal) attention: ``causal=False`` reproduces that paper's figure.
Megatron-Bridge's published "Model TFLOP/s/GPU" / tokens/s/GPU equals this per-token count within
0.1 % (tests/model/test_flops.py). The per-layer terms are ``model.macs``' (a leaf the kinds use); a hybrid model's
come from its kinds (``Kind.model_macs``), so this module sits above the kind registry. Pure and torch-free.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

from primus_ext.model import macs
from primus_ext.model.kinds.registry import get_kind, pattern_kinds
from primus_ext.specs import ModelSpec

PASSES_FWD_BWD = 3
"""Forward + backward data-grad + backward weight-grad GEMMs (Narayanan et al. 2021, appendix)."""


@dataclass(frozen=True, kw_only=True)
class FlopsBreakdown:
    """Forward+backward model FLOPs per token, split by part (sum = ``total``)."""

    attention_linear: float
    attention_core: float
    mlp: float
    logits: float
    mtp_extra: float = 0.0
    mamba: float = 0.0
    """A hybrid model's Mamba-2 mixers (projections, conv1d, SSD scan: ``model.hybrid.layer_flops``)."""

    @property
    def total(self) -> float:
        return self.attention_linear + self.attention_core + self.mlp + self.logits + self.mtp_extra + self.mamba


FROZEN_WEIGHT_PASSES = 2
"""GEMMs with frozen weights (LoRA fine-tuning, ``model.lora``): forward + backward data-grad; no weight-grad."""


def flops_breakdown(model: ModelSpec, seq_length: int, *, causal: bool = True,
                    frozen_weights: bool = False) -> FlopsBreakdown:
    """Forward+backward model FLOPs per token by part (see the module docstring for the formula).

    ``frozen_weights``: every weight is frozen (LoRA): the weight GEMMs count twice (forward, data-grad), the
    core attention, which has no weights, still three times; the adapters' own small GEMMs are not counted,
    as model FLOPs count the model's GEMMs only."""
    scale = (FROZEN_WEIGHT_PASSES if frozen_weights else PASSES_FWD_BWD) * macs.FLOPS_PER_MAC
    core_scale = PASSES_FWD_BWD * macs.FLOPS_PER_MAC
    if model.hybrid_layer_pattern:
        return _hybrid_breakdown(model, seq_length, scale, core_scale, causal)
    n_moe, n_dense = model.num_moe_layers, model.num_dense_layers
    mtp = model.mtp_num_layers
    per_layer_attn = macs.attention_linear_macs(model)
    per_layer_core = macs.attention_core_macs(model, seq_length, causal=causal)
    moe = macs.moe_mlp_macs(model) if model.is_moe else 0.0
    mtp_mlp = moe if model.is_moe else macs.dense_mlp_macs(model)
    mtp_extra = mtp * (2 * model.hidden_size * model.hidden_size)  # eh projection [emb; hidden] -> h
    return FlopsBreakdown(
        attention_linear=scale * per_layer_attn * (model.num_layers + mtp),
        attention_core=core_scale * per_layer_core * (model.num_layers + mtp),
        mlp=scale * (n_dense * macs.dense_mlp_macs(model) + n_moe * moe + mtp * mtp_mlp),
        logits=scale * macs.logits_macs(model) * (1 + mtp),
        mtp_extra=scale * mtp_extra,
    )


def _hybrid_breakdown(model: ModelSpec, seq_length: int, scale: float, core_scale: float,
                      causal: bool) -> FlopsBreakdown:
    """A hybrid model: each layer symbol's kind gives its forward MACs per token (``Kind.model_macs``: attention on
    ``*``, a dense MLP on ``-``, an MoE block on ``E``, a Mamba-2 mixer on ``M``), times its count in the pattern."""
    parts = {f.name: 0 if f.default is MISSING else f.default for f in fields(FlopsBreakdown)}
    # each MTP depth: its layers (mtp_layer_pattern) and a loss head; no eh_proj term, as Megatron-LM's hybrid
    # formula (training.py hybrid_flops @d98e8a64: pattern counts += depths, logits x (1 + mtp_num_layers))
    mtp = model.mtp_num_layers if model.mtp_layer_pattern else 0
    parts["logits"] = scale * macs.logits_macs(model) * (1 + mtp)
    for symbol, kind in pattern_kinds(model.hybrid_layer_pattern).items():
        count = model.hybrid_layer_pattern.count(symbol) + mtp * model.mtp_layer_pattern.count(symbol)
        for part, part_macs in get_kind(kind).model_macs(model, seq_length, causal).items():
            if part not in parts:
                raise ValueError(f"layer kind {kind}: model_macs part {part!r} is not a FlopsBreakdown field "
                                 f"({', '.join(parts)})")
            parts[part] += (core_scale if part == "attention_core" else scale) * part_macs * count
    return FlopsBreakdown(**parts)


def model_flops_per_token(model: ModelSpec, seq_length: int, *, causal: bool = True,
                          frozen_weights: bool = False) -> float:
    """Forward+backward model FLOPs per trained token."""
    return flops_breakdown(model, seq_length, causal=causal, frozen_weights=frozen_weights).total


def model_flops_per_step(model: ModelSpec, seq_length: int, global_batch_size: int, *, causal: bool = True,
                         frozen_weights: bool = False) -> float:
    """Model FLOPs of one optimizer step (GBS sequences of ``seq_length`` tokens)."""
    per_token = model_flops_per_token(model, seq_length, causal=causal, frozen_weights=frozen_weights)
    return per_token * seq_length * global_batch_size


__all__ = ["FlopsBreakdown", "flops_breakdown", "model_flops_per_step", "model_flops_per_token"]
