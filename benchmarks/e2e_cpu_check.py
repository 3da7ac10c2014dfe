"""End-to-end check of the hybrid method on this machine (issue 6), a benchmark, not a unit test.

    python benchmarks/e2e_cpu_check.py [--repeats 3] [--iters 6]

Each trial, for each configuration (DP=2, TP=2), interleaved so that both sides see the same
machine state:

1. Measure the local fabric with the collective sweep (2 gloo ranks) and fit the CPU profile's
   scale-up link to it (all-reduce bus bandwidth and latency per step, ``fabric_fit.py``).
2. Measure a small megatron-core GPT's layers with ONE rank (real modules, this CPU), at the thread
   share a rank gets in the 2-rank run (cores / 2), into a fresh scratch timing store, and project
   the 2-rank run from it.
3. Train that 2-rank run for real with the built-in megatron-core trainer (gloo), timing each
   rank's seconds inside collectives (blocking calls and async waits) and the part of them spent
   waiting for the other rank to arrive (``comm_timer.py``).
4. Train the DP=2 run's per-rank work on ONE rank alone (one thread, the other core idle): the
   one-rank measurement's condition, for the cost of two ranks sharing the machine.

Prints each trial, then the medians over trials: projected vs measured step, the signed error, the
spread of both sides, the step split into communication (projected exposed vs measured inside
collectives, and the skew part) and the rest, and a DP=2 rank's rest against the same work on one
rank alone. The machine is noisy (2 shared cores): read the error against the spread.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from primus_ext.hardware import load_system
from primus_ext.measure.fabric_fit import scaleup_from_sweep, with_measured_scaleup
from primus_ext.model.layers import rank_shapes
from primus_ext.projection import project
from primus_ext.projection.evaluate import clear_cost_cache
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

MODEL = ModelSpec(name="tiny-gpt", num_layers=4, hidden_size=256, ffn_hidden_size=1024, num_attention_heads=8,
                  num_query_groups=2, kv_channels=32, vocab_size=2048, max_position_embeddings=512)
SEQ, MBS, GBS = 512, 2, 8


def executions() -> dict[str, ExecutionSpec]:
    base = dict(seq_length=SEQ, micro_batch_size=MBS, global_batch_size=GBS, precision="fp32",
                use_distributed_optimizer=False, overlap_grad_reduce=False)
    return {
        "DP=2": ExecutionSpec(data_parallel_size=2, **base),
        "TP=2": ExecutionSpec(tensor_model_parallel_size=2, sequence_parallel=False, data_parallel_size=1,
                                   **base),
    }


def cpu_system(points) -> SystemSpec:
    """The ``cpu`` profile with its scale-up link fitted to this machine's sweep (``fabric_fit.py``)."""
    fit = scaleup_from_sweep(points)
    if fit is None:
        raise SystemExit("the fabric sweep returned no all-reduce points")
    return with_measured_scaleup(load_system("cpu", 1), fit)


def one_rank_alone(iters: int) -> float:
    """Median step (s) of the DP=2 run's per-rank work (GBS / 2) trained by ONE rank with one thread,
    the other core idle: the same work as a DP=2 rank without a second rank sharing the machine."""
    from primus_ext.launcher.trainer.plan import plan_run
    from primus_ext.launcher.trainer.run import run_plan

    execution = replace(executions()["DP=2"], data_parallel_size=1, global_batch_size=GBS // 2)
    plan = plan_run(MODEL, execution, world_size=1, iters=iters, warmup=2, device="cpu", cores=1)
    seconds = run_plan(plan).median_step_time_s
    print(f"  one rank alone, DP=2's per-rank work (1 thread): {seconds * 1e3:.0f} ms", flush=True)
    return seconds


@dataclass(frozen=True)
class Trial:
    """One interleaved trial of one configuration: a fresh measurement and projection, then a real run."""

    projected_s: float
    projected_compute_s: float
    projected_comm_s: float
    """Exposed communication of the projection."""
    measured_s: float
    measured_comm_s: float
    """Rank 0's median seconds per step inside collectives (blocking calls and async waits)."""
    measured_skew_s: float
    """The part of it rank 0 spent waiting for the other rank to arrive (rank skew)."""


def trial(label: str, execution: ExecutionSpec, system: SystemSpec, iters: int) -> Trial:
    from primus_ext.launcher.trainer.run import run_training
    from primus_ext.measure.runner import MeasureOptions, measure_many
    from primus_ext.measure.store import TimingStore

    with tempfile.TemporaryDirectory(prefix="primus-ext-e2e-") as tmp:
        store = TimingStore(Path(tmp) / "store.sqlite")
        shapes = list(rank_shapes(MODEL, execution).values())
        opts = MeasureOptions(reps=10, warmup=2, spawn=False)  # ONE rank: per-rank shapes, no comm
        for m in measure_many(shapes, scale=1.0, device="cpu", opts=opts):
            store.record(m)
        clear_cost_cache()
        proj = project(MODEL, execution, system, store, memory=False, band=False)
        store.close()
    result = run_training(MODEL, execution, world_size=2, iters=iters, warmup=2, device="cpu",
                          time_collectives=True)
    out = Trial(projected_s=proj.step_time_s, projected_compute_s=proj.breakdown.compute_s,
                projected_comm_s=sum(c.exposed_s for c in proj.breakdown.comms),
                measured_s=result.median_step_time_s, measured_comm_s=result.median_collective_s[0],
                measured_skew_s=result.median_skew_s[0])
    print(f"  {label}: projected {out.projected_s * 1e3:.0f} ms (compute {out.projected_compute_s * 1e3:.0f}, "
          f"exposed comm {out.projected_comm_s * 1e3:.0f}) | measured {out.measured_s * 1e3:.0f} ms (rank 0 "
          f"inside collectives {out.measured_comm_s * 1e3:.0f} of which waiting for the peer "
          f"{out.measured_skew_s * 1e3:.0f}, the rest "
          f"{(out.measured_s - out.measured_comm_s) * 1e3:.0f})", flush=True)
    return out


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) * 100


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3,
                        help="interleaved trials per configuration (fabric sweep, measurement, real run)")
    parser.add_argument("--iters", type=int, default=6, help="training iterations per run (2 are warm-up)")
    args = parser.parse_args()

    import torch

    from primus_ext.measure.fabric import fabric_sweep

    start = time.perf_counter()
    cores = os.cpu_count() or 2
    torch.set_num_threads(max(1, cores // 2))  # a rank's share of the node in the 2-rank runs
    print(f"machine: {cores} cores; one-rank measurements use {torch.get_num_threads()} thread(s)")
    trials: dict[str, list[Trial]] = {label: [] for label in executions()}
    alone: list[float] = []
    for rep in range(args.repeats):
        points, failures = fabric_sweep(world=2, ops=("all_reduce", "all_gather", "reduce_scatter", "send_recv"))
        system = cpu_system(points)
        print(f"trial {rep + 1}/{args.repeats}: fabric (gloo, 2 ranks) all-reduce busbw "
              f"{system.gpu.scaleup_bandwidth_bytes_per_s / 1e9:.2f} GB/s, latency "
              f"{system.gpu.efficiency.collective_latency_s * 1e6:.0f} us per step"
              + (f"; failed: {failures}" if failures else ""), flush=True)
        for label, execution in executions().items():
            trials[label].append(trial(label, execution, system, args.iters))
        alone.append(one_rank_alone(args.iters))
    print("\nmedians over the trials (spread = (max - min) / median):")
    print("config   projected ms  spread  measured ms  spread  error    | comm: projected  measured  (skew) "
          "| rest: projected  measured")
    for label, ts in trials.items():
        proj, meas = [t.projected_s for t in ts], [t.measured_s for t in ts]
        p, m = statistics.median(proj), statistics.median(meas)
        pc = statistics.median(t.projected_comm_s for t in ts)
        mc = statistics.median(t.measured_comm_s for t in ts)
        ms = statistics.median(t.measured_skew_s for t in ts)
        pr = statistics.median(t.projected_s - t.projected_comm_s for t in ts)
        mr = statistics.median(t.measured_s - t.measured_comm_s for t in ts)
        print(f"{label:<8} {p * 1e3:12.0f} {_spread(proj):5.1f} % {m * 1e3:11.0f} {_spread(meas):5.1f} % "
              f"{(p - m) / m * 100:+6.1f} % | {pc * 1e3:15.0f} {mc * 1e3:9.0f} {ms * 1e3:7.0f} | {pr * 1e3:15.0f} "
              f"{mr * 1e3:9.0f}")
    dp_rest = statistics.median(t.measured_s - t.measured_comm_s for t in trials["DP=2"])
    one = statistics.median(alone)
    print(f"\nsharing the machine: a DP=2 rank's step outside collectives {dp_rest * 1e3:.0f} ms vs the same work "
          f"on one rank alone {one * 1e3:.0f} ms ({(dp_rest - one) / one * 100:+.0f} %; spread of the one-rank runs "
          f"{_spread(alone):.0f} %)")
    print(f"\nwall time {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
