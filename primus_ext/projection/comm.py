"""Per-layer and per-step communication of one rank: volumes, collective times, exposed parts.

    >>> lc = layer_comm(shape, execution, placements, system, fwd_s=..., bwd_s=..., attn=(f, b))
    >>> lc.fwd["tp"]          # (total_s, exposed_s) for one micro-batch's forward

Volumes (bf16 activations, per micro-batch, T = MBS * seq / CP tokens, h hidden):
  * TP (Megatron ``tensor_parallel/mappings.py``): without SP two all-reduces of T*h per pass
    (attention out, MLP out); with SP an all-gather + reduce-scatter pair of T*h in their place. An
    MoE layer has the attention pair, an ETP pair for the experts when ETP > 1, and a TP pair for the
    shared experts.
  * CP p2p (``transformer_engine`` attention with ``cp_comm_type=p2p``): CP-1 ring steps sending this
    rank's K,V block forward, K,V and dK,dV backward, overlapped with the attention blocks; a2a:
    four all-to-alls of q,k,v,out per pass; allgather: K,V gathered forward, reduce-scattered back.
  * EP: dispatch + combine all-to-all of T/TP * topk * w per pass (``alltoall``/``flex``; w = hidden, or
    ``moe_latent_size`` under latent MoE: megatron-core token_dispatcher.py), scaled by
    the routing imbalance for the busiest receiver; ``flex`` (DeepEP / HybridEP) sends a token once per
    destination domain when the group spans domains (``flex_dedup``); ``allgather`` dispatcher:
    gather over EP + scatter.
  * FSDP (torch FSDP2, Megatron-FSDP ``optim_grads_params``): per layer and micro-batch, params
    all-gathered for forward and backward, grads reduce-scattered in backward, prefetched behind the
    neighbouring layer's compute.
Recompute: the backward of a recomputed layer re-runs its forward first, collectives included
(``recomputed_parts``); FSDP gathers nothing more (the backward's gather serves the recompute).
Hiding: a collective overlapped with compute ``c`` leaves ``max(0, t - c) + (1 - overlap) * min(t, c)``
exposed, ``overlap`` = ``Efficiency.overlap`` (the hidden share still slows kernels a bit). Forward comm
hides behind the forward, the recomputed forward's behind the recompute, the backward's behind the backward
(FSDP's prefetch behind the whole backward, recompute included). The EP all-to-all under
``overlap_moe_expert_parallel_comm`` hides behind the other micro-batch of a combined 1F1B pass; the passes
that run without a partner (warm-up forwards, cool-down backwards) leave it exposed: the layer's
``fwd_unpaired`` / ``bwd_unpaired`` in ``projection.evaluate``, their own op times in ``model.pipeline``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from primus_ext.model.analytic import DEFAULT_SELECTIVE
from primus_ext.model.collectives import collective_time, p2p_time
from primus_ext.model.kinds.registry import get_kind
from primus_ext.model.memory import adam_step_bytes, dp_sharded, reduce_bytes
from primus_ext.model.placement import GroupPlacement, Placements
from primus_ext.model.rank_shape import RankShape
from primus_ext.specs import ExecutionSpec, SystemSpec

ACT_BYTES = 2
"""bf16 activations and parameters on the wire."""
FP32_BYTES = 4
DDP_MIN_BUCKET_PARAMS = 40_000_000
"""Megatron DDP bucket size: max(40M, 1M * DP) parameters (``distributed_data_parallel.py``)."""
DDP_BUCKET_PARAMS_PER_DP = 1_000_000


def hide(comm: float, compute: float, overlap: float) -> float:
    """Exposed part of ``comm`` seconds overlapped with ``compute`` seconds."""
    hidden = min(comm, compute)
    return comm - hidden + (1.0 - overlap) * hidden


@dataclass(frozen=True)
class LayerComm:
    """One layer, one micro-batch: per comm kind (total_s, exposed_s) for forward and backward."""

    fwd: dict[str, tuple[float, float]]
    bwd: dict[str, tuple[float, float]]

    def exposed(self) -> tuple[float, float]:
        return sum(v[1] for v in self.fwd.values()), sum(v[1] for v in self.bwd.values())


def _pair(op_sp: bool, nbytes: float, group: GroupPlacement, system: SystemSpec) -> float:
    """One TP-style exchange: all-reduce, or all-gather + reduce-scatter under SP."""
    if group.size <= 1:
        return 0.0
    if op_sp:
        return collective_time("all_gather", nbytes, group, system) + collective_time(
            "reduce_scatter", nbytes, group, system)
    return collective_time("all_reduce", nbytes, group, system)


RECOMPUTED_COMM = {
    "core_attn": ("cp",),
    "mlp": ("mlp",),
    "moe": ("etp", "shared", "ep"),
    "shared_experts": ("shared",),
}
"""Megatron ``--recompute-modules`` name -> the communicating parts of a layer its checkpointed forward re-runs
(megatron-core 0.16.1; ``tensor_parallel/random.py`` ``CheckpointFunction.backward`` re-runs the wrapped
function, collectives included):
  * ``core_attn``: ``attention.py`` ``_checkpointed_attention_forward`` wraps ``self.core_attention``, TE's
    ``DotProductAttention`` given the CP group and ``cp_comm_type`` (``extensions/transformer_engine.py``
    ``TEDotProductAttention``), which runs the CP exchange (p2p ring / all-to-all / all-gather) inside: the
    CP forward again; the QKV / output projections (the TP pair) lie outside;
  * ``mlp``: ``transformer_layer.py`` checkpoints ``self.mlp`` of a dense layer only (``if not
    self.is_moe_layer``): its TP pair (fc1's gather, fc2's reduce);
  * ``moe``: ``moe/moe_layer.py`` checkpoints ``custom_forward``: router, dispatch and combine (EP), the
    experts (their ETP pair) and the shared experts (their TP pair);
  * ``shared_experts``: ``moe_layer.py`` ``shared_experts_compute`` checkpoints the shared experts' MLP;
  * ``moe_act``, ``layernorm``, ``mla_up_proj``: element-wise / up-projection work, nothing communicated.
Modules re-run once however many names cover them (as ``analytic.analytic_cost`` counts their compute)."""


def recomputed_parts(shape: RankShape) -> frozenset[str]:
    """The communicating parts (``_tp_parts`` keys, ``cp``, ``ep``) a recomputed layer's backward re-runs:
    all of them under full recompute (``CheckpointFunction`` around the whole layer: ``transformer_block.py``
    ``_checkpointed_forward``), ``RECOMPUTED_COMM`` of the modules under selective."""
    parts = get_kind(shape.kind).comm(shape, False).parts  # the communicating parts (``KindComm.parts``)
    if not parts or shape.recompute == "none" or op_sac(shape):
        return frozenset()  # op-level checkpointing: whole parts are not re-run (``op_sac_gathers``)
    if shape.recompute == "full":
        return parts
    return parts.intersection(p for m in (shape.recompute_modules or DEFAULT_SELECTIVE)
                              for p in RECOMPUTED_COMM.get(m, ()))


def op_sac(shape: RankShape) -> bool:
    """torchtitan's op-level selective checkpointing (``analytic.op_sac_recompute_s``)."""
    return shape.recompute == "selective" and shape.selective_ac == "op"


def op_sac_gathers(parts: dict[str, float]) -> float:
    """TP seconds op-level checkpointing re-runs under sequence parallelism: the all-gather half of the attention
    and MLP pairs. Its save list (torchtitan ``_save_list``) keeps matmul, SDPA and reduce-scatter outputs, not
    all-gathers, and the partitioner re-runs a collective marked for recompute
    (``torch/_functorch/partitioners.py`` ``force_save_collectives`` / ``must_recompute``): the re-run wk and w3
    need their gathered inputs again, wo reads the saved SDPA output, and no CP exchange is repeated."""
    return 0.5 * (parts.get("attn", 0.0) + parts.get("mlp", 0.0))


def _tp_parts(shape: RankShape, ex: ExecutionSpec, pl: Placements, system: SystemSpec) -> dict[str, float]:
    """TP/ETP seconds of one forward pass of a layer's TP-style pairs, by the module that communicates
    (``Kind.comm``): ``attn`` (the attention's pair), ``mlp`` (a dense MLP's), ``etp`` (the routed experts'),
    ``shared`` (shared experts')."""
    act = shape.tokens * shape.arch.hidden_size * ACT_BYTES
    pairs = get_kind(shape.kind).comm(shape, ex.sequence_parallel).pairs
    return {part: _pair(ex.sequence_parallel, act, getattr(pl, group), system) for part, group in pairs}


def _singles(ops: tuple[str, ...], shape: RankShape, pl: Placements, system: SystemSpec) -> float:
    act = shape.tokens * shape.arch.hidden_size * ACT_BYTES
    return sum((collective_time(op, act, pl.tp, system) for op in ops), 0.0)


def _tp(shape: RankShape, ex: ExecutionSpec, pl: Placements, system: SystemSpec) -> float:
    """TP/ETP seconds of one forward pass."""
    comm = get_kind(shape.kind).comm(shape, ex.sequence_parallel)
    return sum(_tp_parts(shape, ex, pl, system).values(), 0.0) + _singles(comm.fwd, shape, pl, system)


def _tp_bwd(shape: RankShape, ex: ExecutionSpec, pl: Placements, system: SystemSpec) -> float:
    """TP/ETP seconds of one backward pass (the forward's pairs again, unless the kind names its own)."""
    comm = get_kind(shape.kind).comm(shape, ex.sequence_parallel)
    if comm.bwd is None:
        return _tp(shape, ex, pl, system)
    return _singles(comm.bwd, shape, pl, system)


def _cp(shape: RankShape, ex: ExecutionSpec, pl: Placements, system: SystemSpec) -> tuple[float, float]:
    """(forward, backward) CP seconds of one layer."""
    if shape.cp <= 1 or not get_kind(shape.kind).attention:
        return 0.0, 0.0
    a = shape.arch
    if a.multi_latent_attention:
        kv_width = shape.local_heads * (a.qk_head_dim + a.qk_pos_emb_head_dim + a.v_head_dim)
        q_width = shape.local_heads * (a.qk_head_dim + a.qk_pos_emb_head_dim)
    else:
        kv_width = 2 * shape.local_query_groups * a.kv_channels
        q_width = shape.local_heads * a.kv_channels
    kv = shape.tokens * kv_width * ACT_BYTES
    if ex.cp_comm_type == "p2p":
        step = p2p_time(kv, pl.cp.crosses, system)
        return (shape.cp - 1) * step, 2 * (shape.cp - 1) * step
    if ex.cp_comm_type == "allgather":
        full = kv * shape.cp
        gather = collective_time("all_gather", full, pl.cp, system)
        return gather, collective_time("reduce_scatter", full, pl.cp, system)
    qkvo = shape.tokens * (2 * q_width + kv_width) * ACT_BYTES  # a2a / a2a+p2p (Ulysses)
    t = collective_time("all_to_all", qkvo, pl.cp, system)
    return t, t


MXFP8_WIRE_BYTES = 1 + 1 / 32
"""Bytes per element of an mxfp8 all-to-all payload: E4M3 data and one E8M0 scale per 32 elements (OCP MX spec)."""


def _ep(shape: RankShape, ex: ExecutionSpec, pl: Placements, system: SystemSpec) -> tuple[float, float]:
    """EP seconds of one (forward, backward) pass: dispatch + combine, each in its wire dtype (the forward dispatch's
    and the backward combine's may be mxfp8: ``ExecutionSpec.moe_dispatch_fwd_dtype`` / ``moe_combine_bwd_dtype``)."""
    if shape.ep <= 1 or not get_kind(shape.kind).comm(shape, ex.sequence_parallel).ep:
        return 0.0, 0.0
    a = shape.arch
    local_tokens = shape.tokens / shape.tp
    if ex.moe_token_dispatcher_type == "allgather":
        full = local_tokens * a.expert_width * ACT_BYTES * shape.ep
        both = collective_time("all_gather", full, pl.ep, system) + collective_time(
            "reduce_scatter", full, pl.ep, system)
        return both, both
    sent = local_tokens * a.moe_router_topk * a.expert_width * ACT_BYTES * shape.moe_imbalance
    if ex.moe_token_dispatcher_type == "flex" and pl.ep.crosses:
        sent *= flex_dedup(a.moe_router_topk, pl.ep.domains, a.moe_router_num_groups, a.moe_router_group_topk)
    bf16 = collective_time("all_to_all", sent, pl.ep, system)

    def wire(dtype: str) -> float:
        return bf16 if dtype == "bf16" else collective_time("all_to_all", sent * MXFP8_WIRE_BYTES / ACT_BYTES,
                                                            pl.ep, system)

    return wire(ex.moe_dispatch_fwd_dtype) + bf16, bf16 + wire(ex.moe_combine_bwd_dtype)


def flex_dedup(topk: int, domains: int, groups: int = 0, group_topk: int = 0) -> float:
    """Share of a token's top-k copies the flex dispatcher (DeepEP / HybridEP) sends across domains.

    DeepEP forwards a token once per destination scale-up domain and fans it out over NVLink there
    (DeepSeek-AI, DeepEP README: "NVLink-RDMA forwarding"); with experts spread uniformly over ``D``
    domains a token reaches ``D * (1 - (1 - 1/D)^topk)`` distinct domains on average instead of
    ``topk`` destinations. Group-limited routing (``groups`` expert groups, each token's experts drawn
    from its ``group_topk`` best groups: DeepSeek-V3, arXiv:2412.19437 sec. 2.1.2 "node-limited
    routing", M = 4 of 8; megatron-core ``moe_router_num_groups`` / ``moe_router_group_topk``) bounds
    the domains a token can reach to those holding its selected groups (experts are laid out
    contiguously over the EP ranks, so a group covers ``D / groups`` domains)."""
    if domains <= 1 or topk <= 1:
        return 1.0
    reachable = float(domains)
    if groups > 0 and 0 < group_topk < groups:
        if groups >= domains:  # several groups per domain: domains holding at least one selected group
            per = groups // domains
            reachable = domains * (1.0 - math.comb(groups - per, group_topk) / math.comb(groups, group_topk))
        else:
            reachable = min(float(domains), group_topk * domains / groups)
    distinct = reachable * (1.0 - (1.0 - 1.0 / reachable) ** topk)
    return min(1.0, distinct / topk)


def shared_expert_seconds(shape: RankShape, system: SystemSpec) -> tuple[float, float]:
    """(forward, backward) seconds of a layer's shared experts, analytic (``analytic.layer_parts``): what the EP
    all-to-all hides behind under ``moe_shared_expert_overlap`` (megatron-core 0.16.1 ``moe/shared_experts.py``:
    the shared expert's fc1 + activation run on their own stream while the dispatch all-to-all runs, its fc2 while
    the combine runs, and their backwards beside the backward all-to-alls)."""
    from primus_ext.model.analytic import layer_parts

    parts = layer_parts(shape, system.gpu)
    return parts.fwd.get("shared_experts", 0.0), parts.dgrad.get("shared_experts", 0.0) + parts.wgrad.get(
        "shared_experts", 0.0)


def fsdp_per_layer(ex: ExecutionSpec) -> bool:
    """Whether parameters are sharded (gathered per layer per micro-batch)."""
    return ex.fsdp == "torch_fsdp2" or (ex.fsdp == "megatron_fsdp" and ex.data_parallel_sharding_strategy
                                        == "optim_grads_params")


def grad_bytes_per_param(ex: ExecutionSpec) -> float:
    """Bytes per parameter of the gradient reduction (one rule with the memory model: ``memory.state.reduce_bytes``)."""
    return reduce_bytes(ex)


def _fsdp(params: tuple[int, int], grads: tuple[int, int], ex: ExecutionSpec, pl: Placements,
          system: SystemSpec) -> tuple[float, float]:
    """(forward, backward) seconds of a layer's FSDP collectives: the (dense, expert) ``params`` all-gathered, the
    gradients of the trained ``grads`` (all of them, or LoRA's adapters) reduce-scattered."""
    gather = (collective_time("all_gather", params[0] * ACT_BYTES, pl.dp_cp, system)
              + collective_time("all_gather", params[1] * ACT_BYTES, pl.edp, system))
    gb = grad_bytes_per_param(ex)
    scatter = (collective_time("reduce_scatter", grads[0] * gb, pl.dp_cp, system)
               + collective_time("reduce_scatter", grads[1] * gb, pl.edp, system))
    return gather, gather + scatter


def layer_comm(shape: RankShape, ex: ExecutionSpec, pl: Placements, system: SystemSpec, *, fwd_s: float, bwd_s: float,
               recompute_s: float = 0.0, attn: tuple[float, float] = (0.0, 0.0), params: tuple[int, int] = (0, 0),
               trained: tuple[int, int] | None = None) -> LayerComm:
    """Communication of one layer for one micro-batch, with what overlap leaves exposed.

    ``fwd_s``/``bwd_s``: the layer's forward / backward compute (what TP/EP/FSDP overlap can hide behind),
    ``bwd_s`` without the recompute; ``recompute_s``: the recomputed forward's compute, what its comm (added
    to the backward's, ``recomputed_parts``) hides behind; ``attn``: core attention (fwd, bwd) seconds, what
    the CP ring hides behind; ``params``: (dense, expert) params of the layer for FSDP; ``trained``: those with
    gradients when not all (LoRA's adapters).
    """
    ovl = system.gpu.efficiency.overlap
    fwd: dict[str, tuple[float, float]] = {}
    bwd: dict[str, tuple[float, float]] = {}
    redo = recomputed_parts(shape)
    if shape.tp > 1 or shape.etp > 1:
        tf, tb = _tp(shape, ex, pl, system), _tp_bwd(shape, ex, pl, system)
        parts = _tp_parts(shape, ex, pl, system) if redo or op_sac(shape) else {}
        tr = (op_sac_gathers(parts) if op_sac(shape) and ex.sequence_parallel
              else sum(t for part, t in parts.items() if part in redo))
        if ex.tp_comm_overlap and ex.sequence_parallel:
            fwd["tp"] = (tf, hide(tf, fwd_s, ovl))
            bwd["tp"] = (tb + tr, hide(tb, bwd_s, ovl) + hide(tr, recompute_s, ovl))
        else:
            fwd["tp"], bwd["tp"] = (tf, tf), (tb + tr, tb + tr)
    if shape.cp > 1:
        cf, cb = _cp(shape, ex, pl, system)
        cr = cf if "cp" in redo else 0.0
        if ex.cp_comm_type == "p2p":  # the recomputed ring hides behind the recomputed core attention
            fwd["cp"] = (cf, hide(cf, attn[0], ovl))
            bwd["cp"] = (cb + cr, hide(cb, attn[1], ovl) + hide(cr, attn[0], ovl))
        else:
            fwd["cp"], bwd["cp"] = (cf, cf), (cb + cr, cb + cr)
    if shape.ep > 1 and get_kind(shape.kind).comm(shape, ex.sequence_parallel).ep:
        e, eb = _ep(shape, ex, pl, system)
        er = e if "ep" in redo else 0.0
        if ex.overlap_moe_expert_parallel_comm:
            fwd["ep"] = (e, hide(e, fwd_s, ovl))
            bwd["ep"] = (eb + er, hide(eb, bwd_s, ovl) + hide(er, recompute_s, ovl))
        elif ex.moe_shared_expert_overlap:
            shared_f, shared_b = shared_expert_seconds(shape, system)
            fwd["ep"] = (e, hide(e, shared_f, ovl))
            bwd["ep"] = (eb + er, hide(eb, shared_b, ovl) + hide(er, shared_f, ovl))
        else:
            fwd["ep"], bwd["ep"] = (e, e), (eb + er, eb + er)
    if fsdp_per_layer(ex) and (pl.dp_cp.size > 1 or pl.edp.size > 1):
        gf, gb = _fsdp(params, trained if trained is not None else params, ex, pl, system)
        fwd["fsdp"], bwd["fsdp"] = (gf, hide(gf, fwd_s, ovl)), (gb, hide(gb, bwd_s + recompute_s, ovl))
    return LayerComm(fwd=fwd, bwd=bwd)


def pp_bytes(shape: RankShape, ex: ExecutionSpec) -> float:
    """Activation (and its gradient) sent between pipeline stages per micro-batch."""
    tokens = shape.tokens / shape.tp if ex.sequence_parallel else shape.tokens
    return tokens * shape.arch.hidden_size * ACT_BYTES


def dp_times(dense: int, experts: int, ex: ExecutionSpec, pl: Placements, system: SystemSpec) -> tuple[float, float]:
    """(gradient reduction, parameter all-gather) seconds of one rank per step (0 under per-layer FSDP)."""
    if fsdp_per_layer(ex):
        return 0.0, 0.0
    gb = grad_bytes_per_param(ex)
    if dp_sharded(ex)[0]:  # sharded optimizer: reduce-scatter the grads, all-gather the updated params
        grad = (collective_time("reduce_scatter", dense * gb, pl.dp_cp, system)
                + collective_time("reduce_scatter", experts * gb, pl.edp, system))
        param = (collective_time("all_gather", dense * ACT_BYTES, pl.dp_cp, system)
                 + collective_time("all_gather", experts * ACT_BYTES, pl.edp, system))
        return grad, param
    grad = (collective_time("all_reduce", dense * gb, pl.dp_cp, system)
            + collective_time("all_reduce", experts * gb, pl.edp, system))
    return grad, 0.0


def bucket_fraction(params: int, ex: ExecutionSpec) -> float:
    """Share of a rank's gradients in one DDP bucket (the last one cannot overlap)."""
    if params <= 0:
        return 0.0
    bucket = max(DDP_MIN_BUCKET_PARAMS, DDP_BUCKET_PARAMS_PER_DP * ex.dp)
    return min(1.0, bucket / params)


def aligned_dp_windows(bwd1: np.ndarray, fwd1: np.ndarray, grad_t: np.ndarray, param_t: np.ndarray,
                       share: np.ndarray, vpp: int, pp: int) -> tuple[np.ndarray, ...]:
    """(gradient window, gradient bucket share, parameter window, parameter bucket share) for
    ``overlapped_exposed``, as (configurations, pipeline ranks) arrays of one ``vpp`` and ``pp``: the compute a
    step's DP collectives hide behind on each pipeline rank (column ``rank``).

    Megatron-LM's (and Primus's) defaults ``align_grad_reduce`` / ``align_param_gather`` hand the schedule
    per-chunk sync functions (megatron-core 0.16.1 pipeline_parallel/schedules.py):
    - 1F1B (``vpp == 1``): rank 0 reduces its buckets during its last backward (window ``bwd1``, one bucket
      exposed); the other ranks launch the whole reduce after their last backward, inside the pipeline's
      tail (nothing hidden here; the step tail takes the latest rank). The parameter gather overlaps the
      first forward bucket by bucket (window ``fwd1``).
    - interleaved: the last group of ``pp`` micro-batches runs chunk by chunk, backward from chunk vpp-1, so
      chunk c's last backward ends ``c * pp`` chunk-passes before the rank's backward does; its whole
      reduce is launched after that pass plus ``rank`` passes (the alignment across ranks), chunk 0's after
      the last pass. On one stream, with pass b = ``bwd1 / vpp``, spacing s = pp b and chunk share
      d = ``grad_t / vpp``, the reduce done before the backward ends is ``(vpp-1) s - rank b`` when d >= s
      (the stream never idles), else ``(vpp-2) d + min(d, s - rank b)``. Chunks 0 and 1 gather their
      parameters at the step's start and chunk c+1 at chunk c's first forward, each needed at its own
      first forward: ``(vpp-1) min(param_t / vpp, pp fwd1 / vpp)`` is hidden.
    Windows from these are passed with a zero bucket share (whole chunks, not buckets, are exposed)."""
    rank = np.arange(bwd1.shape[1], dtype=float)[None, :]
    if vpp <= 1:
        return np.where(rank == 0, bwd1, 0.0), share, fwd1, share
    b, d = bwd1 / vpp, grad_t / vpp
    spacing = pp * b
    grad_hidden = np.where(d >= spacing, (vpp - 1) * spacing - rank * b,
                           (vpp - 2) * d + np.minimum(d, spacing - rank * b))
    param_hidden = (vpp - 1) * np.minimum(param_t / vpp, pp * fwd1 / vpp)
    zero = np.zeros_like(share)
    return grad_hidden, zero, param_hidden, zero


def overlapped_exposed(total: np.ndarray, window: np.ndarray, first_or_last: np.ndarray,
                       overlap: float) -> np.ndarray:
    """Exposed seconds of a bucketed collective overlapped with ``window`` seconds of compute (``hide``, element-wise
    over arrays); the ``first_or_last`` share (one bucket) runs outside the window."""
    tail = total * first_or_last
    rest = total - tail
    hidden = np.minimum(rest, window)
    return tail + (rest - hidden + (1.0 - overlap) * hidden)


def optimizer_seconds(dense: int, experts: int, ex: ExecutionSpec, pl: Placements, system: SystemSpec) -> float:
    """Adam step of this rank's (sharded) parameters, memory-bound on HBM."""
    owned = dense / pl.dp_cp.size + experts / pl.edp.size if dp_sharded(ex)[0] else dense + experts
    gpu = system.gpu
    return owned * adam_step_bytes(ex) / (gpu.hbm_bandwidth_bytes_per_s * gpu.efficiency.hbm)


def describe(group: GroupPlacement) -> str:
    if group.size <= 1:
        return "-"
    if group.crosses:
        return f"{group.size} ranks over {group.domains} domains ({group.per_domain}/domain)"
    return f"{group.size} ranks, 1 domain"
