"""Per-rank shapes: what one GPU of the target run computes for one layer and one micro-batch.

Two configurations with the same per-rank shape cost the same compute, whatever their PP, DP or
node count (docs/DESIGN.md "Terms"). ``model.layers.rank_shapes(model, execution)`` collapses a model into the
distinct layer kinds one rank executes (each kind builds its shape: ``Kind.shape``); each is measured (or modelled)
once.

A leaf of the model layer: it imports no layer kind (the kinds import it), so a shape carries the traits of its
kind that its own properties need (``attention``) instead of looking the kind up. Pure and torch-free: this sits on
the tuner's hot path.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from primus_ext.specs import ExecutionSpec, ModelSpec
from primus_ext.specs.execution import AttentionKernel, CudaGraph, Fp4Recipe, Fp8Recipe
from primus_ext.specs.model import GATED_ACTIVATIONS

LayerKind = str
"""A registered layer kind's name (``model.kinds``: "dense", "moe", "embedding", "output", a hybrid model's
"mamba", "hybrid_attention", "hybrid_mlp", "hybrid_moe", and any kind registered after them)."""
Recompute = Literal["none", "selective", "full"]

DEFAULT_MOE_IMBALANCE = 1.0
"""Max-over-mean tokens per expert. 1.0 = balanced routing (NVIDIA's published MoE rows use
force-balanced routing, shared/validation/README); raise it for learned routers."""


@dataclass(frozen=True, kw_only=True)
class LayerArch:
    """Global (unsharded) architecture of one layer kind: enough to build the real module."""

    hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    ffn_hidden_size: int
    """Dense MLP intermediate size (0 for an MoE layer's MLP, which uses experts instead)."""
    activation: str = "swiglu"
    normalization: str = "RMSNorm"
    add_bias_linear: bool = False
    add_qkv_bias: bool = False
    qk_layernorm: bool = False
    window_size: tuple[int, int] | None = None
    window_attn_skip_freq: int = 0
    """Every N-th layer attends fully (0: all use the window); costs average over the pattern."""
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_head_dim: int = 0
    qk_pos_emb_head_dim: int = 0
    v_head_dim: int = 0
    num_experts: int = 0
    moe_router_topk: int = 0
    moe_ffn_hidden_size: int = 0
    moe_shared_expert_intermediate_size: int = 0
    moe_latent_size: int = 0
    """``ModelSpec.moe_latent_size``: the routed experts' input / output width (0 = hidden)."""
    moe_shared_expert_gate: bool = False
    """``ModelSpec.moe_shared_expert_gate``: a ``1 x hidden`` gate weight beside the shared experts."""
    moe_router_num_groups: int = 0
    """Group-limited routing (``ModelSpec.moe_router_num_groups``); 0 = none or a dense kind."""
    moe_router_group_topk: int = 0
    """Groups a token may route to (``ModelSpec.moe_router_group_topk``); 0 = unrestricted."""
    vocab_size: int = 0
    """Padded vocabulary (embedding / output kinds only)."""
    mamba_num_heads: int = 0
    """Mamba-2 mixer heads H (resolved: ``model.hybrid.mamba_num_heads``); 0 for every other kind."""
    mamba_head_dim: int = 0
    """Channels per Mamba head P (d_inner = H * P)."""
    mamba_num_groups: int = 0
    """B / C groups G (heads share a group's B and C)."""
    mamba_state_dim: int = 0
    """SSM state width N."""
    mamba_d_conv: int = 0
    """Causal conv1d taps K."""
    mamba_chunk_size: int = 0
    """SSD chunk length Q."""
    dims: Any = None
    """The kind's own hyper-parameters (``model.kinds.base.KindDims``, from ``Kind.layer_arch``); ``None`` for a kind
    that reads only the shared fields above."""

    @property
    def gated(self) -> bool:
        """True when the MLP's first projection is doubled (gate + up), as ``ModelSpec.gated``."""
        return self.activation in GATED_ACTIVATIONS

    @property
    def expert_width(self) -> int:
        """Width of a routed token in the experts and on the EP wire: ``moe_latent_size`` under latent MoE, else
        hidden (megatron-core moe_layer.py ``fc1_latent_proj`` runs before dispatch; token_dispatcher.py sizes its
        buffers ``moe_latent_size or hidden_size``)."""
        return self.moe_latent_size or self.hidden_size


_KEY_OPTIONAL_ARCH = ("moe_router_num_groups", "moe_router_group_topk", "moe_shared_expert_gate", "moe_latent_size",
                      "mamba_num_heads",
                      "mamba_head_dim", "mamba_num_groups", "mamba_state_dim", "mamba_d_conv", "mamba_chunk_size",
                      "dims")
"""``LayerArch`` fields left out of ``RankShape.key()`` while 0 (added after timing stores existed)."""


@dataclass(frozen=True, kw_only=True)
class RankShape:
    """One layer kind as one rank runs it: global arch + the parallel split + the micro-batch."""

    kind: LayerKind
    arch: LayerArch
    tp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    sequence_parallel: bool = False
    micro_batch_size: int = 1
    seq_length: int = 4096
    """Global sequence length; each rank holds ``seq_length / cp`` tokens."""
    precision: str = "bf16"
    fp8_recipe: Fp8Recipe = "delayed"
    """The fp8 scaling recipe (``ExecutionSpec.fp8_recipe``); ``delayed`` whenever ``precision`` is not fp8."""
    fp4_recipe: Fp4Recipe = "nvfp4"
    """The fp4 scaling recipe (``ExecutionSpec.fp4_recipe``); ``nvfp4`` whenever ``precision`` is not fp4."""
    recompute: Recompute = "none"
    recompute_modules: tuple[str, ...] = ()
    selective_ac: Literal["modules", "op"] = "modules"
    """``ExecutionSpec.selective_ac_option`` when ``recompute`` is selective (``op``: torchtitan's op-level
    selective checkpointing; ``analytic.op_sac_recompute_s``), else ``modules``."""
    attention_kernel: AttentionKernel = "fused"
    """``ExecutionSpec.attention_kernel`` (``fused`` for the embedding and output kinds, which do not attend)."""
    cuda_graph: CudaGraph = "none"
    """``ExecutionSpec.cuda_graph``: which fixed per-layer overheads remain (``analytic.analytic_cost``)."""
    moe_imbalance: float = DEFAULT_MOE_IMBALANCE
    act_fp8_input: bool = False
    """``ExecutionSpec.activation_func_fp8_input_store``: the SwiGLU keeps its input in fp8 (``memory.activations``)."""
    lora_rank: int = 0
    """LoRA fine-tuning (``ExecutionSpec.lora_rank``): base weights frozen, adapters of this rank on
    ``lora_targets`` (``model.lora``); 0 = every weight trains."""
    lora_targets: tuple[str, ...] = ()
    attention: bool = field(default=False, compare=False, repr=False)
    """Its kind's ``Kind.attention`` trait (``Kind.shape`` sets it): its layers run self-attention, so the
    sliding-window pattern applies (``window_pattern``). A trait of the kind, not of the shape: out of ``==``, the
    hash, the repr, ``key()`` and the stored form (``KIND_TRAITS``); a shape built by hand for an attending kind
    passes ``True``."""

    # --- per-rank views ------------------------------------------------------------------------
    @property
    def local_seq(self) -> int:
        return self.seq_length // self.cp

    @property
    def tokens(self) -> int:
        """Tokens one rank processes per micro-batch (before TP's sequence split)."""
        return self.micro_batch_size * self.local_seq

    @property
    def local_heads(self) -> int:
        return self.arch.num_attention_heads // self.tp

    @property
    def local_query_groups(self) -> int:
        return max(1, self.arch.num_query_groups // self.tp)

    @property
    def local_experts(self) -> int:
        return self.arch.num_experts // self.ep if self.arch.num_experts else 0

    @property
    def window_pattern(self) -> int:
        """Period of the sliding-window pattern a transformer layer of this shape follows: 0 when none (no
        window, or every layer windowed), else ``window_attn_skip_freq`` (every N-th layer attends fully, e.g.
        GPT-OSS's window / full pairs: N = 2; N = 1: none windowed). ``measure.build`` times one period."""
        a = self.arch
        if self.attention and a.window_size and a.window_attn_skip_freq >= 1:
            return a.window_attn_skip_freq
        return 0

    @property
    def timed_layers(self) -> int:
        """Layers a measurement of this shape builds and times: one period of its window pattern, else one."""
        return max(1, self.window_pattern)

    @property
    def routed_tokens_per_rank(self) -> float:
        """Token-expert pairs one expert rank computes per micro-batch (each at ffn/ETP width).

        Balanced routing moves as many token slots into a rank as it sends out, whatever EP is:
        globally MBS*seq*DP*topk slots per micro-batch spread over world/(PP*ETP) expert groups of
        ETP ranks, i.e. per rank ``MBS*seq/CP*topk*ETP/TP``; times the imbalance factor (max/mean).
        Per local expert that is this value / ``local_experts``.
        """
        if not self.arch.num_experts:
            return 0.0
        return self.tokens * self.arch.moe_router_topk * self.etp / self.tp * self.moe_imbalance

    def key(self) -> str:
        """Stable identifier for caches and the timing store (independent of field order).

        Fields added after stores were filled (``_KEY_OPTIONAL_ARCH``, ``fp8_recipe``, ``attention_kernel``,
        ``cuda_graph``, ``selective_ac``, ``lora_rank``, ``act_fp8_input``)
        enter the payload only when set (not at their defaults), so
        the keys of shapes without them, and the measurements stored under those keys, are unchanged."""
        data = shape_dict(self)
        for name in _KEY_OPTIONAL_ARCH:
            if not data["arch"][name]:
                del data["arch"][name]
        if data["fp8_recipe"] == "delayed":
            del data["fp8_recipe"]
        if data["precision"] != "fp4":
            del data["fp4_recipe"]
        if data["attention_kernel"] == "fused":
            del data["attention_kernel"]
        if data["cuda_graph"] == "none":
            del data["cuda_graph"]
        if data["selective_ac"] == "modules":
            del data["selective_ac"]
        if not data["lora_rank"]:
            del data["lora_rank"], data["lora_targets"]
        if not data["act_fp8_input"]:
            del data["act_fp8_input"]
        if self.window_pattern:  # measured on one period of the pattern since 2026-12-04: entries that timed
            data["window_period_timed"] = True  # one windowed layer for all are not reused
        payload = json.dumps(data, sort_keys=True, default=list)
        return f"{self.kind}-" + hashlib.sha256(payload.encode()).hexdigest()[:16]

    def scaled(self, factor: float) -> RankShape:
        """Shrink hidden/ffn/seq/experts by ``factor`` (<= 1) keeping divisibility by the splits;
        used to keep CPU measurements in seconds.

        Heads shrink in multiples of TP x the GQA ratio (so query groups stay divisible by TP and
        the ratio is kept) with kv_channels kept; hidden keeps its ratio to heads x kv_channels
        (MLA: shrinks on its own). Experts shrink in multiples of EP but never below
        ``EP x min(local experts, top-k)``, so a rank still has as many local experts as one
        token's slots need (the per-rank routing of ``measure.build`` stays exact)."""
        if factor >= 1.0:
            return self

        def shrink(value: int, multiple: int) -> int:
            if value <= 0:
                return value
            return max(multiple, round(value * factor / multiple) * multiple)

        a = self.arch
        gqa_ratio = max(1, a.num_attention_heads // max(1, a.num_query_groups))
        heads = shrink(a.num_attention_heads, self.tp * gqa_ratio)
        groups = max(self.tp, heads * a.num_query_groups // a.num_attention_heads)
        experts = 0
        if a.num_experts:
            floor = self.ep * min(a.num_experts // self.ep, a.moe_router_topk)
            experts = max(shrink(a.num_experts, self.ep), floor)
        # megatron-core asserts num_experts % moe_router_num_groups == 0: drop a grouping shrinking broke
        grouped = bool(experts) and experts % max(1, a.moe_router_num_groups) == 0
        attn_width = a.num_attention_heads * a.kv_channels
        if a.multi_latent_attention:
            hidden = shrink(a.hidden_size, 64 * self.tp)
        elif a.hidden_size == attn_width:
            hidden = heads * a.kv_channels
        else:  # keep hidden / (heads x kv_channels), e.g. Qwen3's 2048 vs 32 x 128
            hidden = max(64, round(a.hidden_size * heads * a.kv_channels / attn_width / 64) * 64)
        arch = replace(
            a,
            num_attention_heads=heads,
            num_query_groups=groups,
            hidden_size=hidden,
            ffn_hidden_size=shrink(a.ffn_hidden_size, 64 * self.tp),
            moe_ffn_hidden_size=shrink(a.moe_ffn_hidden_size, 64 * self.etp),
            moe_shared_expert_intermediate_size=shrink(a.moe_shared_expert_intermediate_size, 64 * self.tp),
            moe_latent_size=min(shrink(a.moe_latent_size, 64), hidden) if a.moe_latent_size else 0,
            num_experts=experts,
            moe_router_topk=min(a.moe_router_topk, experts) if experts else 0,
            moe_router_num_groups=a.moe_router_num_groups if grouped else 0,
            moe_router_group_topk=a.moe_router_group_topk if grouped else 0,
            q_lora_rank=shrink(a.q_lora_rank, 64) if a.q_lora_rank else a.q_lora_rank,
            kv_lora_rank=shrink(a.kv_lora_rank, 64),
            vocab_size=shrink(a.vocab_size, 128 * self.tp),
            # Mamba heads in multiples of the groups (themselves a multiple of TP): megatron-core's splits hold
            mamba_num_heads=shrink(a.mamba_num_heads, max(1, a.mamba_num_groups)),
        )
        seq = shrink(self.seq_length, 2 * self.cp * 64)
        return replace(self, arch=arch, seq_length=seq)


KIND_TRAITS = ("attention",)
"""``RankShape`` fields that are its kind's traits, not its shape: left out of ``key()`` and the stored form."""


def shape_dict(shape: RankShape) -> dict:
    """``dataclasses.asdict(shape)`` without its kind's traits (``KIND_TRAITS``): what identifies it, what the timing
    store keeps (``measure.store.shape_from_dict`` is the inverse)."""
    data = asdict(shape)
    for name in KIND_TRAITS:
        del data[name]
    return data


def layer_arch(model: ModelSpec, *, moe: bool, vocab: int = 0) -> LayerArch:
    """One layer's global architecture from the model: its MoE block's sizes when ``moe``, the (padded) vocabulary
    of an edge layer (``Kind.layer_arch``)."""
    return LayerArch(
        hidden_size=model.hidden_size,
        num_attention_heads=model.num_attention_heads,
        num_query_groups=model.num_query_groups,
        kv_channels=model.kv_channels,
        ffn_hidden_size=0 if moe else model.ffn_hidden_size,
        activation=model.activation,
        normalization=model.normalization,
        add_bias_linear=model.add_bias_linear,
        add_qkv_bias=model.add_qkv_bias,
        qk_layernorm=model.qk_layernorm,
        window_size=model.window_size,
        window_attn_skip_freq=model.window_attn_skip_freq if model.window_size else 0,
        multi_latent_attention=model.multi_latent_attention,
        q_lora_rank=model.q_lora_rank,
        kv_lora_rank=model.kv_lora_rank if model.multi_latent_attention else 0,
        qk_head_dim=model.qk_head_dim if model.multi_latent_attention else 0,
        qk_pos_emb_head_dim=model.qk_pos_emb_head_dim if model.multi_latent_attention else 0,
        v_head_dim=model.v_head_dim if model.multi_latent_attention else 0,
        num_experts=(model.num_experts or 0) if moe else 0,
        moe_router_topk=model.moe_router_topk if moe else 0,
        moe_ffn_hidden_size=model.expert_ffn_hidden_size if moe else 0,
        moe_shared_expert_intermediate_size=(model.moe_shared_expert_intermediate_size or 0) if moe else 0,
        moe_latent_size=(model.moe_latent_size or 0) if moe else 0,
        moe_shared_expert_gate=bool(moe and model.moe_shared_expert_intermediate_size and model.moe_shared_expert_gate),
        moe_router_num_groups=(model.moe_router_num_groups or 0) if moe else 0,
        moe_router_group_topk=(model.moe_router_group_topk or 0) if moe else 0,
        vocab_size=vocab,
    )


def recompute_of(execution: ExecutionSpec) -> Recompute:
    return execution.recompute_granularity or "none"


def execution_fields(execution: ExecutionSpec, moe_imbalance: float = DEFAULT_MOE_IMBALANCE) -> dict:
    """The ``RankShape`` fields ``execution`` sets, the same for every kind (``Kind.shape`` adds its arch and traits,
    ``Kind.shape_fields`` narrows them).

    Recompute is recorded as configured; which layers actually recompute (recompute_num_layers,
    block vs uniform) is the projection's business, so ``"full"`` here means "this kind's recompute
    variant" and the projection mixes both variants as needed.
    """
    return dict(
        tp=execution.tp,
        cp=execution.cp,
        ep=execution.ep,
        etp=execution.etp,
        sequence_parallel=execution.sequence_parallel,
        micro_batch_size=execution.micro_batch_size,
        seq_length=execution.seq_length,
        precision=execution.precision,
        fp8_recipe=execution.fp8_recipe if execution.precision == "fp8" else "delayed",
        fp4_recipe=execution.fp4_recipe if execution.precision == "fp4" else "nvfp4",
        recompute=recompute_of(execution),
        recompute_modules=execution.recompute_modules,
        selective_ac=execution.selective_ac_option if execution.recompute_granularity == "selective" else "modules",
        attention_kernel=execution.attention_kernel,
        cuda_graph=execution.cuda_graph,
        moe_imbalance=moe_imbalance,
        act_fp8_input=execution.activation_func_fp8_input_store,
        lora_rank=execution.lora_rank,
        lora_targets=execution.lora_targets if execution.lora_rank else (),
    )
