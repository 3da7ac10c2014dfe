"""Wall time a rank spends inside ``torch.distributed`` collectives per step, and how much of it is
waiting for a peer that had not arrived yet (rank skew).

The built-in trainer's step time is one number; to compare a real run with a projection's
breakdown (compute vs exposed communication) each rank can also count the seconds its collectives
block it: transfer plus the wait for the slower peer, which a one-rank layer measurement cannot
see. ``CollectiveTimer.install()`` wraps the ``torch.distributed`` functions megatron-core calls
through the module (``torch.distributed.all_reduce(...)`` in the tensor-parallel mappings, the
loss all-reduces, the batched pipeline send/recv), the two functions the tensor-parallel mappings
and layers bind at import for sequence parallelism (``dist_all_gather_func``,
``dist_reduce_scatter_func``) and the coalescing manager the DDP grad buffer binds; ``uninstall()``
restores them all.

A call with ``async_op=True`` is timed twice: its launch, and the ``wait()`` on the handle it
returns (megatron's backward all-reduce of the input gradient, overlapped with the weight-gradient
GEMM, is waited for this way); the work it overlapped with is not counted.

Rank skew: each call on a group of two or more ranks is also logged as an ``Event`` (the group's
ranks, its sequence number on that group, when the rank arrived and when it blocked / unblocked).
The n-th call on a group is the same collective on every member, so ``skew_waits`` can pair them
across ranks: the part of a rank's blocked time before the last peer arrived is skew, the rest is
transfer. ``time.perf_counter`` is CLOCK_MONOTONIC, one clock for every process of a Linux
machine: the pairing is valid for local ranks (the built-in trainer's), not across nodes. Host
clocks time gloo's transfers; an NCCL call returns once enqueued, so the trainer times CPU runs only.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

TIMED = ("all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "reduce_scatter",
         "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all_single", "broadcast", "send", "recv",
         "barrier", "batch_isend_irecv")
"""The ``torch.distributed`` functions timed (those megatron-core calls on the module at run time).
``isend`` / ``irecv`` are not wrapped: ``P2POp`` accepts only the original functions, so megatron's
unbatched pipeline path (``overlap_p2p_comm``) goes untimed; its batched path is timed."""
POINT_TO_POINT = frozenset({"send", "recv", "batch_isend_irecv"})
"""Not logged for skew pairing: a point-to-point call has no group-wide sequence."""
BOUND_IN = ("megatron.core.tensor_parallel.mappings", "megatron.core.tensor_parallel.layers")
BOUND = ("dist_all_gather_func", "dist_reduce_scatter_func")
"""Collectives megatron-core's tensor-parallel mappings and layers bind as module globals at import
(sequence parallelism's all-gathers and reduce-scatters, the async input-gradient reduce-scatter)."""
GRAD_BUFFER = "megatron.core.distributed.param_and_grad_buffer"
"""Binds ``torch.distributed._coalescing_manager`` at import: the DDP grad reduce / param gather run
their collectives when its block exits (or on the returned handle's ``wait()``), both timed."""


@dataclass(frozen=True, slots=True)
class Event:
    """One collective as one rank saw it (perf_counter seconds)."""

    step: int
    group: tuple[int, ...]
    """Global ranks of the process group."""
    seq: int
    """This call's index among the rank's calls on ``group`` (the same collective on every member)."""
    arrive: float
    """When the rank entered (sync) or launched (async) the collective."""
    block_start: float
    block_end: float
    """The blocked interval: the call itself (sync) or the ``wait()`` on its handle (async)."""


class CollectiveTimer:
    """Accumulates seconds and calls inside collectives between ``reset()`` and ``read()``."""

    def __init__(self, *, log_events: bool = False) -> None:
        self.seconds = 0.0
        self.calls = 0
        self.step = -1
        """Label of the events logged now (-1: outside a timed step, ignored by ``skew_waits``)."""
        self.log_events = log_events
        self.events: list[Event] = []
        self._seq: dict[tuple[int, ...], int] = {}
        self._saved: dict[tuple[object, str], Callable] = {}

    def _group(self, group: object) -> tuple[int, ...]:
        import torch.distributed as dist

        return tuple(dist.get_process_group_ranks(group if group is not None else dist.group.WORLD))

    def _log(self, group: object, arrive: float, start: float, end: float) -> Callable[[float, float], None] | None:
        """Log an event; for an async call returns the setter of its blocked interval (the wait)."""
        ranks = self._group(group)
        if len(ranks) < 2:
            return None
        seq = self._seq.get(ranks, 0)
        self._seq[ranks] = seq + 1
        index = len(self.events)
        self.events.append(Event(step=self.step, group=ranks, seq=seq, arrive=arrive, block_start=start,
                                 block_end=end))

        def set_wait(s: float, e: float) -> None:
            self.events[index] = replace(self.events[index], block_start=s, block_end=e)

        return set_wait

    def _wrap(self, fn: Callable, name: str) -> Callable:
        params = inspect.signature(fn).parameters
        group_at = list(params).index("group") if "group" in params else None
        paired = name not in POINT_TO_POINT

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                out = fn(*args, **kwargs)
            finally:
                end = time.perf_counter()
                self.seconds += end - start
                self.calls += 1
            if name == "batch_isend_irecv":
                return [_TimedWork(work, self, None) for work in out]
            is_async = bool(kwargs.get("async_op")) and out is not None
            set_wait = None
            if self.log_events and paired:
                group = kwargs.get("group", args[group_at] if group_at is not None and len(args) > group_at else None)
                set_wait = self._log(group, start, start, start if is_async else end)
            return _TimedWork(out, self, set_wait) if is_async else out

        return timed

    def _wrap_coalescing(self, manager: Callable, _name: str) -> Callable:
        timer = self

        class Timed:
            def __init__(self, group: object = None, *args, **kwargs) -> None:
                self._group, self._async = group, bool(kwargs.get("async_ops"))
                self._ctx = manager(group, *args, **kwargs)
                self._work: _TimedWork | None = None

            def __enter__(self):
                cm = self._ctx.__enter__()
                self._work = None if cm is None else _TimedWork(cm, timer, None)
                return self._work

            def __exit__(self, *exc):
                start = time.perf_counter()
                try:
                    return self._ctx.__exit__(*exc)
                finally:
                    end = time.perf_counter()
                    timer.seconds += end - start
                    if timer.log_events:  # the coalesced collectives launch here; async: blocked in wait()
                        set_wait = timer._log(self._group, start, start, start if self._async else end)
                        if self._async and self._work is not None:
                            self._work._set_wait = set_wait

        return Timed

    def install(self) -> CollectiveTimer:
        import importlib

        import torch.distributed as dist

        targets = [(dist, name, self._wrap) for name in TIMED]
        try:
            for module_name in BOUND_IN:
                module = importlib.import_module(module_name)
                targets += [(module, name, self._wrap) for name in BOUND]
            targets.append((importlib.import_module(GRAD_BUFFER), "_coalescing_manager", self._wrap_coalescing))
        except ImportError:  # megatron-core absent: only torch.distributed is timed
            pass
        for module, name, wrap in targets:
            fn = getattr(module, name, None)
            if fn is not None and (module, name) not in self._saved:
                self._saved[(module, name)] = fn
                setattr(module, name, wrap(fn, name))
        return self

    def uninstall(self) -> None:
        for (module, name), fn in self._saved.items():
            setattr(module, name, fn)
        self._saved.clear()

    def reset(self, step: int = -1) -> None:
        """Zero the counters; ``step`` labels the events logged from now on."""
        self.seconds, self.calls, self.step = 0.0, 0, step

    def read(self) -> tuple[float, int]:
        """(seconds, calls) since the last ``reset()``; stops labelling events with that step."""
        self.step = -1
        return self.seconds, self.calls


class _TimedWork:
    """An async collective's handle whose ``wait()`` adds its seconds to the timer (and logs them)."""

    def __init__(self, work: object, timer: CollectiveTimer, set_wait: Callable[[float, float], None] | None):
        self._work, self._timer, self._set_wait = work, timer, set_wait

    def wait(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            end = time.perf_counter()
            self._timer.seconds += end - start
            if self._set_wait is not None:
                self._set_wait(start, end)
                self._set_wait = None  # a second wait() on a finished handle is not the blocked interval

    def __getattr__(self, name: str):
        return getattr(self._work, name)


def skew_waits(events_by_rank: Sequence[Sequence[Event]], rank: int, steps: int) -> list[float]:
    """Per step, the seconds ``rank`` was blocked in collectives before the last peer had arrived.

    ``events_by_rank[r]`` is rank ``r``'s log. For each of ``rank``'s events, the peers' events with
    the same group and sequence number are the same collective; the blocked interval up to the latest
    peer arrival is skew (capped at the blocked interval). Events a peer did not log are skipped.
    """
    peers: dict[tuple[tuple[int, ...], int], float] = {}
    for r, log in enumerate(events_by_rank):
        if r == rank:
            continue
        for e in log:
            key = (e.group, e.seq)
            peers[key] = max(peers.get(key, e.arrive), e.arrive)
    out = [0.0] * steps
    for e in events_by_rank[rank]:
        last = peers.get((e.group, e.seq))
        if last is None or not 0 <= e.step < steps:
            continue
        out[e.step] += max(0.0, min(e.block_end, last) - e.block_start)
    return out
