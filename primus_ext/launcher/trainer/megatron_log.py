"""The built-in trainer's output in Megatron-LM's own format, so ``primus_ext.logs.read_log`` reads it.

Field layout of megatron-core 0.16's ``training_log`` (megatron/training/training.py, core_v0.16.1) and its
memory report (megatron/training/utils.py ``report_memory``; MB = 2**20 bytes). Optional fields Megatron
leaves out when they do not apply are left out the same way (throughput without ``log_throughput``, grad
norm when the optimizer returns none). On CPU there is no allocator to ask for "max reserved": the memory
line then carries the process's peak resident set size (``getrusage`` ``ru_maxrss``) in all four figures.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Sequence
from datetime import datetime

MB = 1024.0 * 1024.0
"""megatron/training/utils.py ``report_memory``: ``mega_bytes = 1024.0 * 1024.0``."""


def iteration_line(*, iteration: int, train_iters: int, consumed_samples: int, step_time_s: float,
                   learning_rate: float, global_batch_size: int, loss: float | None = None,
                   throughput_tflops: float | None = None, loss_scale: float = 1.0, grad_norm: float | None = None,
                   when: datetime | None = None) -> str:
    """One ``training_log`` line, field for field as megatron-core 0.16 prints it."""
    stamp = (when or datetime.now()).strftime("%Y-%m-%d %H:%M:%S.%f")
    text = f" [{stamp}]"
    text += f" iteration {iteration:8d}/{train_iters:8d} |"
    text += f" consumed samples: {consumed_samples:12d} |"
    text += f" elapsed time per iteration (ms): {step_time_s * 1000.0:.1f} |"
    if throughput_tflops is not None:
        text += f" throughput per GPU (TFLOP/s/GPU): {throughput_tflops:.1f} |"
    text += f" learning rate: {learning_rate:.6E} |"
    text += f" global batch size: {global_batch_size:5d} |"
    if loss is not None and loss > 0.0:  # megatron prints a loss only when its average is positive
        text += f" lm loss: {loss:.6E} |"
    text += f" loss scale: {loss_scale:.1f} |"
    if grad_norm is not None:
        text += f" grad norm: {grad_norm:.3f} |"
    text += f" number of skipped iterations: {0:3d} |"
    text += f" number of nan iterations: {0:3d} |"
    return text


def memory_line(*, rank: int, after_iterations: int, allocated_mb: float, max_allocated_mb: float,
                reserved_mb: float, max_reserved_mb: float) -> str:
    """``report_memory(f'(after {iteration} iterations)')`` as rank ``rank`` prints it."""
    return (f"[Rank {rank}] (after {after_iterations} iterations) memory (MB)"
            f" | allocated: {allocated_mb:.2f} | max allocated: {max_allocated_mb:.2f}"
            f" | reserved: {reserved_mb:.2f} | max reserved: {max_reserved_mb:.2f}")


def cpu_memory_mb() -> tuple[float, float, float, float]:
    """This process's peak resident set size as (allocated, max allocated, reserved, max reserved) in MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak_bytes = peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB, macOS bytes (getrusage(2))
    return (peak_bytes / MB,) * 4


def cuda_memory_mb(device: object) -> tuple[float, float, float, float]:
    import torch

    return (torch.cuda.memory_allocated(device) / MB, torch.cuda.max_memory_allocated(device) / MB,
            torch.cuda.memory_reserved(device) / MB, torch.cuda.max_memory_reserved(device) / MB)


def training_log_lines(*, step_times_s: Sequence[float], losses: Sequence[float], global_batch_size: int,
                       learning_rate: float, memory_mb: tuple[float, float, float, float] | None,
                       memory_after: int = 2, rank: int = 0) -> list[str]:
    """Every iteration's line, with the memory report after iteration ``memory_after`` as Megatron places it
    (after the second iteration, once the optimizer state exists; our figures are the run's peaks)."""
    iters = len(step_times_s)
    out = []
    for i, step_s in enumerate(step_times_s, start=1):
        loss = losses[i - 1] if i - 1 < len(losses) else None
        out.append(iteration_line(iteration=i, train_iters=iters, consumed_samples=i * global_batch_size,
                                  step_time_s=step_s, learning_rate=learning_rate,
                                  global_batch_size=global_batch_size, loss=loss))
        if memory_mb is not None and i == min(memory_after, iters):
            out.append(memory_line(rank=rank, after_iterations=i, allocated_mb=memory_mb[0],
                                   max_allocated_mb=memory_mb[1], reserved_mb=memory_mb[2],
                                   max_reserved_mb=memory_mb[3]))
    return out
