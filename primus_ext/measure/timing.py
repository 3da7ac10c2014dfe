"""Forward and backward timing of a built layer: warm-up, repetitions, median and spread.

Usage::

    timing = time_layer(built, warmup=2, reps=10)
    timing.fwd.median_ms, timing.bwd.spread, timing.recompute.median_ms

Clocks: ``time.perf_counter`` on CPU (kernels are synchronous), CUDA events on GPU (one
synchronize per iteration). Recompute: forward hooks on the modules megatron re-runs in backward
(``BuiltLayer.recompute_targets``) time that extra forward *inside* the backward; ``bwd`` is the
backward wall time minus it, so ``fwd + bwd + recompute`` is the measured iteration. The optional
weight-grad split times a second backward with parameters frozen (input-grad only) and reports
the difference of the medians.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from primus_ext.measure.build import BuiltLayer

MIN_REPS = 3
"""Fewest timed repetitions kept when a layer runs into its time-out (median of 3 is the least
that tolerates one outlier)."""


class MeasureTimeout(TimeoutError):
    """A layer did not finish ``MIN_REPS`` repetitions within its time budget."""


@dataclass(frozen=True, kw_only=True)
class Stats:
    """Summary of repeated timings in milliseconds."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    n: int

    @property
    def spread(self) -> float:
        """(p90 - p10) / median; 0 for a single sample."""
        return (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms > 0 else 0.0

    @classmethod
    def of(cls, samples_ms: list[float]) -> Stats:
        if not samples_ms:
            return cls(median_ms=0.0, p10_ms=0.0, p90_ms=0.0, n=0)
        if len(samples_ms) == 1:
            v = samples_ms[0]
            return cls(median_ms=v, p10_ms=v, p90_ms=v, n=1)
        deciles = statistics.quantiles(samples_ms, n=10, method="inclusive")
        return cls(median_ms=statistics.median(samples_ms), p10_ms=deciles[0], p90_ms=deciles[-1],
                   n=len(samples_ms))


@dataclass(frozen=True, kw_only=True)
class Timing:
    fwd: Stats
    bwd: Stats
    """Backward without the recompute forward."""
    recompute: Stats
    wgrad_ms: float | None = None


class Clock:
    """Marks on a timeline: perf_counter on CPU, CUDA events on GPU (read after ``sync``)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self) -> object:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def ms(self, start: object, end: object) -> float:
        if self.cuda:
            return float(start.elapsed_time(end))  # type: ignore[attr-defined]
        return (end - start) * 1e3  # type: ignore[operator]


def _output_tensor(out: object) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out  # type: ignore[return-value]


def run_backward(out: torch.Tensor, grad: torch.Tensor) -> None:
    torch.autograd.backward(out, grad_tensors=grad)


def _clear_grads(module: torch.nn.Module, inputs: dict[str, torch.Tensor | None]) -> None:
    for p in module.parameters():
        p.grad = None
    for t in inputs.values():
        if isinstance(t, torch.Tensor) and t.requires_grad:
            t.grad = None


def time_layer(built: BuiltLayer, *, warmup: int = 2, reps: int = 10, timeout_s: float = 120.0,
               split_wgrad: bool = False) -> Timing:
    """Time ``reps`` forward/backward iterations after ``warmup`` ones (see module docstring)."""
    clock = Clock(built.device)
    module = built.module
    module.train()
    inputs = built.make_inputs()
    spans: list[tuple[object, object]] = []
    in_backward = [False]
    pending: list[object] = []

    def pre_hook(_mod: torch.nn.Module, _args: object) -> None:
        if in_backward[0]:
            pending.append(clock.mark())

    def post_hook(_mod: torch.nn.Module, _args: object, _out: object) -> None:
        if in_backward[0] and pending:
            spans.append((pending.pop(), clock.mark()))

    handles = [m.register_forward_pre_hook(pre_hook) for m in built.recompute_targets]
    handles += [m.register_forward_hook(post_hook) for m in built.recompute_targets]
    fwd: list[float] = []
    bwd: list[float] = []
    rec: list[float] = []
    grad: torch.Tensor | None = None
    start = time.perf_counter()
    try:
        for i in range(warmup + reps):
            spans.clear()
            t0 = clock.mark()
            out = _output_tensor(module(**inputs))
            t1 = clock.mark()
            if grad is None:
                grad = torch.ones_like(out) if out.dtype == torch.float32 else torch.randn_like(out)
            in_backward[0] = True
            run_backward(out, grad)
            in_backward[0] = False
            t2 = clock.mark()
            clock.sync()
            del out
            _clear_grads(module, inputs)
            if i >= warmup:
                recompute = float(sum(clock.ms(a, b) for a, b in spans))
                fwd.append(clock.ms(t0, t1))
                bwd.append(clock.ms(t1, t2) - recompute)
                rec.append(recompute)
            if time.perf_counter() - start > timeout_s:
                if len(fwd) < MIN_REPS:
                    raise MeasureTimeout(f"{len(fwd)} of {MIN_REPS} repetitions in {timeout_s:g} s")
                break
    finally:
        in_backward[0] = False
        for h in handles:
            h.remove()
    wgrad = None
    if split_wgrad and grad is not None:
        dgrad = _time_input_grad_only(built, inputs, grad, clock, reps=max(MIN_REPS, len(bwd) // 2))
        wgrad = max(0.0, Stats.of(bwd).median_ms + Stats.of(rec).median_ms - dgrad)
    return Timing(fwd=Stats.of(fwd), bwd=Stats.of(bwd), recompute=Stats.of(rec), wgrad_ms=wgrad)


def _time_input_grad_only(built: BuiltLayer, inputs: dict[str, torch.Tensor | None], grad: torch.Tensor,
                          clock: Clock, *, reps: int) -> float:
    """Median backward ms with every parameter frozen (only input grads); 0 if no input needs grad."""
    if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs.values()):
        return 0.0
    params = [p for p in built.module.parameters() if p.requires_grad]
    samples: list[float] = []
    try:
        for p in params:
            p.requires_grad_(False)
        for _ in range(reps + 1):
            out = _output_tensor(built.module(**inputs))
            t1 = clock.mark()
            run_backward(out, grad)
            t2 = clock.mark()
            clock.sync()
            samples.append(clock.ms(t1, t2))
            _clear_grads(built.module, inputs)
    finally:
        for p in params:
            p.requires_grad_(True)
    return Stats.of(samples[1:]).median_ms


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Milliseconds of one call of ``fn`` on ``device`` (synchronised)."""
    clock = Clock(device)
    clock.sync()
    a = clock.mark()
    fn()
    b = clock.mark()
    clock.sync()
    return clock.ms(a, b)
