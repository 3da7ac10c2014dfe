"""Configuration <-> ``ExecutionSpec``: what a point of the tuner's space means for the recipe.

A configuration (``{axis: value}``, ``primus_ext.tune.space``) changes the recipe's execution only where
an axis says so. These are pure functions of the model, the recipe's execution and the world size; the
``Space`` delegates to them (``Space.to_execution``, ``Space.config_of``) and memoises the pipeline split
per (PP, VPP) (``Space.pipeline_split``: layout generation is the slow part of building an execution).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from primus_ext.model.pipeline.registry import get_schedule, resolve_schedule, spec_schedule
from primus_ext.model.stages import LAYOUT_FIELDS
from primus_ext.specs import ExecutionSpec, ModelSpec
from primus_ext.tune import axes
from primus_ext.tune.config_keys import fast_replace
from primus_ext.tune.splits import DEFAULT, balanced_layout, head_layers, split_fields

Config = dict[str, Any]

RECOMPUTE_CHOICES = ("none", "selective", "block25", "block50", "block75", "full")
"""``blockNN``: full recompute of NN % of each model chunk's layers (method block); ``full``: every
layer (method uniform, 1 layer per unit)."""


def recompute_layers(choice: str, layers_per_chunk: int) -> int | None:
    """Layers per chunk recomputed by a ``blockNN`` choice; None when it collapses to none/full."""
    share = int(choice[5:]) / 100
    n = round(share * layers_per_chunk)
    return n if 0 < n < layers_per_chunk else None


def stages_per_rank(schedule: str | None, pp: int, vpp: int) -> int:
    """Model stages per pipeline rank a layout lists for ``schedule`` at (PP, VPP): VPP for Megatron's schedules, 2
    for the V-placed ones (a V's two chunks are two stages), 1 for DualPipe (its two copies hold the same PP
    stages: ``Schedule.stage_count``)."""
    if schedule is None or pp <= 1:
        return vpp
    s = get_schedule(schedule)
    if not s.fixed_chunks:
        return vpp
    return s.stage_count(pp, s.chunks_per_rank(vpp)) // pp


def pipeline_split(model: ModelSpec, base: ExecutionSpec, pp: int, vpp: int,
                   split: str = DEFAULT, schedule: str | None = None) -> dict[str, Any]:
    """Layout fields for (PP, VPP) and a ``split`` axis value (``primus_ext.tune.splits``); ``default``: the
    recipe's own when (PP, VPP) and the stages per rank are unchanged, else even or generated. ``schedule``: the
    schedule the split is for (its stages per rank: ``stages_per_rank``; the recipe's own when None)."""
    stages = stages_per_rank(schedule, pp, vpp)
    if split != DEFAULT:
        return split_fields(model, pp, stages, split, head_layers(model, base.seq_length))
    own = resolve_schedule(base.pipeline_schedule, base.pp, base.virtual_pipeline_model_parallel_size).name
    if (pp, vpp) == (base.pp, base.vpp) and stages == stages_per_rank(own, base.pp, base.vpp):
        return {name: getattr(base, name) for name in LAYOUT_FIELDS}
    even = model.num_layers % (pp * stages) == 0
    layout = None if even or pp == 1 else balanced_layout(model, pp, stages)
    return {name: layout if name == "pipeline_model_parallel_layout" else
            False if name.startswith("account_for") else None for name in LAYOUT_FIELDS}


def _recompute_fields(model: ModelSpec, base: ExecutionSpec, recompute: str, chunk: int) -> dict[str, Any]:
    """The recompute fields of a ``recompute`` choice. The recipe's own Primus ``recompute_layer_ids`` stand for
    the choice nearest to them (``recompute_choice``) and are kept there; every other choice drops them (Primus
    refuses ids beside a ``recompute_method``)."""
    if base.recompute_layer_ids and recompute == recompute_choice(model, base):
        return dict(recompute_granularity="full", recompute_method=None, recompute_num_layers=None,
                    recompute_modules=(), recompute_layer_ids=base.recompute_layer_ids)
    if recompute == "none":
        fields = dict(recompute_granularity=None, recompute_method=None, recompute_num_layers=None,
                      recompute_modules=())
    elif recompute == "selective":
        modules = base.recompute_modules if base.recompute_granularity == "selective" else ()
        fields = dict(recompute_granularity="selective", recompute_method=None, recompute_num_layers=None,
                      recompute_modules=modules)
    elif recompute == "full":
        fields = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1,
                      recompute_modules=())
    else:
        fields = dict(recompute_granularity="full", recompute_method="block",
                      recompute_num_layers=recompute_layers(recompute, chunk) or chunk, recompute_modules=())
    return {**fields, "recompute_layer_ids": ()}


def _sharding_fields(base: ExecutionSpec, sharding: str, overlap: str) -> dict[str, Any]:
    fsdp_kind = base.fsdp if base.fsdp != "none" else "megatron_fsdp"
    shard: dict[str, Any] = dict(
        use_distributed_optimizer=sharding == "distopt" or (sharding == "fsdp" and fsdp_kind == "megatron_fsdp"),
        fsdp=fsdp_kind if sharding == "fsdp" else "none",
        data_parallel_sharding_strategy=(
            (base.data_parallel_sharding_strategy
             if base.fsdp == "megatron_fsdp" and base.data_parallel_sharding_strategy != "no_shard"
             else "optim_grads_params")  # "fsdp" shards: a no_shard recipe's own strategy would not
            if sharding == "fsdp" and fsdp_kind == "megatron_fsdp" else "no_shard"),
        overlap_grad_reduce=overlap in ("grad", "grad+param"),
        overlap_param_gather=overlap == "grad+param",
    )
    if shard["fsdp"] == "torch_fsdp2":
        shard["use_distributed_optimizer"] = False
    return shard


PRIMUS_SCHEDULES = ("v-half", "v-min")
"""Explored on Primus recipes besides the recipe's own: Primus's V-half and V-min (zero_bubble.yaml's V family at
about 1/2 and 1/3 of 1F1B's activation memory; their op orders are fixed per (PP, M)). ZB-V, ZB-H1 and ZB-H2
are explored when pinned (``--pin schedule=...``): their orders are chosen greedily on each configuration's op
times, ~40 ms a projection here (on DeepSeek-V3 @ 1 024 H100s ZB-H1 / ZB-H2 add ~20 s to the exhaustive
search without beating the V schedules: benchmarks/pipeline_schedules.py)."""
_ANY_MICROBATCHES = 1 << 20
"""A micro-batch count that meets every schedule's count rules (even, >= 2*PP): the axis checks PP and VPP only;
the count is checked with the batch axes (``recipe.checks``)."""


def schedule_candidates(base: ExecutionSpec, pp: int, vpp: int, extra: Sequence[str]) -> tuple[str, ...]:
    """The recipe's own schedule at (PP, VPP), then those of ``extra`` that run there as themselves: Megatron's and
    the zero-bubble ones where ``resolve_schedule`` keeps them, the fixed-chunk ones at the VPP they are written
    with (V schedules: 2, Primus sets it; DualPipe / DualPipeV: 1, their chunks are their own)."""
    own = resolve_schedule(spec_schedule(base.pipeline_schedule, pp, vpp), pp, vpp if vpp > 1 else None).name
    out = [own]
    for name in extra:
        s = get_schedule(name)
        if s.fixed_chunks:
            # Primus's V schedules at the VPP 2 Primus sets; the DeepSeek what-ifs (no recipe keys) at VPP 1
            primus_v = s.recipe_keys(pp) is not None and not s.legality(pp, s.fixed_chunks, _ANY_MICROBATCHES)
            written = s.fixed_chunks if primus_v else 1
            runs = pp > 1 and vpp == written and not s.legality(pp, written, _ANY_MICROBATCHES)
        else:
            runs = resolve_schedule(s, pp, vpp if vpp > 1 else None) is s
        if runs and name not in out:
            out.append(name)
    return tuple(out)


def to_execution(model: ModelSpec, base: ExecutionSpec, world: int, config: Mapping[str, Any],
                 split: Mapping[str, Any] | None = None) -> ExecutionSpec:
    """The recipe's execution ``base`` with this configuration applied (not legality-checked);
    ``split``: the layout fields of (PP, VPP) when already known (``pipeline_split``)."""
    tp, pp, vpp, cp = config[axes.TP], config[axes.PP], config[axes.VPP], config[axes.CP]
    chunk = max(1, model.num_layers // (pp * vpp))
    schedule = spec_schedule(base.pipeline_schedule, pp, vpp).name
    if config.get(axes.SCHEDULE):  # as it runs at this (PP, VPP): interleaved at VPP 1 is 1F1B
        chosen = get_schedule(config[axes.SCHEDULE])
        schedule = (chosen if chosen.fixed_chunks else resolve_schedule(chosen, pp, vpp if vpp > 1 else None)).name
    return fast_replace(base, dict(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
        context_parallel_size=cp,
        expert_model_parallel_size=config[axes.EP],
        expert_tensor_parallel_size=(
            None if not model.is_moe or (base.expert_tensor_parallel_size is None and config[axes.ETP] == tp)
            else config[axes.ETP]),
        data_parallel_size=max(1, world // (tp * pp * cp)),
        sequence_parallel=tp > 1,
        tp_comm_overlap=config[axes.TP_OVERLAP],
        overlap_moe_expert_parallel_comm=config[axes.EP_OVERLAP],
        moe_shared_expert_overlap=base.moe_shared_expert_overlap and not config[axes.EP_OVERLAP],
        pipeline_schedule=schedule,
        micro_batch_size=config[axes.MBS],
        precision=config[axes.PRECISION],
        fp8_param_gather=base.fp8_param_gather and config[axes.PRECISION] == "fp8",  # fp8 weights need fp8
        fp4_param=base.fp4_param and config[axes.PRECISION] == "fp4",  # and fp4 ones fp4
        **(split if split is not None else pipeline_split(model, base, pp, vpp, config.get(axes.SPLIT, DEFAULT),
                                                          config.get(axes.SCHEDULE))),
        **_recompute_fields(model, base, config[axes.RECOMPUTE], chunk),
        **_sharding_fields(base, config[axes.SHARDING], config[axes.DP_OVERLAP]),
    ))


def recompute_choice(model: ModelSpec, e: ExecutionSpec) -> str:
    """The recompute axis value nearest to an execution's recompute (Primus's ``recompute_layer_ids``: the block
    fraction nearest to the share of decoder layers they list)."""
    chunk = max(1, model.num_layers // (e.pp * e.vpp))
    if e.recompute_granularity is None:
        return "none"
    if e.recompute_granularity == "selective":
        return "selective"
    if e.recompute_layer_ids:
        n = sum(i < model.num_layers for i in e.recompute_layer_ids) * chunk / model.num_layers
    elif e.recompute_method == "block":
        n = e.recompute_num_layers or 0
    else:
        return "full"
    return "none" if n <= 0 else "full" if n >= chunk else min(
        (c for c in RECOMPUTE_CHOICES if c.startswith("block")), key=lambda c: abs(int(c[5:]) / 100 * chunk - n))


def config_of(model: ModelSpec, execution: ExecutionSpec) -> Config:
    """The configuration nearest to an execution (the recipe's own, for seeding and reports); its ``split`` is
    ``default``, which stands for the execution's own split at its (PP, VPP)."""
    e = execution
    recompute = recompute_choice(model, e)
    sharding = "fsdp" if e.fsdp != "none" else "distopt" if e.use_distributed_optimizer else "ddp"
    overlap = "grad+param" if e.overlap_param_gather else "grad" if e.overlap_grad_reduce else "none"
    return {
        axes.TP: e.tp, axes.ETP: e.etp if model.is_moe else None, axes.TP_OVERLAP: e.tp_comm_overlap,
        axes.PP: e.pp, axes.VPP: e.vpp,
        axes.SCHEDULE: resolve_schedule(e.pipeline_schedule, e.pp, e.virtual_pipeline_model_parallel_size).name,
        axes.SPLIT: DEFAULT, axes.CP: e.cp, axes.EP: e.ep,
        axes.EP_OVERLAP: e.overlap_moe_expert_parallel_comm,
        axes.MBS: e.micro_batch_size, axes.RECOMPUTE: recompute, axes.SHARDING: sharding, axes.DP_OVERLAP: overlap,
        axes.PRECISION: e.precision,
    }
