"""Short real runs that verify a projection: scale the recipe down, project it, train it, compare.

    from primus_ext.launcher.short_run import local_target, verify_short_run
    target = local_target(recipe, scale=0.0625, nproc=2, device="cpu")   # what this machine can run
    result = verify_short_run(target, iters=6)                            # measured vs projected

``local_target`` keeps the recipe's TP/PP/VPP/MBS/GBS and precision and shrinks the model by
``scale`` (heads in multiples of TP x the GQA ratio with ``kv_channels`` kept, hidden with its ratio
to heads x kv_channels, FFN, experts in multiples of EP, sequence) so it trains in seconds; DP comes
from ``nproc`` local ranks. On CPU fp8 becomes bf16 (no transformer-engine). The projection is of
*that* configuration on *this* machine: layer costs measured here at full (= the scaled model's)
size, collectives on the local profile (``cpu`` on a CPU, the recipe's GPU type otherwise, with
``nproc`` GPUs in one node); on CPU its scale-up link is replaced by an all-reduce sweep of these
``nproc`` gloo ranks (from the store, or swept once and stored: ``measure/fabric_fit.py``). So
measured vs projected compares like with like. A CPU run also times each rank's collectives and
the part spent waiting for a peer (``trainer/comm_timer.py``), reported beside the projected
communication.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

SEQ_MULTIPLE = 64
"""Scaled sequence lengths are multiples of this (and at least this)."""


@dataclass(frozen=True, kw_only=True)
class LocalTarget:
    model: ModelSpec
    execution: ExecutionSpec
    system: SystemSpec
    nproc: int
    device: str
    scale: float


@dataclass(frozen=True, kw_only=True)
class VerifyResult:
    projection: Any
    training: Any
    """``primus_ext.launcher.trainer.TrainResult``."""
    measured: tuple[str, ...]
    """Layer kinds measured for the projection (``kind: ok`` / ``kind: FAILED ...``)."""
    fabric: str = ""
    """Where the projection's scale-up link came from (the sweep it used, or why none)."""

    @property
    def error_pct(self) -> float:
        """(projected - measured) / measured step time, in percent."""
        measured = self.training.median_step_time_s
        return 100.0 * (self.projection.step_time_s - measured) / measured

    def as_dict(self) -> dict[str, Any]:
        t = self.training
        return {"measured_step_s": t.median_step_time_s, "measured_spread": t.spread,
                "measured_steps": len(t.measured_s), "projected_step_s": self.projection.step_time_s,
                "error_pct": self.error_pct, "measured_tokens_per_s_per_gpu": t.tokens_per_s_per_gpu,
                "projected_tokens_per_s_per_gpu": self.projection.tokens_per_s_per_gpu,
                "world_size": t.world_size,
                "layout": f"TP{t.tp} PP{t.pp} DP{t.dp}" + (f" VPP{t.vpp}" if t.vpp > 1 else ""),
                "schedule": t.schedule, "device": t.device, "fabric": self.fabric, **self.comm_split()}

    def comm_split(self) -> dict[str, float | None]:
        """Measured seconds per step inside collectives and, of them, waiting for a peer (medians of
        the rank with the most time inside collectives; None where the run was not timed: GPU runs)
        next to the projection's exposed communication."""
        t, breakdown = self.training, getattr(self.projection, "breakdown", None)
        inside, skew = getattr(t, "median_collective_s", ()), getattr(t, "median_skew_s", ())
        rank = max(range(len(inside)), key=inside.__getitem__) if inside and len(skew) == len(inside) else None
        return {"measured_collective_s": inside[rank] if rank is not None else None,
                "measured_skew_s": skew[rank] if rank is not None else None,
                "projected_exposed_comm_s": sum(c.exposed_s for c in breakdown.comms) if breakdown else None}


def _shrink(value: int, factor: float, multiple: int) -> int:
    return max(multiple, round(value * factor / multiple) * multiple)


def scale_model(model: ModelSpec, execution: ExecutionSpec, factor: float) -> ModelSpec:
    """``model`` shrunk by ``factor`` <= 1 (see the module docstring); layers and vocabulary kept."""
    if factor >= 1.0:
        return model
    tp, ratio = execution.tp, max(1, model.num_attention_heads // max(1, model.num_query_groups))
    heads = _shrink(model.num_attention_heads, factor, tp * ratio)
    width = model.num_attention_heads * model.kv_channels
    hidden = heads * model.kv_channels if model.hidden_size == width else \
        max(64, round(model.hidden_size * heads * model.kv_channels / width / 64) * 64)
    changes: dict[str, Any] = dict(name=f"{model.name}@{factor:g}", hidden_size=hidden, num_attention_heads=heads,
                                   num_query_groups=heads // ratio,
                                   ffn_hidden_size=_shrink(model.ffn_hidden_size, factor, 64 * tp))
    if model.is_moe:
        ep = execution.ep
        floor = ep * min(model.num_experts // ep, model.moe_router_topk)
        changes["num_experts"] = max(_shrink(model.num_experts, factor, ep), floor)
        if model.moe_ffn_hidden_size:
            changes["moe_ffn_hidden_size"] = _shrink(model.moe_ffn_hidden_size, factor, 64 * execution.etp)
        if model.moe_shared_expert_intermediate_size:
            changes["moe_shared_expert_intermediate_size"] = _shrink(model.moe_shared_expert_intermediate_size,
                                                                     factor, 64 * tp)
    return replace(model, **changes)


def local_target(recipe: Any, *, scale: float, nproc: int, device: str) -> LocalTarget:
    """The scaled recipe on ``nproc`` local ranks of this machine (see the module docstring)."""
    from primus_ext.hardware import load_system

    e = recipe.execution
    seq = _shrink(e.seq_length, scale, SEQ_MULTIPLE) if scale < 1 else e.seq_length
    mp = e.tp * e.pp * e.cp
    dp = max(1, nproc // mp)
    # fp8 needs transformer-engine on a GPU: the CPU trainer and measurements run it in bf16, so project bf16
    precision = "bf16" if device == "cpu" and e.precision == "fp8" else e.precision
    # nor does the CPU trainer capture CUDA graphs; the built-in trainer builds plain Adam on any device
    execution = replace(e, seq_length=seq, data_parallel_size=dp, precision=precision,
                        cuda_graph="none" if device == "cpu" else e.cuda_graph, use_precision_aware_optimizer=False)
    model = scale_model(recipe.model, e, scale)
    model = replace(model, max_position_embeddings=max(model.max_position_embeddings, seq))
    base = load_system("cpu", 1) if device == "cpu" else recipe.system
    system = replace(base, num_nodes=1, gpu=replace(base.gpu, gpus_per_node=nproc,
                                                    scaleup_domain=max(nproc, base.gpu.scaleup_domain)))
    return LocalTarget(model=model, execution=execution, system=system, nproc=nproc, device=device, scale=scale)


def check_fits(target: LocalTarget) -> None:
    """Refuse (``InfeasibleConfig``, exit 2) a local run the memory model says this machine cannot hold."""
    from primus_ext.errors import InfeasibleConfig, Problem
    from primus_ext.model.memory import estimate_memory

    memory = estimate_memory(target.model, target.execution, target.system)
    if not memory.fits:
        gib = 1024**3
        raise InfeasibleConfig(problems=[Problem(
            path="--scale", value=target.scale,
            message=f"{target.model.name} needs ~{memory.peak_bytes / gib:.1f} GiB per rank, this machine's profile "
                    f"({target.system.gpu.name}) has {memory.capacity_bytes / gib:.1f} GiB",
            fix="shrink the model with --scale (e.g. 0.0625) or override num_layers / seq_length")],
            source="built-in trainer")


def verify_short_run(target: LocalTarget, *, iters: int, warmup: int = 1, store: str | None = None,
                     progress: Any = None) -> VerifyResult:
    """Measure the target's layers here, project, run the built-in trainer, return both."""
    from types import SimpleNamespace

    from primus_ext.launcher.projection_only import CostPlan, cost_provider, measure_missing
    from primus_ext.launcher.trainer import plan_run, run_plan
    from primus_ext.projection import project

    # refuse before spending minutes on measurements
    train_plan = plan_run(target.model, target.execution, world_size=target.nproc, iters=iters,
                          device=target.device, warmup=warmup, time_collectives=True)
    costs = CostPlan(mode="measured", store=store, scale=1.0, device=target.device)
    as_recipe = SimpleNamespace(model=target.model, execution=target.execution, system=target.system)
    measured = measure_missing(as_recipe, costs, progress=progress)
    system, fabric = _local_fabric(target, store)
    projection = project(target.model, target.execution, system, cost_provider(costs))
    training = run_plan(train_plan)
    return VerifyResult(projection=projection, training=training, measured=measured, fabric=fabric)


def _local_fabric(target: LocalTarget, store: str | None) -> tuple[SystemSpec, str]:
    """The target system with its scale-up link from an all-reduce sweep of ``nproc`` local ranks:
    the store's, else one swept now and stored."""
    from primus_ext.measure.fabric import fabric_sweep
    from primus_ext.measure.fabric_fit import scaleup_from_sweep, with_measured_scaleup
    from primus_ext.measure.runner import device_name
    from primus_ext.measure.shims import resolve_device
    from primus_ext.measure.store import TimingStore

    if target.nproc < 2:
        return target.system, "one rank: no collectives"
    dev = resolve_device(target.device)
    if dev.type != "cpu":  # the sweep's largest message (16 MiB) is short of NVLink / xGMI bandwidth
        return target.system, "the profile's calibrated links (the local sweep refits CPU runs only)"
    with TimingStore(store, device=device_name(dev)) as db:
        points = [p for p in db.fabric(op="all_reduce") if p.world == target.nproc]
        if not points:
            points, failures = fabric_sweep(world=target.nproc, ops=("all_reduce",), device=dev)
            if failures:
                return target.system, f"profile links (the fabric sweep failed: {'; '.join(failures)})"
            db.record_fabric(points)
    fit = scaleup_from_sweep(points)
    if fit is None:
        return target.system, "profile links (no all-reduce points)"
    return with_measured_scaleup(target.system, fit), fit.describe()
