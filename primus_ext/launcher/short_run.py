"""Short real runs that verify a projection: scale the recipe down, project it, train it, compare.

    from primus_ext.launcher.short_run import local_target, verify_short_run
    target = local_target(recipe, scale=0.0625, nproc=2, device="cpu")   # what this machine can run
    result = verify_short_run(target, iters=6)                            # measured vs projected

``local_target`` keeps the recipe's TP/PP/VPP/MBS and precision and shrinks the model by
``scale`` (heads in multiples of TP x the GQA ratio with ``kv_channels`` kept, hidden with its ratio
to heads x kv_channels, FFN, experts in multiples of EP, sequence) so it trains in seconds; DP comes
from ``nproc`` local ranks and the global batch keeps 2 x PP micro-batches per DP rank at most. On CPU
fp8 becomes bf16 (no transformer-engine) and the optimizer is plain Adam on every rank. Each change is
a ``Shrink`` (``target.shrinks``: key, before, after, why) for the CLI to print, and ``check_fits``
refuses a run the memory model says this machine's RAM cannot hold. The projection is of
*that* configuration on *this* machine: layer costs measured here at full (= the scaled model's)
size, collectives on the local profile (``cpu`` on a CPU, the recipe's GPU type otherwise, with
``nproc`` GPUs in one node); on CPU its scale-up link is replaced by an all-reduce sweep of these
``nproc`` gloo ranks (from the store, or swept once and stored: ``measure/fabric_fit.py``). So
measured vs projected compares like with like. A CPU run also times each rank's collectives and
the part spent waiting for a peer (``trainer/comm_timer.py``), reported beside the projected
communication.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TextIO

from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

SEQ_MULTIPLE = 64
"""Scaled sequence lengths are multiples of this (and at least this)."""
LOCAL_MICROBATCHES_PER_STAGE = 2
"""A local run keeps at most this many micro-batches per pipeline stage and DP rank (2 x PP in all): enough to
fill the schedule, few enough that a step takes seconds. A recipe's 128 per rank are hours per step on a CPU."""
RANK_OVERHEAD_BYTES = 1.0 * 1024**3
"""RAM of one trainer process beyond what the memory model counts: the interpreter with torch and megatron-core
imported, gloo buffers, allocator slack (RSS of a 2-rank tiny-model run here: ~0.7 GiB per rank, rounded up)."""
HERE = "this machine"


@dataclass(frozen=True, kw_only=True)
class Shrink:
    """One setting a local run changes from the recipe, and why."""

    key: str
    before: Any
    after: Any
    why: str

    def __str__(self) -> str:
        return f"{self.key} {self.before} -> {self.after}: {self.why}"


@dataclass(frozen=True, kw_only=True)
class LocalTarget:
    model: ModelSpec
    execution: ExecutionSpec
    system: SystemSpec
    nproc: int
    device: str
    scale: float
    shrinks: tuple[Shrink, ...] = ()
    """What differs from the recipe, one entry per setting (``shrink_for_here``)."""


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


def _changes(before: Any, after: Any, keys: tuple[str, ...], why: str) -> list[Shrink]:
    return [Shrink(key=k, before=getattr(before, k), after=getattr(after, k), why=why) for k in keys
            if getattr(before, k) != getattr(after, k)]


def local_batch(execution: ExecutionSpec, per_stage: int = LOCAL_MICROBATCHES_PER_STAGE) -> int:
    """The global batch a local run keeps: the recipe's, or ``per_stage`` x PP micro-batches of the recipe's
    size per DP rank when that is fewer (a multiple of PP, as the interleaved schedule needs)."""
    e = execution
    cap = e.micro_batch_size * e.dp * per_stage * e.pp
    return min(e.global_batch_size, cap) if e.global_batch_size % (e.micro_batch_size * e.dp) == 0 else \
        e.global_batch_size  # an illegal batch stays as it is: plan_run names it


def shrink_for_here(model: ModelSpec, execution: ExecutionSpec, *, scale: float, nproc: int,
                    device: str) -> tuple[ModelSpec, ExecutionSpec, tuple[Shrink, ...]]:
    """The model and execution a short local run uses, and one ``Shrink`` per setting changed (pure).

    The model shrinks by ``scale`` (``scale_model``), the sequence too; DP comes from ``nproc`` local ranks;
    the global batch is cut to ``local_batch``; on CPU fp8 becomes bf16 (no transformer-engine), CUDA graphs
    are off and the optimizer is the trainer's plain Adam on every rank (``trainer.build.LocalAdam``: neither
    distributed nor precision-aware)."""
    e = execution
    why_scale = f"--scale {scale:g}"
    seq = _shrink(e.seq_length, scale, SEQ_MULTIPLE) if scale < 1 else e.seq_length
    local = replace(e, seq_length=seq, data_parallel_size=max(1, nproc // (e.tp * e.pp * e.cp)))
    shrinks = _changes(e, local, ("seq_length",), why_scale)
    shrinks += _changes(e, local, ("data_parallel_size",), f"{nproc} local ranks ({HERE})")
    batched = replace(local, global_batch_size=local_batch(local))
    if batched.global_batch_size != local.global_batch_size:
        shrinks.append(Shrink(
            key="global_batch_size", before=e.global_batch_size, after=batched.global_batch_size,
            why=f"{batched.num_microbatches} micro-batches of {e.micro_batch_size} per DP rank, not "
                f"{local.num_microbatches}: {local.num_microbatches / batched.num_microbatches:g}x less work per "
                f"step ({HERE})"))
    local = batched
    if device == "cpu":
        cpu = replace(local, precision="bf16" if local.precision == "fp8" else local.precision, cuda_graph="none",
                      use_precision_aware_optimizer=False, use_distributed_optimizer=False,
                      overlap_param_gather=False)
        shrinks += _changes(local, cpu, ("precision",), f"no transformer-engine on CPU ({HERE})")
        shrinks += _changes(local, cpu, ("cuda_graph",), f"no CUDA graphs on CPU ({HERE})")
        shrinks += _changes(local, cpu, ("use_distributed_optimizer", "use_precision_aware_optimizer",
                                         "overlap_param_gather"),
                            f"the CPU trainer's Adam keeps full fp32 state on every rank ({HERE})")
        local = cpu
    else:  # the built-in trainer builds plain Adam on any device
        gpu = replace(local, use_precision_aware_optimizer=False)
        shrinks += _changes(local, gpu, ("use_precision_aware_optimizer",), "the built-in trainer's plain Adam")
        local = gpu
    small = scale_model(model, e, scale)
    shrinks += _changes(model, small, ("hidden_size", "num_attention_heads", "num_query_groups", "ffn_hidden_size",
                                       "num_experts", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size"),
                        why_scale)
    small = replace(small, max_position_embeddings=max(small.max_position_embeddings, seq))
    return small, local, tuple(shrinks)


def local_target(recipe: Any, *, scale: float, nproc: int, device: str) -> LocalTarget:
    """The scaled recipe on ``nproc`` local ranks of this machine (see the module docstring)."""
    from primus_ext.hardware import load_system

    model, execution, shrinks = shrink_for_here(recipe.model, recipe.execution, scale=scale, nproc=nproc,
                                                device=device)
    base = load_system("cpu", 1) if device == "cpu" else recipe.system
    system = replace(base, num_nodes=1, gpu=replace(base.gpu, gpus_per_node=nproc,
                                                    scaleup_domain=max(nproc, base.gpu.scaleup_domain)))
    return LocalTarget(model=model, execution=execution, system=system, nproc=nproc, device=device, scale=scale,
                       shrinks=shrinks)


def available_ram_bytes() -> int | None:
    """RAM this machine can still give (psutil's ``available``, else ``MemAvailable`` of /proc/meminfo; None
    when neither is readable)."""
    try:
        import psutil
    except ImportError:
        try:
            with open("/proc/meminfo", encoding="ascii") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            return None
        return None
    return int(psutil.virtual_memory().available)


def check_fits(target: LocalTarget, *, available_bytes: int | None = None) -> float:
    """Refuse (``InfeasibleConfig``, exit 2) a local run that the memory model says this machine cannot hold.

    On a CPU every rank lives in the same RAM: the need is ``nproc`` x (the memory model's per-rank peak on the
    cpu profile + ``RANK_OVERHEAD_BYTES``), against ``available_bytes`` (default ``available_ram_bytes()``). On a
    GPU each rank's peak is held against the GPU's memory. Returns the bytes needed (CPU) or the per-rank peak."""
    from primus_ext.errors import InfeasibleConfig, Problem
    from primus_ext.model.memory import estimate_memory

    memory = estimate_memory(target.model, target.execution, target.system)
    gib = 1024**3
    fix = "shrink the model with --scale (e.g. 0.0625), use fewer --nproc, or override num_layers / seq_length"
    if target.device != "cpu":
        if not memory.fits:
            raise InfeasibleConfig(problems=[Problem(
                path="--scale", value=target.scale,
                message=f"{target.model.name} needs ~{memory.peak_bytes / gib:.1f} GiB per rank, this machine's "
                        f"{target.system.gpu.name} has {memory.capacity_bytes / gib:.1f} GiB", fix=fix)],
                source="built-in trainer")
        return memory.peak_bytes
    need = target.nproc * (memory.peak_bytes + RANK_OVERHEAD_BYTES)
    have = available_ram_bytes() if available_bytes is None else available_bytes
    if have is not None and need > have:
        raise InfeasibleConfig(problems=[Problem(
            path="--scale", value=target.scale,
            message=f"this short run of {target.model.name} needs ~{need / gib:.1f} GiB of RAM ({target.nproc} ranks "
                    f"x ({memory.peak_bytes / gib:.1f} GiB by the memory model + {RANK_OVERHEAD_BYTES / gib:.1f} GiB "
                    f"per process)), and {HERE} has {have / gib:.1f} GiB available", fix=fix)],
            source="built-in trainer")
    return need


def verify_short_run(target: LocalTarget, *, iters: int, warmup: int = 1, store: str | None = None,
                     progress: Callable[[int, int, Any], None] | None = None,
                     on_projection: Callable[[Any, str], None] | None = None,
                     on_step: Callable[[int, int, float], None] | None = None,
                     notice: Callable[[str], None] | None = None,
                     log: TextIO | bool | None = True) -> VerifyResult:
    """Measure the target's layers here, project, run the built-in trainer, return both.

    ``progress(done, total, shape)``: per layer measured; ``on_projection(projection, fabric)``: once projected,
    before training starts (so the projected step time is known while the run goes); ``on_step(done, iters,
    step_s)``: after each training iteration; ``notice(text)``: before a step that takes a while unannounced;
    ``log``: where the run's Megatron-format lines go (``trainer.run_plan``: True = stderr, a stream, or False)."""
    from types import SimpleNamespace

    from primus_ext.launcher.trainer import plan_run, run_plan
    from primus_ext.session import Session, cost_choice

    # refuse before spending minutes on measurements
    train_plan = plan_run(target.model, target.execution, world_size=target.nproc, iters=iters,
                          device=target.device, warmup=warmup, time_collectives=True)
    session = Session(cost_choice(compute="measured", store=store, scale=1.0, measure_on=target.device))
    measured = session.measure(target, progress=progress)
    system, fabric = _local_fabric(target, store, notice)
    run_here = SimpleNamespace(model=target.model, execution=target.execution, system=system)
    projection = session.project(run_here, calibrated=False)  # this machine's run: no record of the cluster's
    if on_projection:
        on_projection(projection, fabric)
    training = run_plan(train_plan, progress=on_step, log=log)
    return VerifyResult(projection=projection, training=training, measured=measured, fabric=fabric)


def _local_fabric(target: LocalTarget, store: str | None,
                  notice: Callable[[str], None] | None = None) -> tuple[SystemSpec, str]:
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
            if notice:
                notice(f"sweeping all-reduce sizes on {target.nproc} local ranks (once: the store keeps it)")
            points, failures = fabric_sweep(world=target.nproc, ops=("all_reduce",), device=dev)
            if failures:
                return target.system, f"profile links (the fabric sweep failed: {'; '.join(failures)})"
            db.record_fabric(points)
    fit = scaleup_from_sweep(points)
    if fit is None:
        return target.system, "profile links (no all-reduce points)"
    return with_measured_scaleup(target.system, fit), fit.describe()
