"""Run a group of layer measurements on several real ranks (in-node TP/EP with communication).

Usage (what ``runner.measure_many`` does for a shape whose TP/EP group fits in the node)::

    results = measure_spawned(shapes, ParallelLayout(tp=2, world=2), scale, torch.device("cpu"), opts)

Ranks are started with ``torch.multiprocessing`` (spawn): gloo on CPU, NCCL on GPU, each rank
building the *global* config so megatron itself splits the weights and communicates. On CPU each
rank gets ``cores // world`` threads (oversubscription makes gloo runs 2-3x slower, shared notes).
Rank 0's timings are reported (collectives keep the ranks in step). The per-layer time-out is off
in this mode: ranks leaving the loop at different iterations would deadlock a collective.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from dataclasses import replace
from pathlib import Path

import torch
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException

from primus_ext.measure.quiet import quiet_ranks
from primus_ext.measure.shims import ParallelLayout, free_port, parallel_context
from primus_ext.measure.single import Measurement, MeasureOptions, failed, measure_one
from primus_ext.model.rank_shape import RankShape


def _worker(rank: int, layout: ParallelLayout, port: int, shapes: list[RankShape], scale: float,
            device_type: str, opts: MeasureOptions, out_path: str) -> None:
    if device_type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // layout.world))
    results: list[Measurement] = []
    with parallel_context(layout, device=device_type, rank=rank, master_port=port) as dev:
        for shape in shapes:
            results.append(measure_one(shape, scale, dev, opts, distributed=True, world=layout.world))
    if rank == 0:
        Path(out_path).write_bytes(pickle.dumps(results))


def measure_spawned(shapes: list[RankShape], layout: ParallelLayout, scale: float, device: torch.device,
                    opts: MeasureOptions) -> list[Measurement]:
    """Measure ``shapes`` on ``layout.world`` spawned ranks; a crashed group fails every shape."""
    opts = replace(opts, timeout_s=float("inf"))
    with tempfile.TemporaryDirectory(prefix="primus-ext-spawn-") as tmp, quiet_ranks():
        out_path = os.path.join(tmp, "results.pkl")
        try:
            mp.start_processes(
                _worker, args=(layout, free_port(), shapes, scale, device.type, opts, out_path),
                nprocs=layout.world, join=True, start_method="spawn")
            return pickle.loads(Path(out_path).read_bytes())
        except (ProcessException, OSError, pickle.UnpicklingError) as err:
            return [failed(s, scale, device, err, layout.world) for s in shapes]
