"""THE legality check: every reason a (model, execution, system) cannot run, all at once.

Pure and fast (no I/O, no torch): the tuner calls it for every proposal, the loader for every
recipe. Each ``Problem`` names the Megatron argument at fault (the loader re-points it to where the
user wrote it), the offending value and a fix. Rules follow Megatron-LM / megatron-core's own
assertions (``arguments.py``, ``transformer_config.py``, ``parallel_state.py``); pipeline splits and
layouts are checked by ``primus_ext.model.stages.layout_problems``.

Usage::

    problems = check(model, execution, system)
    if problems:
        raise InfeasibleConfig(problems=problems)
"""

from __future__ import annotations

from primus_ext.errors import Problem
from primus_ext.model.pipeline.long import budget_of, pricing_problem
from primus_ext.model.pipeline.registry import SCHEDULES, resolve_schedule, spec_schedule
from primus_ext.model.stages import layout_problems, virtual_stages
from primus_ext.recipe.upstream_rules import upstream_problems
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec


def _parallel(m: ModelSpec, e: ExecutionSpec, s: SystemSpec, out: list[Problem]) -> None:
    tp, pp, cp, world = e.tp, e.pp, e.cp, s.world_size
    if world % (tp * pp * cp):
        sizes = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp, "context_parallel_size": cp}
        key = next((k for k, v in sizes.items() if world % v), "tensor_model_parallel_size")
        out.append(Problem(
            path=key, value=sizes[key],
            message=f"world size {world} ({s.num_nodes} node(s) of {s.gpu.gpus_per_node}) is not divisible by "
                    f"TP*PP*CP = {tp}*{pp}*{cp} = {tp * pp * cp}",
            fix="choose TP, PP, CP whose product divides the GPU count, or change --nodes"))
    elif e.world_size != world:
        out.append(Problem(
            path="data_parallel_size", value=e.dp,
            message=f"TP*PP*CP*DP = {e.world_size} but the cluster has {world} GPUs",
            fix=f"DP must be {world // (tp * pp * cp)}"))
    if m.num_attention_heads % tp:
        out.append(Problem(path="num_attention_heads", value=m.num_attention_heads,
                           message=f"not divisible by TP={tp}", fix="choose TP dividing the head count"))
    groups = m.num_query_groups
    if not m.multi_latent_attention and groups % tp and tp % groups:
        # megatron-core transformer_config.py: KV heads are split over TP, or replicated when fewer
        out.append(Problem(path="num_query_groups", value=groups,
                           message=f"neither a multiple nor a divisor of TP={tp}",
                           fix="choose TP dividing the query-group count (or a multiple of it)"))
    if not m.multi_latent_attention and m.num_attention_heads % m.num_query_groups:
        out.append(Problem(path="num_query_groups", value=m.num_query_groups,
                           message=f"does not divide num_attention_heads={m.num_attention_heads}",
                           fix="use a divisor of the head count"))
    if m.num_dense_layers and m.ffn_hidden_size % tp:
        out.append(Problem(path="ffn_hidden_size", value=m.ffn_hidden_size,
                           message=f"not divisible by TP={tp}", fix="choose TP dividing ffn_hidden_size"))
    if cp > 1 and e.seq_length % (2 * cp):
        out.append(Problem(path="seq_length", value=e.seq_length,
                           message=f"not divisible by 2*CP={2 * cp} (context parallel splits each sequence "
                                   "into 2*CP chunks for load balance)",
                           fix=f"use a multiple of {2 * cp}, or another CP"))
    if e.sequence_parallel and (e.seq_length // cp) % tp:
        out.append(Problem(path="seq_length", value=e.seq_length,
                           message=f"seq/CP = {e.seq_length // cp} is not divisible by TP={tp} under "
                                   "sequence parallelism", fix="use a multiple of TP*CP"))
    if e.vpp > 1 and pp == 1:
        out.append(Problem(path="virtual_pipeline_model_parallel_size", value=e.vpp,
                           message="virtual pipeline stages need pipeline_model_parallel_size > 1",
                           fix="set PP > 1 or drop the virtual pipeline setting"))
    if e.tp_comm_overlap and not e.sequence_parallel:
        out.append(Problem(path="tp_comm_overlap", value=True,
                           message="TP comm overlap needs sequence_parallel (Megatron-LM arguments.py)",
                           fix="set sequence_parallel: true or tp_comm_overlap: false"))


def _batch(e: ExecutionSpec, out: list[Problem]) -> None:
    if e.pipeline_schedule not in SCHEDULES:  # specs cannot import the registry (bottom layer): checked here
        out.append(Problem(path="pipeline_schedule", value=e.pipeline_schedule, message="unknown pipeline schedule",
                           fix=f"use one of {', '.join(SCHEDULES)}"))
        return
    per_step = e.micro_batch_size * e.dp
    schedule = resolve_schedule(e.pipeline_schedule, e.pp, e.virtual_pipeline_model_parallel_size)
    if e.global_batch_size % per_step:
        out.append(Problem(path="global_batch_size", value=e.global_batch_size,
                           message=f"not divisible by MBS*DP = {e.micro_batch_size}*{e.dp} = {per_step}",
                           fix=f"use a multiple of {per_step}, or change micro_batch_size / the parallel sizes"))
    if schedule.splits_wgrad and schedule.recipe_keys(e.pp) is not None and e.use_distributed_optimizer:
        # Primus zbpp_utils.py validate_arguments: zero bubble with the distributed optimizer asserts both off
        for key in ("overlap_grad_reduce", "overlap_param_gather"):
            if getattr(e, key):
                out.append(Problem(path=key, value=True, message=f"Primus's zero-bubble schedules ({schedule.label}) "
                                   "refuse it with the distributed optimizer", fix=f"set {key}: false"))
    if schedule.fixed_chunks and e.pp > 1 and schedule.chunk_placement == "v" and (
            e.decoder_first_pipeline_num_layers is not None or e.decoder_last_pipeline_num_layers is not None
            or e.account_for_embedding_in_pipeline_split or e.account_for_loss_in_pipeline_split):
        out.append(Problem(path="decoder_first_pipeline_num_layers", value=schedule.name,
                           message=f"{schedule.label} places its stages in a V; uneven first / last stages are not "
                                   "projected under it (Primus's V layer offsets differ from Megatron's)",
                           fix="use the even split or a pipeline_model_parallel_layout (stages in model order)"))
    if e.global_batch_size % per_step:
        pass  # the micro-batch count is not whole: the rules below have nothing to count
    elif schedule.fixed_chunks and (problems := schedule.legality(e.pp, e.virtual_pipeline_model_parallel_size,
                                                                   e.num_microbatches)):
        out.extend(Problem(path="pipeline_schedule", value=e.pipeline_schedule, message=p,
                           fix="change the micro-batch count (global batch / (MBS * DP)), PP or the schedule")
                   for p in problems)
    elif e.vpp > 1 and e.pp > 1 and e.num_microbatches % e.pp and not schedule.fixed_chunks:
        # megatron-core schedules.py (interleaved): micro-batches run in groups of PP per model chunk
        # (microbatch_group_size_per_vp_stage defaults to PP); a partial last group raises.
        out.append(Problem(path="global_batch_size", value=e.global_batch_size,
                           message=f"interleaved schedule: {e.num_microbatches} micro-batches per step is not a "
                                   f"multiple of PP={e.pp}",
                           fix=f"use a global batch of a multiple of MBS*DP*PP = {per_step * e.pp}"))
    elif problem := pricing_problem(e.pp, virtual_stages(e), e.num_microbatches, e.pp,
                                    budget_of(spec_schedule(e.pipeline_schedule, e.pp, 1).name)):
        out.append(Problem(path="global_batch_size", value=e.global_batch_size, message=problem,
                           fix="use fewer pipeline stages or a smaller global batch"))


def _moe(m: ModelSpec, e: ExecutionSpec, s: SystemSpec, out: list[Problem]) -> None:
    ep, etp = e.ep, e.etp
    if not m.is_moe:
        if ep > 1:
            out.append(Problem(path="expert_model_parallel_size", value=ep,
                               message="expert parallelism needs num_experts (dense model)",
                               fix="set expert_model_parallel_size: 1"))
        if e.overlap_moe_expert_parallel_comm or e.moe_shared_expert_overlap:
            key = "moe_shared_expert_overlap"
            if e.overlap_moe_expert_parallel_comm:
                key = "overlap_moe_expert_parallel_comm"
            out.append(Problem(path=key, value=True, message="MoE overlap set on a dense model",
                               fix=f"set {key}: false"))
        return
    experts = m.num_experts or 0
    if experts % ep:
        out.append(Problem(path="num_experts", value=experts, message=f"not divisible by EP={ep}",
                           fix="choose EP dividing the expert count"))
    if m.moe_router_topk > experts:
        out.append(Problem(path="moe_router_topk", value=m.moe_router_topk,
                           message=f"larger than num_experts={experts}", fix="use topk <= num_experts"))
    _group_routing(m, out)
    world_per_stage = s.world_size // e.pp if s.world_size % e.pp == 0 else None
    if world_per_stage is not None and world_per_stage % (etp * ep):
        out.append(Problem(path="expert_model_parallel_size", value=ep,
                           message=f"MoE parallel folding: world/PP = {world_per_stage} is not divisible by "
                                   f"ETP*EP = {etp}*{ep} = {etp * ep} (megatron-core parallel_state)",
                           fix="choose EP*ETP dividing world_size / PP"))
    if m.expert_ffn_hidden_size % etp:
        out.append(Problem(path="moe_ffn_hidden_size", value=m.expert_ffn_hidden_size,
                           message=f"not divisible by ETP={etp}", fix="choose an expert TP dividing it"))
    shared = m.moe_shared_expert_intermediate_size
    if shared and shared % e.tp:
        out.append(Problem(path="moe_shared_expert_intermediate_size", value=shared,
                           message=f"not divisible by TP={e.tp}", fix="choose TP dividing it"))
    if e.tp > 1 and not e.sequence_parallel:
        out.append(Problem(path="sequence_parallel", value=False,
                           message=f"MoE with TP={e.tp} requires sequence parallelism (Megatron-LM arguments.py)",
                           fix="set sequence_parallel: true"))
    if m.add_bias_linear and etp != 1:
        out.append(Problem(path="expert_tensor_parallel_size", value=etp,
                           message="MoE with add_bias_linear needs ETP=1 (megatron-core transformer_config.py)",
                           fix="set expert_tensor_parallel_size: 1"))
    if e.moe_shared_expert_overlap and e.moe_token_dispatcher_type != "alltoall":
        out.append(Problem(path="moe_shared_expert_overlap", value=True,
                           message=f"only works with the alltoall dispatcher, not {e.moe_token_dispatcher_type}",
                           fix="set moe_token_dispatcher_type: alltoall or moe_shared_expert_overlap: false"))
    if e.overlap_moe_expert_parallel_comm:
        _ep_overlap(m, e, out)


def _group_routing(m: ModelSpec, out: list[Problem]) -> None:
    """megatron-core 0.16.1 transformer_config.py, checked only when ``moe_router_group_topk`` is set
    (group-limited routing; the router ignores ``moe_router_num_groups`` alone)."""
    groups, group_topk = m.moe_router_num_groups, m.moe_router_group_topk
    if not group_topk:
        return
    if not groups:
        out.append(Problem(path="moe_router_num_groups", value=groups,
                           message=f"group-limited routing (moe_router_group_topk={group_topk}) needs "
                                   "moe_router_num_groups",
                           fix="set moe_router_num_groups (e.g. the EP group's node count) or drop "
                               "moe_router_group_topk"))
        return
    experts = m.num_experts or 0
    if experts % groups:
        out.append(Problem(path="moe_router_num_groups", value=groups,
                           message=f"does not divide num_experts={experts} (groups must be equal-sized)",
                           fix="use a divisor of num_experts"))
    if group_topk > groups:
        out.append(Problem(path="moe_router_group_topk", value=group_topk,
                           message=f"larger than moe_router_num_groups={groups}",
                           fix=f"select at most {groups} groups"))


def _ep_overlap(m: ModelSpec, e: ExecutionSpec, out: list[Problem]) -> None:
    """megatron-core transformer_config.py asserts for overlap_moe_expert_parallel_comm."""
    key = "overlap_moe_expert_parallel_comm"
    needs = [
        (e.ep > 1, "needs expert parallelism (EP > 1)"),
        (e.moe_token_dispatcher_type in ("alltoall", "flex"), "needs the alltoall or flex dispatcher"),
        (e.recompute_granularity != "full" and e.recompute_method is None, "cannot be combined with full recompute"),
        (not e.moe_shared_expert_overlap, "cannot be combined with moe_shared_expert_overlap"),
        (e.pp == 1 or e.vpp > 1, "needs virtual pipeline stages when PP > 1"),
        (e.precision in ("bf16", "fp16", "fp8"), "needs bf16/fp16 parameters"),
        (m.mtp_num_layers <= 1, "supports at most one MTP layer"),
        (m.mtp_num_layers == 0 or e.pp > 1, "with an MTP layer needs PP > 1"),
    ]
    for ok, message in needs:
        if not ok:
            out.append(Problem(path=key, value=True, message=message, fix=f"fix it or set {key}: false"))


def _recompute(m: ModelSpec, e: ExecutionSpec, out: list[Problem]) -> None:
    """megatron-core transformer_config.py recompute rules; block/uniform layer counts per stage."""
    g, method, n = e.recompute_granularity, e.recompute_method, e.recompute_num_layers
    if e.activation_func_fp8_input_store and m.activation != "swiglu":
        # megatron-core transformer_config.py __post_init__: "Storing activation input in FP8 is supported only
        # for SwiGLU."
        out.append(Problem(path="activation_func_fp8_input_store", value=True,
                           message=f"megatron-core stores the activation input in FP8 for SwiGLU only, not "
                                   f"{m.activation}", fix="set activation_func_fp8_input_store: false"))
    if e.recompute_layer_ids:
        # Primus patches/recompute_layer_patches.py, validate_specified_recompute_layers: the listed layers are
        # the full recompute; recompute_method must stay unset (Primus raises otherwise)
        if g != "full":
            out.append(Problem(path="recompute_granularity", value=g,
                               message="recompute_layer_ids needs recompute_granularity: full (Primus refuses it "
                                       "otherwise)", fix="set recompute_granularity: full"))
        if method is not None:
            out.append(Problem(path="recompute_method", value=method,
                               message="must be unset with recompute_layer_ids (Primus refuses both)",
                               fix="remove recompute_method (and recompute_num_layers)"))
        return
    if g is None:
        return  # Megatron ignores recompute_method / num_layers without a granularity
    if g == "selective":
        if n is not None:
            out.append(Problem(path="recompute_num_layers", value=n,
                               message="must be unset with selective recompute", fix="drop recompute_num_layers"))
        return
    if e.cuda_graph == "layers":
        out.append(Problem(path="recompute_granularity", value=g,
                           message="megatron-core runs full recompute under CUDA graphs only with a "
                                   "full-iteration graph",
                           fix="set recompute_granularity: selective, or cuda_graph_impl: local with "
                               "cuda_graph_scope: full_iteration, or cuda_graph_impl: none"))
    if method is None:
        out.append(Problem(path="recompute_method", message="full recompute needs recompute_method",
                           fix="set recompute_method: block or uniform"))
    if n is None:
        out.append(Problem(path="recompute_num_layers", message="full recompute needs recompute_num_layers",
                           fix="set recompute_num_layers (layers to recompute per pipeline stage)"))
        return
    per_stage = m.num_layers // e.pp
    if method == "uniform" and n < 1:
        out.append(Problem(path="recompute_num_layers", value=n,
                           message="uniform recompute needs at least 1 layer per recompute unit",
                           fix="set recompute_num_layers >= 1"))
    if n > per_stage:
        out.append(Problem(path="recompute_num_layers", value=n,
                           message=f"more than the {per_stage} layers of a pipeline stage "
                                   f"(num_layers {m.num_layers} / PP {e.pp})",
                           fix=f"use at most {per_stage}"))


def _sharding(e: ExecutionSpec, out: list[Problem]) -> None:
    # Megatron-LM arguments.py:816-820 (d3528a2): torch FSDP2 gathers its parameters itself, without the flag
    if e.overlap_param_gather and not (e.use_distributed_optimizer or e.fsdp == "megatron_fsdp"):
        out.append(Problem(path="overlap_param_gather", value=True,
                           message="needs the distributed optimizer or Megatron-FSDP (Megatron-LM arguments.py; "
                                   "torch FSDP2 overlaps its gathers without it)",
                           fix="set use_distributed_optimizer: true or overlap_param_gather: false"))
    if e.overlap_param_gather and not e.overlap_grad_reduce:
        out.append(Problem(path="overlap_param_gather", value=True,
                           message="needs overlap_grad_reduce (Megatron-LM arguments.py)",
                           fix="set overlap_grad_reduce: true"))
    if e.use_precision_aware_optimizer and not e.use_distributed_optimizer:
        fix = ("use Megatron-FSDP (use_megatron_fsdp) or set use_precision_aware_optimizer: false"
               if e.fsdp == "torch_fsdp2" else
               "set use_distributed_optimizer: true or use_precision_aware_optimizer: false")
        out.append(Problem(path="use_precision_aware_optimizer", value=True,
                           message="megatron-core supports the precision-aware optimizer only with the "
                                   "distributed optimizer", fix=fix))
    if e.fp8_param_gather and e.precision != "fp8":
        out.append(Problem(path="fp8_param_gather", value=True,
                           message="megatron-core raises 'fp8_param must be used together with fp8 mode' "
                                   "(transformer_config.py)",
                           fix="set fp8 (e.g. fp8: hybrid) or fp8_param_gather: false"))
    if e.fsdp == "torch_fsdp2" and e.use_distributed_optimizer:
        out.append(Problem(path="use_distributed_optimizer", value=True,
                           message="torch FSDP2 shards the optimizer itself; Megatron's distributed "
                                   "optimizer cannot be combined with it",
                           fix="set use_distributed_optimizer: false (or use Megatron-FSDP)"))


def _offloading(m: ModelSpec, e: ExecutionSpec, out: list[Problem]) -> None:
    """megatron-core 0.16.1 transformer_config.py: layer-level CPU offloading rules."""
    if not e.cpu_offloading:
        return
    if not 0 <= e.cpu_offloading_num_layers < m.num_layers:
        out.append(Problem(path="cpu_offloading_num_layers", value=e.cpu_offloading_num_layers,
                           message=f"must lie in [0, num_layers) = [0, {m.num_layers})",
                           fix=f"use 0..{m.num_layers - 1} layers"))
    if e.pp > 1:
        out.append(Problem(path="cpu_offloading", value=True,
                           message="megatron-core has no CPU offloading with pipeline parallelism",
                           fix="set pipeline_model_parallel_size: 1 or cpu_offloading: false"))
    if e.recompute_granularity is not None:
        out.append(Problem(path="cpu_offloading", value=True,
                           message="megatron-core's CPU offloading does not work with activation recompute",
                           fix="set recompute_granularity: null or cpu_offloading: false"))
    if e.cuda_graph != "none":
        out.append(Problem(path="cpu_offloading", value=True,
                           message="megatron-core raises 'CUDA graphs not supported with CPU offloading'",
                           fix="set cuda_graph_impl: none or cpu_offloading: false"))


def _primus_v(m: ModelSpec, e: ExecutionSpec, out: list[Problem]) -> None:
    """Primus's V schedules (zbpp_utils.py validate_arguments): an even layer count per pipeline stage, set as
    two virtual stages of num_layers / PP / 2 layers by Primus itself, so no layout of the recipe's own."""
    schedule = resolve_schedule(e.pipeline_schedule, e.pp, e.virtual_pipeline_model_parallel_size)
    if not (schedule.chunk_placement == "v" and schedule.recipe_keys(e.pp) is not None and e.pp > 1):
        return
    if m.num_layers % e.pp or (m.num_layers // e.pp) % 2:
        out.append(Problem(path="pipeline_model_parallel_size", value=e.pp,
                           message=f"{schedule.label} (Primus) needs an even number of layers per pipeline stage; "
                                   f"num_layers={m.num_layers} over PP={e.pp}",
                           fix="choose a PP giving an even count of layers per stage, or another schedule"))
    if e.pipeline_model_parallel_layout:
        out.append(Problem(path="pipeline_model_parallel_layout", value=e.pipeline_model_parallel_layout,
                           message=f"{schedule.label} (Primus) sets the virtual stages itself (num_layers / PP / 2 "
                                   "layers each), which Megatron-LM refuses beside a layout",
                           fix="drop pipeline_model_parallel_layout, or use another schedule"))


def check(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec) -> list[Problem]:
    """Every legality violation of running ``model`` with ``execution`` on ``system``."""
    out: list[Problem] = []
    _parallel(model, execution, system, out)
    _batch(execution, out)
    _primus_v(model, execution, out)
    _moe(model, execution, system, out)
    _recompute(model, execution, out)
    _sharding(execution, out)
    _offloading(model, execution, out)
    out.extend(upstream_problems(model, execution, system))
    if model.hybrid_layer_pattern:
        from primus_ext.recipe.hybrid import hybrid_problems

        out.extend(hybrid_problems(model, execution)[0])
    chunks = execution.pp * execution.vpp
    if chunks > model.num_layers + model.mtp_num_layers + 2:
        key = "virtual_pipeline_model_parallel_size" if execution.vpp > 1 else "pipeline_model_parallel_size"
        out.append(Problem(path=key, value=execution.vpp if execution.vpp > 1 else execution.pp,
                           message=f"PP*VPP = {chunks} pipeline chunks for {model.num_layers} layers",
                           fix="use fewer pipeline stages / virtual stages than layers"))
    else:  # the split over PP is its own rule, whether or not TP*PP*CP divides the world
        out.extend(layout_problems(model, execution))
    return out
