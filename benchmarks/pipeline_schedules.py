"""Pipeline schedules as a tuning axis: the best configuration per schedule family, and the exhaustive search's
wall time with the schedule axis in the space (issue 35).

    python benchmarks/pipeline_schedules.py                 # DeepSeek-V3 on 1 024 H100s, Llama-3.1-70B on 64 H100s
    python benchmarks/pipeline_schedules.py --only llama

For each case: the exhaustive search over the default space of a Primus recipe (the recipe's schedule plus
V-half and V-min: ``tune``'s default), its wall time, then one exhaustive search per schedule family
(``--pin schedule=...``): Megatron (1f1b, interleaved), zero bubble (zb-h1, zb-h2), V (zb-v, v-half, v-min),
DeepSeek (dualpipe, dualpipev; what-ifs: no recipe key runs them), each family's optimum and how much it moves
against Megatron's. Analytic roofline costs; figures are in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import time

from primus_ext.recipe import load_recipe
from primus_ext.tune.agent import SearchContext
from primus_ext.tune.axes import CP, EP, MBS, PP, RECOMPUTE, SCHEDULE, SPLIT, TP, VPP
from primus_ext.tune.configure import PRIMUS_SCHEDULES
from primus_ext.tune.oracle import projection_oracle
from primus_ext.tune.prefilter import MemoryFilter
from primus_ext.tune.run import tune
from primus_ext.tune.space import build_space

CASES = {
    "deepseek": ("recipes/deepseek_v3-pretrain.yaml", "h100", 128),
    "llama": ("recipes/llama3.1_70B-pretrain.yaml", "h100", 8),
}
FAMILIES = {
    "Megatron 1F1B / interleaved": ("1f1b", "interleaved"),
    "zero bubble ZB-H1 / ZB-H2": ("zb-h1", "zb-h2"),
    "V: ZB-V / V-half / V-min": ("zb-v", "v-half", "v-min"),
    "DeepSeek DualPipe / DualPipeV": ("dualpipe", "dualpipev"),
}


def _search(recipe, pins, schedules=()):
    space = build_space(recipe.model, recipe.execution, recipe.system, pins, schedules=schedules)
    ctx = SearchContext(space=space, oracle=projection_oracle(recipe.model, recipe.system, None),
                        prefilter=MemoryFilter(recipe.model, recipe.system), budget=10**9, detail=False)
    t0 = time.perf_counter()
    result = tune(ctx, "exhaustive", baseline=recipe.execution)
    return result, time.perf_counter() - t0


def run_case(key: str) -> None:
    path, cluster, nodes = CASES[key]
    recipe = load_recipe(path, cluster=cluster, nodes=nodes, validate=False)
    print(f"{key}: {path} on {nodes} x {cluster} ({recipe.system.world_size} GPUs)")
    result, wall = _search(recipe, {}, PRIMUS_SCHEDULES)
    best = result.best
    print(f"  default space (recipe's schedule + V-half, V-min): exhaustive {wall:.2f} s, "
          f"{result.stats.projected} projected; best {best.tokens_per_s_per_gpu:.1f} tok/s/GPU {best.config}"
          if best else f"  default space: exhaustive {wall:.2f} s, nothing fits")
    reference = None
    for family, names in FAMILIES.items():
        result, wall = _search(recipe, {SCHEDULE: names})
        best = result.best
        if best is None:
            print(f"  {family:<32} nothing legal fits ({wall:.2f} s)")
            continue
        reference = reference or best.tokens_per_s_per_gpu
        change = best.tokens_per_s_per_gpu / reference - 1
        c = best.config
        print(f"  {family:<32} {best.tokens_per_s_per_gpu:8.1f} tok/s/GPU ({change * 100:+5.1f} %)  "
              f"{c[SCHEDULE]} TP{c[TP]} PP{c[PP]} VPP{c[VPP]} EP{c[EP]} CP{c[CP]} MBS{c[MBS]} "
              f"{c[RECOMPUTE]} split={c[SPLIT]}  [{wall:.2f} s, {result.stats.projected} projected]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=tuple(CASES), help="one case")
    args = parser.parse_args()
    for key in (args.only,) if args.only else CASES:
        run_case(key)


if __name__ == "__main__":
    main()
