"""Memory model figures: shipped recipes, the published runs, headline runs, and the pre-filter's speed.

Run from the repository root::

    python benchmarks/memory_prefilter.py                 # everything
    python benchmarks/memory_prefilter.py --skip-recipes  # only the dev set and the speed

Prints (1) the per-stage breakdown of every ``recipes/*.yaml`` on its own cluster, (2) over every
runnable row of ``shared/validation/measured_throughput.csv`` (each of those runs did run) how many
the model projects to fit, with the rows it does not and the flags that hint why, (3) the per-stage
peaks of the headline runs (Llama-3.1-405B, DeepSeek-V3, Qwen3-235B-A22B), (4) ``fits()`` calls per
second on one core over every configuration of three real tuner spaces (``tune.space.build_space``):
distinct configurations with the per-rank terms warm (the tuner's case), the first pass with every memo
cold, and one configuration repeated; best and median of several runs (the machine is shared).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VALIDATION = REPO.parent / "shared" / "validation"
HEADLINES = ("Llama3.1-405B", "DeepSeek-V3", "Qwen3-235B-A22B")
HINTS = {"cpu_offloading": r"cpu_offloading", "NeMo AutoModel": r"AutoModel", "torchtitan": r"torchtitan|Grand Teton",
         "96 GB H100": r"96GB", "recompute": r"recompute", "parenthesised alternatives": r"=\s*\d+\s*\(\d+\)",
         "fp8 params": r"fp8-param|fp8_param", "precision-aware optimizer": r"precision-aware"}
GIB = 1024**3


def recipes() -> None:
    from primus_ext.errors import RecipeError
    from primus_ext.model.memory import estimate_memory
    from primus_ext.recipe import load_recipe
    from primus_ext.report.memory_table import format_memory_table

    for path in sorted((REPO / "recipes").glob("*.yaml")):
        try:
            recipe = load_recipe(path)
        except RecipeError as err:
            print(f"== {path.name}: not loadable: {err}")
            continue
        e = recipe.execution
        print(f"== {path.name}  {recipe.system.gpu.name} x {recipe.system.num_nodes} nodes  TP{e.tp} PP{e.pp} "
              f"VPP{e.vpp} CP{e.cp} EP{e.ep} DP{e.dp} MBS{e.micro_batch_size} seq{e.seq_length} "
              f"recompute={e.recompute_granularity}")
        print(format_memory_table(estimate_memory(recipe.model, e, recipe.system)))
        print()


def dev_set() -> None:
    import csv

    from primus_ext.model.memory import estimate_memory
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.runs import read_runs

    rows = list(csv.DictReader((VALIDATION / "measured_throughput.csv").open(encoding="utf-8")))
    runs = read_runs(VALIDATION / "measured_throughput.csv", read_archs(VALIDATION / "model_archs.csv"))
    runnable = [r for r in runs if r.model is not None]
    fit, misses, headline = 0, [], {name: [] for name in HEADLINES}
    for run in runnable:
        mem = estimate_memory(run.model, run.execution, run.system)
        fit += mem.fits
        if not mem.fits:
            misses.append((run, mem))
        if run.model_name in headline:
            headline[run.model_name].append((run, mem))
    print(f"== dev set: {fit} of {len(runnable)} runnable published runs projected to fit "
          f"({fit / len(runnable):.1%}); {len(runs) - len(runnable)} rows skipped by the reader")
    for run, mem in misses:
        e, s = run.execution, mem.peak_stage
        flags = rows[run.index]["extra_flags"] + " " + rows[run.index]["notes"]
        hints = sorted(name for name, pattern in HINTS.items() if re.search(pattern, flags))
        print(f"  row {run.index:3d} {run.model_name} {run.gpu}x{run.num_gpus} {run.precision_label}: "
              f"TP{e.tp} PP{e.pp} VPP{e.vpp} CP{e.cp} EP{e.ep} MBS{e.micro_batch_size} seq{e.seq_length} "
              f"rc={e.recompute_granularity} fsdp={e.fsdp}: peak {mem.peak_bytes / GIB:.0f} of "
              f"{mem.capacity_bytes / GIB:.0f} GiB (stage {s.rank}: P {s.params_bytes / GIB:.0f} "
              f"G {s.grads_bytes / GIB:.0f} O {s.optimizer_bytes / GIB:.0f} A {s.activations_bytes / GIB:.0f} "
              f"X {s.other_bytes / GIB:.0f}); row mentions: {', '.join(hints) or '-'}")
    print("\n== headline runs: per-stage peak GiB (stage 0 .. PP-1)")
    for name, items in headline.items():
        shown = set()
        for run, mem in items:
            e = run.execution
            config = (run.gpu, run.num_gpus, run.precision_label, e.tp, e.pp, e.vpp, e.ep, e.cp, e.micro_batch_size)
            if config in shown:
                continue
            shown.add(config)
            peaks = " ".join(f"{s.total_bytes / GIB:.0f}" for s in mem.stages)
            print(f"  {name} {run.gpu}x{run.num_gpus} {run.precision_label} TP{e.tp} PP{e.pp} VPP{e.vpp} "
                  f"EP{e.ep} CP{e.cp} MBS{e.micro_batch_size}: [{peaks}] peak {mem.peak_bytes / GIB:.1f} / "
                  f"{mem.capacity_bytes / GIB:.0f} {'fits' if mem.fits else 'DOES NOT FIT'}")


SPEED_SPACES = (("deepseek_v3-pretrain.yaml", "h100", 128), ("mixtral_8x22B-pretrain.yaml", "mi355x", 4),
                ("llama3.1_405B-pretrain.yaml", "h100", 128))
SPEED_RUNS = 5


def _rate(calls, fn) -> tuple[float, float]:
    """Calls per CPU-second of this process (``process_time``: what one core does, unaffected by other
    processes waiting for the shared CPUs) and per wall-clock second."""
    wall, cpu = time.perf_counter(), time.process_time()
    for args in calls:
        fn(*args)
    return len(calls) / (time.process_time() - cpu), len(calls) / (time.perf_counter() - wall)


def speed() -> None:
    """``fits()`` per second on one core over every configuration of real tuner spaces (``build_space``
    around the shipped recipe), the tuner's case: distinct configurations sharing per-rank shapes."""
    import statistics

    from primus_ext.model.memory import estimate, stage
    from primus_ext.recipe import load_recipe
    from primus_ext.tune.space import build_space

    print(f"\n== fits() speed, one core (configurations per CPU-second of this process; best / median of "
          f"{SPEED_RUNS} runs; the machine is shared)")
    for name, cluster, nodes in SPEED_SPACES:
        recipe = load_recipe(REPO / "recipes" / name, cluster=cluster, nodes=nodes, validate=False)
        model, system = recipe.model, recipe.system
        space = build_space(model, recipe.execution, system)
        calls = [(model, space.to_execution(c), system) for c in space.iter_configs()]
        cold, warm = [], []
        for _ in range(SPEED_RUNS):
            estimate._COMPILED.clear()
            estimate._PEAKS.clear()
            stage._BY_MODEL.clear()
            cold.append(_rate(calls, estimate.fits))
            estimate._PEAKS.clear()  # per-configuration peaks: every configuration is evaluated again
            warm.append(_rate(calls, estimate.fits))
        shapes = len(estimate._COMPILED)
        verdicts = [estimate.fits(*c) for c in calls]
        repeated = _rate([calls[0]] * 100_000, estimate.fits)

        def fmt(rates: list[tuple[float, float]]) -> str:
            cpu = [r[0] for r in rates]
            return (f"{max(cpu):,.0f} / {statistics.median(cpu):,.0f} per CPU-s "
                    f"(wall-clock best {max(r[1] for r in rates):,.0f}/s)")

        print(f"  {name} on {cluster} x {nodes} nodes: {len(calls)} distinct configurations "
              f"({sum(verdicts)} fit, {shapes} distinct per-rank shapes)\n"
              f"    distinct configurations, per-rank terms warm: {fmt(warm)}\n"
              f"    first pass, all memos cold: {fmt(cold)}\n"
              f"    one configuration repeated: {repeated[0]:,.0f} per CPU-s")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-recipes", action="store_true")
    args = parser.parse_args(argv)
    if not args.skip_recipes:
        recipes()
    if VALIDATION.is_dir():
        dev_set()
    else:
        print(f"(no {VALIDATION}: dev-set figures skipped)")
    speed()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
