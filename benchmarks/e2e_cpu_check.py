"""End-to-end check of the hybrid method on this machine (issue 6), a benchmark, not a unit test.

    python benchmarks/e2e_cpu_check.py [--repeats 3] [--iters 6]

1. Measure a small megatron-core GPT's layers with ONE rank (real modules, this CPU), at the thread
   share a rank gets in the 2-rank run (cores / 2), into a scratch timing store.
2. Measure the local fabric with the collective sweep (2 gloo ranks) and build the CPU system profile
   from it: scale-up bandwidth = the all-reduce bus bandwidth at large messages, latency = the
   smallest message's time per ring step.
3. Project 2-rank runs (DP=2, and TP=2) from the stored layer costs.
4. Train those 2-rank runs for real with the built-in megatron-core trainer (gloo) and compare the
   median step time; repeat the real run to show the machine's own spread.

Prints projected vs measured step time, the signed error, and the spread of the repeats. The machine
is noisy (2 shared cores): read the error against the spread.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from primus_ext.hardware import load_gpu
from primus_ext.model.rank_shape import rank_shapes
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
    from primus_ext.measure.fabric import median_busbw

    busbw = median_busbw(points, "all_reduce") * 1e9
    smallest = min((p for p in points if p.op == "all_reduce"), key=lambda p: p.nbytes)
    gpu = load_gpu("cpu")
    eff = replace(gpu.efficiency, scaleup_link=1.0, collective_latency_s=smallest.time_ms * 1e-3 / 2,
                  calibration="fabric sweep of this machine (benchmarks/e2e_cpu_check.py)")
    gpu = replace(gpu, scaleup_bandwidth_bytes_per_s=busbw, efficiency=eff, gpus_per_node=2)
    return SystemSpec(gpu=gpu, num_nodes=1, name="cpu")


def one_rank_diagnostic(iters: int) -> int:
    """The DP=2 run's per-rank work (GBS / 2) trained by one rank: separates the trainer's own per-step
    cost from what two ranks sharing the machine add."""
    from primus_ext.launcher.trainer.run import run_training

    execution = replace(executions()["DP=2"], data_parallel_size=1, global_batch_size=GBS // 2)
    result = run_training(MODEL, execution, world_size=1, iters=iters, warmup=2, device="cpu")
    steps = ", ".join(f"{t * 1e3:.0f}" for t in result.measured_s)
    print(f"one rank, DP=2's per-rank work: median step {result.median_step_time_s * 1e3:.0f} ms ({steps})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="real 2-rank runs per configuration")
    parser.add_argument("--iters", type=int, default=6, help="training iterations per run (2 are warm-up)")
    parser.add_argument("--one-rank-diagnostic", action="store_true",
                        help="only train the DP=2 run's per-rank work on ONE rank and print its step time")
    args = parser.parse_args()
    if args.one_rank_diagnostic:
        return one_rank_diagnostic(args.iters)

    import torch

    from primus_ext.launcher.trainer.run import run_training
    from primus_ext.measure.fabric import fabric_sweep
    from primus_ext.measure.runner import MeasureOptions, measure_many
    from primus_ext.measure.store import TimingStore

    start = time.perf_counter()
    cores = os.cpu_count() or 2
    torch.set_num_threads(max(1, cores // 2))  # a rank's share of the node in the 2-rank runs
    print(f"machine: {cores} cores; one-rank measurements use {torch.get_num_threads()} thread(s)")
    points, failures = fabric_sweep(world=2, ops=("all_reduce", "all_gather", "reduce_scatter", "send_recv"))
    system = cpu_system(points)
    print(f"fabric (gloo, 2 ranks): all-reduce busbw {system.gpu.scaleup_bandwidth_bytes_per_s / 1e9:.2f} GB/s, "
          f"latency {system.gpu.efficiency.collective_latency_s * 1e6:.0f} us per step"
          + (f"; failed: {failures}" if failures else ""))
    with tempfile.TemporaryDirectory(prefix="primus-ext-e2e-") as tmp:
        store = TimingStore(Path(tmp) / "store.sqlite")
        rows = []
        for label, execution in executions().items():
            shapes = list(rank_shapes(MODEL, execution).values())
            opts = MeasureOptions(reps=10, warmup=2, spawn=False)  # ONE rank: per-rank shapes, no comm
            for m in measure_many(shapes, scale=1.0, device="cpu", opts=opts):
                store.record(m)
            clear_cost_cache()
            proj = project(MODEL, execution, system, store, memory=False, band=False)
            measured = []
            for _ in range(args.repeats):
                result = run_training(MODEL, execution, world_size=2, iters=args.iters, warmup=2, device="cpu")
                measured.append(result.median_step_time_s)
            med = statistics.median(measured)
            error = (proj.step_time_s - med) / med * 100
            spread = (max(measured) - min(measured)) / med * 100
            sources = sorted(set(proj.sources.values()))
            rows.append((label, proj.step_time_s, med, error, spread, sources))
            comm = {c.kind: round(c.exposed_s * 1e3, 1) for c in proj.breakdown.comms if c.total_s > 0}
            print(f"{label}: projected {proj.step_time_s * 1e3:.1f} ms (compute {proj.breakdown.compute_s * 1e3:.1f},"
                  f" exposed comm ms {comm}) vs measured {med * 1e3:.1f} ms "
                  f"(repeats: {', '.join(f'{m * 1e3:.1f}' for m in measured)})")
        print("\nconfig        projected ms  measured ms  error   spread of repeats  cost sources")
        for label, p, m, e, s, src in rows:
            print(f"{label:<12} {p * 1e3:12.1f} {m * 1e3:12.1f} {e:+6.1f} %  {s:6.1f} %            {', '.join(src)}")
    print(f"\nwall time {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
