"""Host time of a layer: the framework's own Python and dispatch work per pass, measured on this CPU.

    with parallel_context(device=torch.device("cpu")):
        h = host_time(shape)          # HostTime(fwd_s=..., bwd_s=..., fwd_ops=..., bwd_ops=...)

The real megatron-core module of ``shape``'s kind is built at a minimal size (``MINIMAL``: a few rows, narrow
hidden, the kind's own structure: its norms, projections, router, dispatcher, experts) and run forward and backward
on the CPU, timed in process CPU time, while a ``TorchDispatchMode`` counts the ATen operators each pass dispatches:
on a GPU each is (about) one kernel launch. At that size the operators' own arithmetic is a few microseconds each,
so the time is the Python of megatron-core's modules, autograd and torch's dispatcher: the host work between
two kernels that a GPU step waits on when its kernels are shorter (``model.host``). The measurement is of the local
(torch) spec; Transformer Engine's modules, which a GPU run uses, carry Python of their own that this CPU cannot run.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from primus_ext.measure.build import build_layer
from primus_ext.measure.timing import _clear_grads, _output_tensor, run_backward
from primus_ext.model.rank_shape import RankShape

MINIMAL_TOKENS = 32
"""Tokens of the minimal measurement (micro-batch 1 x 64): enough rows for every kernel path, few enough that each
operator's arithmetic is microseconds."""
MINIMAL_HIDDEN = 128


@dataclass(frozen=True, kw_only=True)
class HostTime:
    """Host seconds and dispatched operators of one layer pass (``model.host`` prices them)."""

    fwd_s: float
    bwd_s: float
    fwd_ops: int
    bwd_ops: int


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


def minimal(shape: RankShape) -> RankShape:
    """``shape`` shrunk to the minimal measurement: the kind's structure (heads, experts, layers of a window
    period), ``MINIMAL_TOKENS`` tokens, ``MINIMAL_HIDDEN`` wide."""
    scale = min(1.0, MINIMAL_HIDDEN / max(1, shape.arch.hidden_size))
    small = shape.scaled(scale)
    return replace(small, seq_length=MINIMAL_TOKENS, micro_batch_size=1, precision="fp32")


def host_time(shape: RankShape, *, reps: int = 5, warmup: int = 2) -> HostTime:
    """Median host seconds and operator counts of one forward and one backward pass of ``shape``'s layer at the
    minimal size, per layer (inside an active ``shims.parallel_context`` on the CPU)."""
    built = build_layer(minimal(shape), device="cpu")
    module, inputs, n = built.module, built.make_inputs(), max(1, built.layers)
    module.train()
    fwd, bwd, counts = [], [], (0, 0)
    try:
        for i in range(warmup + reps):
            t0 = time.process_time()
            out = _output_tensor(module(**inputs))
            t1 = time.process_time()
            run_backward(out, torch.ones_like(out))
            t2 = time.process_time()
            del out
            _clear_grads(module, inputs)
            if i >= warmup:
                fwd.append(t1 - t0)
                bwd.append(t2 - t1)
        with _Count() as f_count:
            out = _output_tensor(module(**inputs))
        with _Count() as b_count:
            run_backward(out, torch.ones_like(out))
        counts = (f_count.ops, b_count.ops)
    finally:
        del built
        gc.collect()
    fwd.sort()
    bwd.sort()
    return HostTime(fwd_s=fwd[len(fwd) // 2] / n, bwd_s=bwd[len(bwd) // 2] / n,
                    fwd_ops=round(counts[0] / n), bwd_ops=round(counts[1] / n))


__all__ = ["HostTime", "host_time", "minimal"]
