"""CollectiveTimer: counts blocking collectives and async waits, logs them for skew pairing, and puts
every wrapped function back; skew_waits on hand-made logs."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from primus_ext.launcher.trainer.comm_timer import BOUND_IN, GRAD_BUFFER, CollectiveTimer, Event, skew_waits


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class _LateWork:
    """An async handle whose peer arrives late: ``wait()`` blocks."""

    def __init__(self, work, delay: float) -> None:
        self.work, self.delay = work, delay

    def wait(self):
        time.sleep(self.delay)
        return self.work.wait()

    def is_completed(self) -> bool:
        return True


def test_times_blocking_calls_and_async_waits(world_of_one, monkeypatch):
    original = dist.all_reduce
    slow = 0.05  # long enough that a loaded machine's scheduling noise stays well under it

    def slow_all_reduce(*args, **kwargs):  # a peer that arrives late: the wait is what gets counted
        if kwargs.get("async_op"):
            return _LateWork(original(*args, **kwargs), 2 * slow)
        time.sleep(slow)
        return original(*args, **kwargs)

    monkeypatch.setattr(dist, "all_reduce", slow_all_reduce)
    timer = CollectiveTimer().install()
    try:
        t = torch.ones(4)
        dist.all_reduce(t)
        dist.all_reduce(t)
        handle = dist.all_reduce(t, async_op=True)
        assert timer.read()[0] < 3 * slow  # launching the async one did not wait (waiting would add 2 * slow)
        assert handle.is_completed()  # the wrapped handle passes other attributes through
        time.sleep(slow)  # overlapped work: not counted
        handle.wait()
        dist.barrier()
        seconds, calls = timer.read()
        assert calls == 4  # three all-reduces and the barrier
        assert 4 * slow <= seconds < 4 * slow + 1.0
        assert torch.equal(t, torch.ones(4))  # world of one: the sums are the tensor itself
        timer.reset()
        assert timer.read() == (0.0, 0)
    finally:
        timer.uninstall()
    assert dist.all_reduce is slow_all_reduce


def test_coalesced_block_is_timed_on_exit(world_of_one, monkeypatch):
    import importlib

    buffer = importlib.import_module(GRAD_BUFFER)
    slow = 0.05  # long enough that a loaded machine's scheduling noise stays well under it

    class SlowExit:  # the coalesced collectives run when the block exits
        def __init__(self, *args, **kwargs) -> None:
            pass

        def __enter__(self):
            return None

        def __exit__(self, *exc):
            time.sleep(slow)
            return False

    monkeypatch.setattr(buffer, "_coalescing_manager", SlowExit)
    timer = CollectiveTimer().install()
    try:
        with buffer._coalescing_manager(None, async_ops=False) as cm:
            assert cm is None
        assert slow <= timer.read()[0] < slow + 1.0
    finally:
        timer.uninstall()
    assert buffer._coalescing_manager is SlowExit


def test_uninstall_restores_megatron_bound_collectives():
    import importlib

    modules = [importlib.import_module(name) for name in BOUND_IN]  # TP mappings and layers
    buffer = importlib.import_module(GRAD_BUFFER)

    def bound():
        return (*(m.dist_all_gather_func for m in modules), *(m.dist_reduce_scatter_func for m in modules),
                dist.all_gather, dist.batch_isend_irecv, buffer._coalescing_manager)

    before = bound()
    timer = CollectiveTimer().install()
    wrapped = bound()
    timer.uninstall()
    assert all(w is not b for w, b in zip(wrapped, before, strict=True))
    assert bound() == before


def _ev(step, seq, arrive, start, end, group=(0, 1)):
    return Event(step=step, group=group, seq=seq, arrive=arrive, block_start=start, block_end=end)


def test_skew_is_the_blocked_time_before_the_last_peer_arrives():
    rank0 = [
        _ev(0, 0, 1.0, 1.0, 1.5),  # sync: peer arrives at 1.3 -> 0.3 s of skew, 0.2 s transfer
        _ev(0, 1, 2.0, 2.1, 2.2),  # async: peer launched at 1.9, before the wait: no skew
        _ev(1, 2, 3.0, 3.0, 3.1),  # sync: arrived last -> no skew
        _ev(1, 0, 4.0, 4.0, 4.4, group=(0, 2)),  # another group: the third rank arrives at 4.5 -> capped
        _ev(-1, 3, 5.0, 5.0, 6.0),  # outside a timed step (the barriers between steps): ignored
    ]
    rank1 = [_ev(0, 0, 1.3, 1.3, 1.5), _ev(0, 1, 1.9, 2.3, 2.3), _ev(1, 2, 2.9, 2.9, 3.1), _ev(-1, 3, 5.9, 5.9, 6.0)]
    rank2 = [_ev(1, 0, 4.5, 4.5, 4.6, group=(0, 2))]
    skew = skew_waits([rank0, rank1, rank2], 0, steps=2)
    assert skew == pytest.approx([0.3, 0.4])
    assert skew_waits([rank0, rank1, rank2], 1, steps=2) == pytest.approx([0.0, 0.1])  # rank 1 came first at seq 2
    assert skew_waits([rank0, [], []], 0, steps=2) == [0.0, 0.0]  # nothing to pair with


def test_logs_paired_events_only_on_groups_of_two_or_more(world_of_one):
    timer = CollectiveTimer(log_events=True).install()
    try:
        timer.reset(step=0)
        dist.all_reduce(torch.ones(2))
        assert timer.events == []  # a world of one has no peer to wait for
        assert timer._group(None) == (0,)
    finally:
        timer.uninstall()


def test_event_intervals_are_the_call_for_sync_and_the_wait_for_async(world_of_one, monkeypatch):
    original = dist.all_reduce
    slow = 0.05  # long enough that a loaded machine's scheduling noise stays well under it

    def late(*args, **kwargs):
        if kwargs.get("async_op"):
            return _LateWork(original(*args, **kwargs), slow)
        time.sleep(slow)
        return original(*args, **kwargs)

    monkeypatch.setattr(dist, "all_reduce", late)
    timer = CollectiveTimer(log_events=True).install()
    monkeypatch.setattr(timer, "_group", lambda group: (0, 1))  # as if a peer were in the group
    try:
        timer.reset(step=3)
        dist.all_reduce(torch.ones(2))
        handle = dist.all_reduce(torch.ones(2), async_op=True)
        time.sleep(slow)
        handle.wait()
        handle.wait()  # a second wait does not move the logged interval
        timer.read()
        dist.all_reduce(torch.ones(2))  # after read(): outside the step
    finally:
        timer.uninstall()
    sync, async_, after = timer.events
    assert (sync.step, sync.seq, async_.seq, after.step) == (3, 0, 1, -1)
    assert sync.arrive == sync.block_start and sync.block_end - sync.block_start >= slow
    assert async_.block_start - async_.arrive >= slow  # the overlapped work is not blocked time
    assert slow <= async_.block_end - async_.block_start < 2 * slow + 0.5


class _Done:
    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    def wait(self):
        time.sleep(self.delay)
        return True


def test_async_coalesced_block_logs_its_wait_and_batched_p2p_waits_are_timed(monkeypatch):
    import importlib

    buffer = importlib.import_module(GRAD_BUFFER)
    slow = 0.05  # long enough that a loaded machine's scheduling noise stays well under it

    class AsyncCoalesced:  # the DDP grad reduce with overlap: launched at exit, waited for later
        def __init__(self, *args, **kwargs) -> None:
            pass

        def __enter__(self):
            return _Done(slow)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(buffer, "_coalescing_manager", AsyncCoalesced)
    monkeypatch.setattr(dist, "batch_isend_irecv", lambda ops: [_Done(slow) for _ in ops])
    timer = CollectiveTimer(log_events=True).install()
    monkeypatch.setattr(timer, "_group", lambda group: (0, 1))
    try:
        timer.reset(step=0)
        with buffer._coalescing_manager(None, async_ops=True) as handle:
            pass
        time.sleep(slow)  # overlapped backward compute
        handle.wait()
        for work in dist.batch_isend_irecv(["send", "recv"]):  # pipeline send/recv: timed, not paired
            assert work.wait()
        seconds, _ = timer.read()
    finally:
        timer.uninstall()
    (event,) = timer.events
    assert event.block_start - event.arrive >= slow and event.block_end - event.block_start >= slow
    assert 3 * slow <= seconds < 3 * slow + 1.0
