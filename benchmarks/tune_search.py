"""Tuner benchmark: space size, pre-filter rejections, trials, wall time, gain and regret per strategy.

    python benchmarks/tune_search.py      # Mixtral-8x22B on 4 x MI355X nodes, DeepSeek-V3 on 1 024 H100s
    python benchmarks/tune_search.py --only mixtral --seeds 0 1 2
    python benchmarks/tune_search.py --llm openai/gpt-4o  # adds the LLM strategy (key from the environment)

For each case: candidates of the default space, legal ones (``check`` over every candidate: a census,
not part of any search), legal ones the memory pre-filter rejects, then ``exhaustive`` (the optimum),
``tpe`` with a budget of 100 projections per seed (regret against the optimum), and ``llm`` when a
model is given. Costs: analytic roofline (``--store FILE`` for measured ones). Gain is over the
recipe's own configuration on that cluster (projected even when the memory model says it does not fit).

Figures on the 2-core CI machine (analytic costs, 2026-12-02, other jobs sharing the cores):

| case                         | candidates | legal  | rejected (mem) | exhaustive  | optimum tok/s/GPU | gain    |
|------------------------------|-----------:|-------:|---------------:|------------:|------------------:|--------:|
| Mixtral-8x22B, 4 x MI355X    | 41 730     | 31 842 | 5 954          | 11.0 s      | 6 253.5           | +9.6 %  |
| DeepSeek-V3, 128 x H100      | 62 384     | 43 252 | 26 113         | 12.1 s      | 1 455.9           | +28.0 % |

TPE, 100 projections, seeds 0-5: regret 0 / 0.11 / 0 / 1.24 / 0 / 0 % (Mixtral, 0.8-2.8 s) and
0 / 0 / 0 / 4.46 / 4.46 / 0 % (DeepSeek-V3, 1.7-4.1 s). The DeepSeek-V3 optimum (TP2 PP8 VPP4 EP64,
no recompute, TP and EP overlap) is the layout of NVIDIA's published 1 024 x H100 run. The exhaustive
time is mostly projection (~60 %) and pipeline-split parsing in ``check`` / memory / projection.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from primus_ext.recipe import load_recipe
from primus_ext.recipe.validate import check
from primus_ext.tune.agent import SearchContext
from primus_ext.tune.oracle import projection_oracle
from primus_ext.tune.prefilter import MemoryFilter
from primus_ext.tune.results import TuneResult, tune
from primus_ext.tune.space import build_space
from primus_ext.tune.strategies import StrategyOptions


@dataclass(frozen=True)
class Case:
    key: str
    recipe: str
    cluster: str
    nodes: int


CASES = (
    Case("mixtral", "recipes/mixtral_8x22B-pretrain.yaml", "mi355x", 4),
    Case("deepseek", "recipes/deepseek_v3-pretrain.yaml", "h100", 128),
)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.2f} %"


def _row(name: str, r: TuneResult, wall: float) -> str:
    s = r.stats
    best = r.best.tokens_per_s_per_gpu if r.best else 0.0
    rejected = s.rejected_by_prefilter + s.pruned_by_prefilter
    return (f"  {name:<12} projected {s.projected:>6}  rejected(mem) {rejected:>6}"
            f"  illegal {s.illegal + s.pruned_illegal:>6}  wall {wall:7.2f} s  best {best:8.1f} tok/s/GPU"
            f"  gain {_pct(r.gain):>9}  regret {_pct(r.regret):>9}")


def run_case(case: Case, args: argparse.Namespace) -> None:
    recipe = load_recipe(case.recipe, cluster=case.cluster, nodes=case.nodes, validate=False)
    costs = None
    if args.store:
        from primus_ext.measure.store import TimingStore

        costs = TimingStore(args.store)
    space = build_space(recipe.model, recipe.execution, recipe.system)
    prefilter = MemoryFilter(recipe.model, recipe.system, margin=args.margin)
    oracle = projection_oracle(recipe.model, recipe.system, costs)
    print(f"{case.key}: {case.recipe} on {case.nodes} x {case.cluster} ({recipe.system.world_size} GPUs)")
    ctx = SearchContext(space=space, oracle=oracle, prefilter=prefilter, budget=10**9, detail=False)
    t0 = time.perf_counter()
    exhaustive = tune(ctx, "exhaustive", baseline=recipe.execution)
    wall = time.perf_counter() - t0
    print(_row("exhaustive", exhaustive, wall))
    optimum = exhaustive.best
    if optimum is not None:
        print(f"    optimum: {optimum.config}")
    if exhaustive.baseline is not None:
        print(f"    recipe:  {exhaustive.baseline.config} -> {exhaustive.baseline.status}, "
              f"{exhaustive.baseline.tokens_per_s_per_gpu:.1f} tok/s/GPU")
    t0 = time.perf_counter()
    candidates, legal, fitting = 0, 0, 0
    for config in space.iter_configs():
        candidates += 1
        execution = space.to_execution(config)
        if not check(recipe.model, execution, recipe.system):
            legal += 1
            fitting += prefilter.fits(execution)
    census = time.perf_counter() - t0
    print(f"  space: {candidates} candidates, {legal} legal, {legal - fitting} of them rejected by the memory "
          f"pre-filter, {fitting} to project (census {census:.1f} s)")

    def with_regret(result: TuneResult) -> TuneResult:
        if result.best is None or optimum is None:
            return result
        from dataclasses import replace

        return replace(result, optimum=optimum,
                       regret=max(0.0, 1 - result.best.tokens_per_s_per_gpu / optimum.tokens_per_s_per_gpu))

    strategies = [("tpe", StrategyOptions(seed=s)) for s in args.seeds]
    if args.llm:
        strategies.append(("llm", StrategyOptions(llm_model=args.llm, seed=0)))
    for name, options in strategies:
        # a fresh context: nothing learnt from the exhaustive run; the oracle's own memo is shared, so
        # wall times here are those of a warm projection cache (the CLI's first run pays ~1 ms/config more)
        fresh = SearchContext(space=space, oracle=oracle, prefilter=prefilter, budget=args.budget)
        t0 = time.perf_counter()
        result = with_regret(tune(fresh, name, baseline=recipe.execution, options=options, regret=False))
        label = f"{name}(seed {options.seed})" if name == "tpe" else name
        print(_row(label, result, time.perf_counter() - t0))
        for note in result.notes:
            print(f"    note: {note[:160]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=[c.key for c in CASES])
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--margin", type=float, default=0.0)
    parser.add_argument("--llm", metavar="MODEL")
    parser.add_argument("--store", metavar="FILE")
    args = parser.parse_args()
    for case in CASES:
        if args.only in (None, case.key):
            run_case(case, args)


if __name__ == "__main__":
    main()
