"""In-node collective sweep: all-reduce, all-gather, reduce-scatter, all-to-all, send/recv.

Usage::

    points, failures = fabric_sweep(world=2)        # gloo on CPU, NCCL on GPU; spawned ranks
    TimingStore().record_fabric(points)

Conventions follow nccl-tests (PERFORMANCE.md): ``nbytes`` is the size of the full buffer
(all-gather's output, reduce-scatter's input), algorithm bandwidth = nbytes / time, bus bandwidth
= algbw x (2(n-1)/n for all-reduce, (n-1)/n for all-gather / reduce-scatter / all-to-all, 1 for
send/recv). Times are rank 0's median over ``reps`` after ``warmup``; an op the backend lacks
is reported in ``failures`` with the reason, the sweep goes on. ``fabric_fit.py`` fits the
projection's scale-up link to it.
"""

from __future__ import annotations

import datetime as dt
import os
import pickle
import socket
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.multiprocessing as mp

from primus_ext.measure.quiet import quiet_ranks
from primus_ext.measure.shims import ParallelLayout, free_port, parallel_context, resolve_device
from primus_ext.measure.single import device_name, library_versions
from primus_ext.measure.store import FabricPoint
from primus_ext.measure.timing import Clock, Stats

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
DEFAULT_SIZES = tuple(2**k for k in range(12, 25, 2))
"""4 KiB .. 16 MiB in x4 steps: latency-bound to bandwidth-bound on CPU gloo within seconds."""

BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}
"""nccl-tests bus-bandwidth factors (doc/PERFORMANCE.md)."""


def _op(name: str, nbytes: int, world: int, rank: int, dev: torch.device) -> Callable[[], None]:
    import torch.distributed as dist

    numel = max(world, nbytes // 2 // world * world)  # bf16 elements, divisible by world
    full = torch.ones(numel, dtype=torch.bfloat16, device=dev)
    shard = torch.ones(numel // world, dtype=torch.bfloat16, device=dev)
    out = torch.empty_like(full)
    if name == "all_reduce":
        return lambda: dist.all_reduce(full)
    if name == "all_gather":
        return lambda: dist.all_gather_into_tensor(out, shard)
    if name == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(shard, full)
    if name == "all_to_all":
        return lambda: dist.all_to_all_single(out, full)
    peer = rank ^ 1

    def send_recv() -> None:
        if peer >= world:
            return
        if rank % 2 == 0:
            dist.send(full, peer)
        else:
            dist.recv(out, peer)
    return send_recv


def _worker(rank: int, world: int, port: int, device_type: str, ops: Sequence[str], sizes: Sequence[int],
            reps: int, warmup: int, out_path: str) -> None:
    import torch.distributed as dist

    if device_type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    points: list[FabricPoint] = []
    failures: list[str] = []
    with parallel_context(ParallelLayout(world=world), device=device_type, rank=rank, master_port=port) as dev:
        clock = Clock(dev)
        backend = dist.get_backend()
        for name in ops:
            for nbytes in sizes:
                try:
                    fn = _op(name, nbytes, world, rank, dev)
                    samples = []
                    for i in range(warmup + reps):
                        dist.barrier()
                        a = clock.mark()
                        fn()
                        b = clock.mark()
                        clock.sync()
                        if i >= warmup:
                            samples.append(clock.ms(a, b))
                except (RuntimeError, ValueError) as err:
                    failures.append(f"{name}: {type(err).__name__}: {str(err).splitlines()[0][:200]}")
                    break
                st = Stats.of(samples)
                algbw = nbytes / (st.median_ms * 1e-3) / 1e9 if st.median_ms > 0 else 0.0
                points.append(FabricPoint(
                    device=device_name(dev), world=world, backend=backend, op=name, nbytes=nbytes,
                    time_ms=st.median_ms, busbw_gbps=algbw * BUS_FACTOR[name](world), spread=st.spread,
                    reps=reps, versions=library_versions(), host=socket.gethostname(),
                    date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds")))
    if rank == 0:
        Path(out_path).write_bytes(pickle.dumps((points, failures)))


def fabric_sweep(*, world: int | None = None, ops: Sequence[str] = OPS, sizes: Sequence[int] = DEFAULT_SIZES,
                 device: str | torch.device | None = None, reps: int = 10,
                 warmup: int = 3) -> tuple[list[FabricPoint], list[str]]:
    """Run the sweep on ``world`` spawned ranks (default: all GPUs, or 2 CPU ranks)."""
    dev = resolve_device(device)
    if world is None:
        world = torch.cuda.device_count() if dev.type == "cuda" else 2
    if world < 2:
        raise ValueError(f"a collective sweep needs at least 2 ranks (got world={world})")
    unknown = set(ops) - set(OPS)
    if unknown:
        raise ValueError(f"unknown collectives {sorted(unknown)}; known: {OPS}")
    with tempfile.TemporaryDirectory(prefix="primus-ext-fabric-") as tmp, quiet_ranks():
        out_path = os.path.join(tmp, "fabric.pkl")
        mp.start_processes(_worker, args=(world, free_port(), dev.type, tuple(ops), tuple(sizes), reps, warmup,
                                          out_path), nprocs=world, join=True, start_method="spawn")
        return pickle.loads(Path(out_path).read_bytes())

