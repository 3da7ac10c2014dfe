"""Host time of a layer: the framework's own Python and dispatch work per pass, measured on this CPU.

    with parallel_context(device=torch.device("cpu")):
        h = host_time(shape)          # HostTime(fwd_s=..., bwd_s=..., fwd_ops=..., bwd_ops=...)

The real megatron-core module of ``shape``'s kind is built small (``minimal``: a few tokens, narrow hidden, the
kind's own structure: its norms, projections, router, dispatcher, experts) and run forward and backward on the CPU
in one thread with the stand-ins a GPU without Transformer Engine runs (PyTorch's fused attention, one grouped
GEMM for the experts, as TE's fused attention and grouped MLP are single calls), timed in process CPU time at two
token counts and extrapolated to none: what is left is the Python
of megatron-core's modules, autograd and torch's dispatcher, the host work a GPU step waits on when its kernels are
shorter (``model.roofline.host_floor_s``). A ``TorchDispatchMode`` counts the ATen operators each pass dispatches
(views excluded): on a GPU each is about one kernel launch. The measurement is of the local (torch) spec:
Transformer Engine's modules, which a GPU run uses, carry Python of their own (FP8 scaling state, its autocast) that
this CPU cannot run.
"""

from __future__ import annotations

import gc
import time
from dataclasses import replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from primus_ext.measure.build import build_layer
from primus_ext.measure.timing import _clear_grads, _output_tensor, run_backward
from primus_ext.model.rank_shape import RankShape
from primus_ext.specs.system import HostTime

TOKENS = (8, 32)
"""Token counts measured (micro-batch 1): the host time is the intercept of the line through them at 0 tokens, where
no operator has arithmetic left to do."""
MINIMAL_HIDDEN = 128
VIEW_OPS = ("aten.detach", "aten.view", "aten._unsafe_view", "aten.t.", "aten.alias", "aten.expand",
            "aten.as_strided", "aten.slice", "aten.select", "aten.split", "aten.permute", "aten.transpose",
            "aten.unsqueeze", "aten.squeeze", "aten.reshape", "aten.unbind", "aten.chunk", "aten.sym_size",
            "aten.is_same_size", "aten.lift_fresh")
"""Operators that only make a new view or read metadata: no kernel is launched for them."""


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not str(func).startswith(VIEW_OPS):
            self.ops += 1
        return func(*args, **(kwargs or {}))


def minimal(shape: RankShape, tokens: int) -> RankShape:
    """``shape`` shrunk to ``tokens`` tokens (micro-batch 1), ``MINIMAL_HIDDEN`` wide where its heads allow, in bf16
    (the GPU's fused attention and grouped expert GEMM run on the CPU in bf16 only: ``measure.build``'s stand-ins)."""
    small = shape.scaled(min(1.0, MINIMAL_HIDDEN / max(1, shape.arch.hidden_size)))
    return replace(small, seq_length=tokens, micro_batch_size=1, precision="bf16")


def _timed(shape: RankShape, reps: int, warmup: int, device: torch.device) -> tuple[float, float, int, int, int]:
    # the CPU runs the GPU's stand-ins (fused attention, grouped experts); a GPU what it would train with (TE)
    built = build_layer(shape, device=device, stand_ins=True if device.type == "cpu" else None)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    module, inputs, layers = built.module, built.make_inputs(), max(1, built.layers)
    module.train()
    fwd, bwd = [], []
    try:
        for i in range(warmup + reps):
            sync()
            t0 = time.process_time()
            out = _output_tensor(module(**inputs))
            t1 = time.process_time()
            grad = torch.ones_like(out)
            sync()  # a pass's own host work only: not the wait for the GPU, nor the gradient's allocation
            t2 = time.process_time()
            run_backward(out, grad)
            t3 = time.process_time()
            sync()
            del out
            _clear_grads(module, inputs)
            if i >= warmup:
                fwd.append(t1 - t0)
                bwd.append(t3 - t2)
        with _Count() as f_count:
            out = _output_tensor(module(**inputs))
        with _Count() as b_count:
            run_backward(out, torch.ones_like(out))
    finally:
        del built
        gc.collect()
    fwd.sort()
    bwd.sort()
    return fwd[len(fwd) // 2], bwd[len(bwd) // 2], f_count.ops, b_count.ops, layers


def host_time(shape: RankShape, *, reps: int = 7, warmup: int = 2, device: str | torch.device = "cpu") -> HostTime:
    """Host seconds and operators of one forward and one backward pass of ``shape``'s layer, per layer (inside an
    active ``shims.parallel_context`` on ``device``; torch runs single-threaded meanwhile). On a GPU the process CPU
    time of the passes is the host's own work (its kernels run asynchronously): ``benchmarks/gpu_kernel_sweep.py``
    measures it there, the training host's figure against this CPU's (``Efficiency.host_factor``)."""
    dev = torch.device(device)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        (f0, b0, fo, bo, n), (f1, b1, *_) = (_timed(minimal(shape, t), reps, warmup, dev) for t in TOKENS)
    finally:
        torch.set_num_threads(threads)
    t0, t1 = TOKENS

    def at_zero(low: float, high: float) -> float:
        return max(0.0, low - t0 * (high - low) / (t1 - t0))
    return HostTime(fwd_s=at_zero(f0, f1) / n, bwd_s=at_zero(b0, b1) / n, fwd_ops=round(fo / n),
                    bwd_ops=round(bo / n))


__all__ = ["host_time", "minimal"]
