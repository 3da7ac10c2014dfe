"""The stable segment of a run's iterations and its step time (pure functions, no I/O).

Rules (docs/logs.md):
- warm-up: the run's first ``WARMUP_ITERATIONS`` iterations (compilation, allocator growth, NCCL setup;
  Megatron's own ``training_log`` documents the first iteration as initialisation overhead), and any
  iteration whose printed time averages a window reaching into them; then leading iterations slower than
  ``SETTLE_FACTOR`` x the median of the rest (the step time has not settled yet).
- non-positive times (timer artefacts, e.g. NeMo's ``train_step_timing`` around a checkpoint) are excluded.
- spikes: times above ``SPIKE_FACTOR`` x the median (profiled steps, checkpoint saves, GC) are excluded.
- when warm-up leaves nothing (one line at ``log_interval`` = train_iters), the averaged lines are used
  and ``averaged`` is set: the figure then includes warm-up and overstates the step time.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Sequence

from primus_ext.logs.records import Iteration, StepStats

WARMUP_ITERATIONS = 2
"""Iterations 1-2 of a run are warm-up (index.csv's hand-read medians start at iteration 3; Megatron logs the
first iteration separately as initialisation overhead, megatron/training/training.py ``is_first_iteration``)."""
SETTLE_FACTOR = 1.5
"""A leading iteration slower than this x the median of the later ones is still warming up."""
SPIKE_FACTOR = 5.0
"""A step slower than this x the median is a spike (profiled step, checkpoint, GC pause), not the steady state."""


def _window_start(it: Iteration) -> int:
    return it.index - max(it.averaged_over, 1) + 1


def _spread(values: Sequence[float], median: float) -> float:
    if len(values) < 2 or median <= 0:
        return 0.0
    if len(values) < 4:
        return (max(values) - min(values)) / median
    q = statistics.quantiles(values, n=4, method="inclusive")
    return (q[2] - q[0]) / median


def _suffix_medians(values: Sequence[float]) -> list[float]:
    """``statistics.median(values[i:])`` for every ``i``, in O(n log n) (two heaps filled from the end), where
    recomputing each one cost O(n^2 log n) on a log whose first half is slow."""
    low: list[float] = []  # max-heap (negated) of the lower half
    high: list[float] = []  # min-heap of the upper half
    out = [0.0] * len(values)
    for i in range(len(values) - 1, -1, -1):
        value = values[i]
        if low and value > -low[0]:
            heapq.heappush(high, value)
        else:
            heapq.heappush(low, -value)
        if len(low) > len(high) + 1:
            heapq.heappush(high, -heapq.heappop(low))
        elif len(high) > len(low):
            heapq.heappush(low, -heapq.heappop(high))
        out[i] = -low[0] if len(low) > len(high) else (-low[0] + high[0]) / 2
    return out


def stable_stats(iterations: Sequence[Iteration]) -> StepStats | None:
    """Median step time of the stable segment, or ``None`` when no iteration has a positive time."""
    if not iterations:
        return None
    excluded: list[tuple[int, str]] = []
    first_index = _window_start(iterations[0])
    warm_end = first_index + WARMUP_ITERATIONS - 1
    warm = [it for it in iterations if _window_start(it) <= warm_end]
    rest = [it for it in iterations if _window_start(it) > warm_end]
    positive = [it for it in rest if it.step_time_s > 0]
    averaged = from_warmup = False
    if not positive:  # every line reaches into warm-up: use them, marked averaged
        rest, warm = list(iterations), []
        positive = [it for it in rest if it.step_time_s > 0]
        averaged = any(it.averaged_over > 1 for it in positive)
        from_warmup = True
    for it in warm:
        reason = "warm-up" if it.averaged_over <= 1 else (
            f"warm-up (averages iterations {_window_start(it)}-{it.index})")
        excluded.append((it.index, reason))
    for it in rest:
        if it.step_time_s <= 0:
            excluded.append((it.index, f"non-positive step time {it.step_time_s:g} s"))
    if not positive:
        return None
    # leading iterations still settling (each against the median of the steps after it, all computed at once)
    later_medians = _suffix_medians([p.step_time_s for p in positive])
    start = 0
    while len(positive) - start > 2:
        later = later_medians[start + 1]
        if positive[start].step_time_s <= SETTLE_FACTOR * later:
            break
        excluded.append((positive[start].index, f"warm-up (not settled: {positive[start].step_time_s / later:.1f}x "
                                                "the median of the later steps)"))
        start += 1
    positive = positive[start:]
    median = statistics.median(p.step_time_s for p in positive)
    kept = []
    for it in positive:
        if it.step_time_s > SPIKE_FACTOR * median:
            excluded.append((it.index, f"spike ({it.step_time_s / median:.1f}x the median)"))
        else:
            kept.append(it)
    times = [it.step_time_s for it in kept]
    median = statistics.median(times)
    excluded.sort(key=lambda e: e[0])
    return StepStats(median_s=median, spread=_spread(times, median), n=len(kept), first=kept[0].index,
                     last=kept[-1].index, excluded=tuple(excluded), averaged=averaged, from_warmup=from_warmup)


def stable_median(iterations: Sequence[Iteration], stats: StepStats, attr: str) -> float | None:
    """Median of ``attr`` over the iterations ``stats`` used (``None`` where none printed it)."""
    dropped = {i for i, _ in stats.excluded}
    vals = [getattr(it, attr) for it in iterations
            if stats.first <= it.index <= stats.last and it.index not in dropped and getattr(it, attr) is not None]
    return statistics.median(vals) if vals else None
