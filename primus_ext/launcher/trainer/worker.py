"""One rank of the built-in trainer: process group, megatron parallel state, N timed steps.

``train_rank(rank, plan, port)`` is what every spawned process runs (``run.py``); it returns the
rank's ``RankResult`` (rank 0's carries the step times, max-reduced over ranks). Mock data: uniform
random token ids (seeded per DP rank), labels = the next token of the same stream, full loss mask.

A step is exactly what Megatron's ``train_step`` does: zero the DDP grad buffers, run the
pipeline schedule megatron chooses (``get_forward_backward_func``: no pipelining, 1F1B, or
interleaved 1F1B) over GBS/(MBS*DP) micro-batches, finalize grads (DP reduce, PP embedding sync),
optimizer step. The step time is the wall clock between two barriers around it (+ device sync).
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from primus_ext.launcher.trainer.comm_timer import CollectiveTimer, Event, skew_waits
from primus_ext.launcher.trainer.plan import QUIET_WARNINGS, TrainPlan
from primus_ext.measure.quiet import CPU_NOTES


@dataclass(frozen=True, kw_only=True)
class RankResult:
    rank: int
    step_times_s: tuple[float, ...] = ()
    """Per iteration, max over ranks (rank 0 only)."""
    losses: tuple[float, ...] = ()
    """Token-mean LM loss of the whole global batch per iteration (rank 0 only)."""
    params: int = 0
    """Parameters this rank holds."""
    schedule: str = ""
    peak_memory_bytes: int | None = None
    collective_s: tuple[tuple[float, ...], ...] = ()
    """Per rank, per iteration: seconds inside collectives (rank 0 only; plan.time_collectives)."""
    skew_s: tuple[tuple[float, ...], ...] = ()
    """Per rank, per iteration: the part of ``collective_s`` spent before the last peer arrived."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    memory_mb: tuple[float, float, float, float] | None = None
    """Rank 0's (allocated, max allocated, reserved, max reserved) MB at the end; CPU: peak RSS (megatron_log.py)."""


def _batches(plan: TrainPlan, dp_rank: int, device: torch.device):
    """Endless mock micro-batches (tokens, labels, loss_mask, position_ids, attention_mask).

    Step ``k``'s global batch is drawn from a generator seeded by (seed, k) and DP rank ``d`` takes
    samples ``[d * MBS * M, (d + 1) * MBS * M)``: every layout with the same GBS sees the same data,
    so losses are comparable across TP/PP/DP (the tests rely on it).
    """
    e, m = plan.execution, plan.model
    seq, mbs, nmb = e.seq_length, e.micro_batch_size, plan.num_microbatches
    mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1)[None, None].to(device)
    position_ids = torch.arange(seq).expand(mbs, seq).to(device)
    step = 0
    while True:
        gen = torch.Generator().manual_seed(plan.seed * 1_000_003 + step)
        stream = torch.randint(0, m.vocab_size, (e.global_batch_size, seq + 1), generator=gen)
        mine = stream[dp_rank * mbs * nmb:(dp_rank + 1) * mbs * nmb]
        for i in range(nmb):
            sample = mine[i * mbs:(i + 1) * mbs]
            yield {
                "tokens": sample[:, :-1].to(device),
                "labels": sample[:, 1:].to(device),
                "loss_mask": torch.ones(mbs, seq, device=device),
                "position_ids": position_ids,
                "attention_mask": mask,
            }
        step += 1


def _forward_step(data_iterator, model):
    from functools import partial

    batch = next(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"])
    return output, partial(_loss_func, batch["loss_mask"])


def _loss_func(loss_mask: torch.Tensor, output_tensor: torch.Tensor):
    """Megatron's pretrain_gpt loss: token-summed loss and the token count (per micro-batch)."""
    losses = output_tensor.float().view(-1)
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    tokens = mask.sum().to(torch.int)
    report = torch.cat([loss.detach().view(1), tokens.float().view(1)])
    return loss, tokens, {"lm loss": report}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_rank(rank: int, plan: TrainPlan, port: int,
               on_step: Callable[[int, float], None] | None = None) -> RankResult:
    """Run the plan's iterations as ``rank`` of ``plan.world_size``; tears the process group down.

    ``on_step(step, seconds)``: called after each iteration with this rank's wall time of it."""
    for text in QUIET_WARNINGS + (CPU_NOTES if plan.device == "cpu" else ()):  # before megatron imports
        warnings.filterwarnings("ignore", message=f".*{text}.*", category=UserWarning)
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from primus_ext.launcher.trainer.build import build_model_chunks, transformer_config, wrap_and_optimizer
    from primus_ext.launcher.trainer.megatron_log import cpu_memory_mb, cuda_memory_mb
    from primus_ext.measure.shims import apply_cpu_shims, te_importable

    e = plan.execution
    cpu = apply_cpu_shims(plan.device)
    if cpu:
        from primus_ext.launcher.trainer.cpu_schedules import patch_schedules_for_cpu

        patch_schedules_for_cpu()
    torch.set_num_threads(plan.threads_per_rank)
    device = torch.device("cpu")
    if not cpu:
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    use_te = not cpu and te_importable()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo" if cpu else "nccl", rank=rank, world_size=plan.world_size)
    try:
        ps.initialize_model_parallel(
            tensor_model_parallel_size=e.tp, pipeline_model_parallel_size=e.pp,
            virtual_pipeline_model_parallel_size=e.virtual_pipeline_model_parallel_size if e.vpp > 1 else None,
            context_parallel_size=e.cp, expert_model_parallel_size=e.ep,
            expert_tensor_parallel_size=e.etp,
        )
        tensor_parallel.model_parallel_cuda_manual_seed(plan.seed, inference_rng_tracker=cpu)  # CPU shim 1
        config = transformer_config(plan, cpu=cpu, use_te=use_te)
        torch.manual_seed(plan.seed)  # same initial weights in every layout (CPU init splits master weights)
        chunks = build_model_chunks(plan, config, use_te=use_te, device=device)
        model, optimizer = wrap_and_optimizer(plan, config, chunks, cpu=cpu)
        config.no_sync_func = [m.no_sync for m in model] if len(model) > 1 else model[0].no_sync
        config.grad_sync_func = None
        config.finalize_model_grads_func = finalize_model_grads
        config.grad_scale_func = optimizer.scale_loss
        params = sum(p.numel() for m in model for p in m.parameters())
        data = _batches(plan, ps.get_data_parallel_rank(), device)
        iterators = [data] * len(model) if len(model) > 1 else data
        fwd_bwd = get_forward_backward_func()
        schedule = fwd_bwd.__name__
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        times: list[float] = []
        comm: list[float] = []
        totals: list[torch.Tensor] = []
        timer = CollectiveTimer(log_events=True).install() if plan.time_collectives else None
        for step in range(plan.iters):
            for m in model:
                m.zero_grad_buffer()
            optimizer.zero_grad()
            dist.barrier()
            _sync(device)
            start = time.perf_counter()
            if timer:
                timer.reset(step)
            reports = fwd_bwd(
                forward_step_func=_forward_step, data_iterator=iterators,
                model=model if len(model) > 1 else model[0],
                num_microbatches=plan.num_microbatches, seq_length=e.seq_length,
                micro_batch_size=e.micro_batch_size, forward_only=False,
            )
            _ok, _grad_norm, _ = optimizer.step()
            _sync(device)
            if timer:
                comm.append(timer.read()[0])
            dist.barrier()
            times.append(time.perf_counter() - start)
            totals.append(_loss_totals(reports))
            if on_step:
                on_step(step, times[-1])
        if timer:
            timer.uninstall()
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
        memory = cuda_memory_mb(device) if device.type == "cuda" else cpu_memory_mb()
        return _gather(rank, plan, times, totals, params, schedule, peak, comm, timer.events if timer else [],
                       memory)
    finally:
        ps.destroy_model_parallel()
        if dist.is_initialized():
            dist.destroy_process_group()


def _loss_totals(reports: list[dict[str, torch.Tensor]]) -> torch.Tensor:
    """[token-summed loss, tokens] of this rank's micro-batches (zeros off the last stage)."""
    if not reports:
        return torch.zeros(2, dtype=torch.float64)
    return torch.stack([r["lm loss"].double().cpu() for r in reports]).sum(dim=0)


def _gather(rank: int, plan: TrainPlan, times: list[float], totals: list[torch.Tensor], params: int,
            schedule: str, peak: int | None, comm: list[float], events: list[Event],
            memory: tuple[float, float, float, float] | None = None) -> RankResult:
    """Max step time over ranks; the loss is the token mean over the whole global batch."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    # last-stage ranks of TP rank 0 hold each DP rank's loss once
    owner = ps.is_pipeline_last_stage(ignore_virtual=True) and ps.get_tensor_model_parallel_rank() == 0
    sums = torch.stack(totals) if owner else torch.zeros(len(totals), 2, dtype=torch.float64)
    dist.all_reduce(sums)
    losses = tuple((sums[:, 0] / sums[:, 1].clamp(min=1)).tolist())
    by_rank: tuple[tuple[float, ...], ...] = ()
    skew: tuple[tuple[float, ...], ...] = ()
    if plan.time_collectives:
        parts = [torch.zeros(len(comm), dtype=torch.float64) for _ in range(plan.world_size)]
        dist.all_gather(parts, torch.tensor(comm, dtype=torch.float64))
        by_rank = tuple(tuple(p.tolist()) for p in parts)
        logs: list[list[Event]] = [[] for _ in range(plan.world_size)]
        dist.all_gather_object(logs, events)
        skew = tuple(tuple(skew_waits(logs, r, plan.iters)) for r in range(plan.world_size))
    if rank != 0:
        return RankResult(rank=rank, params=params, schedule=schedule, peak_memory_bytes=peak)
    return RankResult(rank=rank, step_times_s=tuple(t.tolist()), losses=losses, params=params,
                      schedule=schedule, peak_memory_bytes=peak, collective_s=by_rank, skew_s=skew, memory_mb=memory)
