"""Run the built-in trainer on ``world_size`` local ranks and collect real step times.

Usage::

    from primus_ext.launcher.trainer import run_training, tiny_model
    from primus_ext.specs import ExecutionSpec
    result = run_training(tiny_model(), ExecutionSpec(tensor_model_parallel_size=2, seq_length=64,
                          global_batch_size=2), world_size=2, iters=4, device="cpu")
    print(result.median_step_time_s, result.spread)

Ranks are started like torchrun would (one process per rank, ``MASTER_ADDR``/``MASTER_PORT``),
here with ``torch.multiprocessing`` (spawn): gloo on CPU, NCCL on CUDA. A one-rank run still goes
through a child process so that the CPU shims never leak into the caller.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from primus_ext.errors import PrimusExtError
from primus_ext.launcher.trainer.megatron_log import training_log_lines
from primus_ext.launcher.trainer.plan import QUIET_WARNINGS, TrainPlan, plan_run
from primus_ext.measure.quiet import CPU_NOTES, quiet_ranks
from primus_ext.specs import ExecutionSpec, ModelSpec


class TrainingFailed(PrimusExtError):
    """A rank of the built-in trainer raised; the message carries the rank and the reason."""

    exit_code = 1


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    """Measured step times of a short real run (warm-up iterations excluded from the statistics)."""

    step_times_s: tuple[float, ...]
    """Every iteration, warm-up included (max over ranks of the barrier-to-barrier wall time)."""
    warmup: int
    losses: tuple[float, ...]
    world_size: int
    tp: int
    pp: int
    dp: int
    vpp: int
    num_microbatches: int
    tokens_per_step: int
    device: str
    backend: str
    schedule: str
    """megatron's forward-backward function that ran (``forward_backward_no_pipelining``, ...)."""
    params_per_rank: tuple[int, ...]
    peak_memory_bytes: int | None = None
    collective_s_by_rank: tuple[tuple[float, ...], ...] = ()
    """Per rank, every iteration: seconds blocked inside collectives, async waits included (empty
    unless ``time_collectives``)."""
    skew_s_by_rank: tuple[tuple[float, ...], ...] = ()
    """Per rank, every iteration: the part of those seconds spent waiting for a peer to arrive."""
    global_batch_size: int = 0
    learning_rate: float = 0.0
    memory_mb: tuple[float, float, float, float] | None = None
    """Rank 0's (allocated, max allocated, reserved, max reserved) MB; on CPU the peak RSS in all four."""

    def log_lines(self) -> list[str]:
        """The run in Megatron-LM's ``training_log`` format (``primus_ext.logs.read_log`` reads it back)."""
        return training_log_lines(step_times_s=self.step_times_s, losses=self.losses,
                                  global_batch_size=self.global_batch_size, learning_rate=self.learning_rate,
                                  memory_mb=self.memory_mb)

    @property
    def measured_s(self) -> tuple[float, ...]:
        return self.step_times_s[self.warmup:]

    @property
    def median_step_time_s(self) -> float:
        return statistics.median(self.measured_s)

    @property
    def spread(self) -> float:
        """Relative spread (max - min) / median of the measured steps (0 for one step)."""
        vals = self.measured_s
        return (max(vals) - min(vals)) / self.median_step_time_s if len(vals) > 1 else 0.0

    @property
    def median_collective_s(self) -> tuple[float, ...]:
        """Per rank, the median over measured steps of the seconds blocked inside collectives."""
        return tuple(statistics.median(r[self.warmup:]) for r in self.collective_s_by_rank)

    @property
    def median_skew_s(self) -> tuple[float, ...]:
        """Per rank, the median over measured steps of the seconds waiting for a peer to arrive."""
        return tuple(statistics.median(r[self.warmup:]) for r in self.skew_s_by_rank)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_step / (self.median_step_time_s * self.world_size)

    def as_dict(self) -> dict[str, object]:
        return {
            "step_times_s": list(self.step_times_s), "warmup": self.warmup, "losses": list(self.losses),
            "median_step_time_s": self.median_step_time_s, "spread": self.spread,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "world_size": self.world_size,
            "tp": self.tp, "pp": self.pp, "dp": self.dp, "vpp": self.vpp,
            "num_microbatches": self.num_microbatches, "device": self.device, "backend": self.backend,
            "schedule": self.schedule, "params_per_rank": list(self.params_per_rank),
            "peak_memory_bytes": self.peak_memory_bytes,
            "collective_s_by_rank": [list(r) for r in self.collective_s_by_rank],
            "skew_s_by_rank": [list(r) for r in self.skew_s_by_rank],
        }


def free_port() -> int:
    """A free TCP port on the loopback interface for the rendezvous."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _entry(rank: int, plan: TrainPlan, port: int, queue) -> None:
    import traceback

    from primus_ext.launcher.trainer.worker import train_rank

    def step_done(step: int, seconds: float) -> None:  # rank 0 tells the parent, for its progress line
        queue.put(("step", rank, (step, seconds)))

    try:
        queue.put(("ok", rank, train_rank(rank, plan, port, on_step=step_done if rank == 0 else None)))
    except BaseException as err:  # reported to the parent with the traceback, then re-raised
        queue.put(("error", rank, f"{type(err).__name__}: {err}\n{traceback.format_exc()}"))
        raise


def run_plan(plan: TrainPlan, *, timeout_s: float = 600.0,
             progress: Callable[[int, int, float], None] | None = None,
             log: TextIO | bool | None = True) -> TrainResult:
    """Spawn ``plan.world_size`` ranks, wait for them, and assemble the result.

    ``log``: where the run's Megatron-format lines (``TrainResult.log_lines``) are printed once the ranks are
    done: ``True`` = stderr (stdout may carry JSON), a stream, or ``False``/``None`` for none.

    ``progress(done, iters, step_s)`` is called in this process after each iteration (rank 0's wall time of
    that step). ``timeout_s`` bounds the wait for the next message of a rank (an iteration or a result)."""
    import queue as queue_mod

    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, plan, port, results), daemon=False)
             for r in range(plan.world_size)]
    with quiet_ranks(QUIET_WARNINGS + (CPU_NOTES if plan.device == "cpu" else ())):
        for p in procs:
            p.start()
    got: dict[int, object] = {}
    errors: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < plan.world_size and not errors:
            try:
                status, rank, payload = results.get(timeout=1.0)
            except queue_mod.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in got]
                if dead:
                    errors.append(f"rank(s) {dead} exited with code(s) {[procs[r].exitcode for r in dead]} "
                                  "before reporting (is the caller's main module guarded by "
                                  "`if __name__ == '__main__'`?)")
                elif time.monotonic() > deadline:
                    errors.append(f"no step or result from the ranks within {timeout_s:.0f} s")
                continue
            if status == "step":
                deadline = time.monotonic() + timeout_s
                if progress:
                    progress(payload[0] + 1, plan.iters, payload[1])
            elif status == "ok":
                got[rank] = payload
            else:
                errors.append(f"rank {rank}: {payload}")
    finally:
        for p in procs:
            p.join(timeout=5 if errors else 60)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    if errors:
        raise TrainingFailed("built-in trainer failed:\n" + "\n".join(errors))
    first = got[0]
    e = plan.execution
    result = TrainResult(
        step_times_s=first.step_times_s, warmup=plan.warmup, losses=first.losses,
        world_size=plan.world_size, tp=e.tp, pp=e.pp, dp=e.dp, vpp=e.vpp,
        num_microbatches=plan.num_microbatches, tokens_per_step=plan.tokens_per_step,
        device=plan.device, backend="gloo" if plan.device == "cpu" else "nccl", schedule=first.schedule,
        params_per_rank=tuple(got[r].params for r in sorted(got)), peak_memory_bytes=first.peak_memory_bytes,
        collective_s_by_rank=first.collective_s, skew_s_by_rank=first.skew_s,
        global_batch_size=e.global_batch_size, learning_rate=plan.lr, memory_mb=first.memory_mb,
    )
    stream = sys.stderr if log is True else log or None
    if stream is not None:
        stream.write("".join(f"{line}\n" for line in result.log_lines()))
        stream.flush()
    return result


def run_training(model: ModelSpec, execution: ExecutionSpec, *, world_size: int, iters: int, device: str = "cpu",
                 warmup: int = 1, seed: int = 1234, timeout_s: float = 600.0, time_collectives: bool = False,
                 progress: Callable[[int, int, float], None] | None = None,
                 log: TextIO | bool | None = True) -> TrainResult:
    """Train ``model`` under ``execution`` for ``iters`` steps on ``world_size`` local ranks.

    DP is derived (world / (TP*PP*CP)); raises ``RecipeError`` (exit 2) for what the built-in
    trainer cannot run and ``TrainingFailed`` when a rank fails. ``time_collectives`` also records
    each rank's seconds blocked inside collectives per step (``collective_s_by_rank``) and the part
    of them spent waiting for a peer to arrive (``skew_s_by_rank``; ``comm_timer.py``). ``progress(done,
    iters, step_s)`` is called after each iteration (``run_plan``); ``log``: where the Megatron-format lines go
    (``run_plan``).
    """
    plan = plan_run(model, execution, world_size=world_size, iters=iters, device=device, warmup=warmup,
                    seed=seed, time_collectives=time_collectives)
    return run_plan(plan, timeout_s=timeout_s, progress=progress, log=log)
