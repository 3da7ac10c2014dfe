"""Projection speed (the tuner's fast path) and the projection of every shipped recipe.

    python benchmarks/projection_speed.py            # tuner-space rate, per-case table, every recipe
    python benchmarks/projection_speed.py --speed    # speed only
    python benchmarks/projection_speed.py --space    # the tuner-space rate only (issue 5's figure)

Tuner space (issue 5's figure): projections per second per core (CPU time of this process: less sensitive
to other jobs on the machine than wall time) over every legal configuration of the DeepSeek-V3 on 1 024 H100s
space (``tune.space.build_space`` on recipes/deepseek_v3-pretrain.yaml, 128 nodes, as
benchmarks/tune_search.py) that the memory pre-filter keeps, each projected once per pass, by the batch
path (``evaluate_many``, what the exhaustive search uses) and one by one (``evaluate``):
  * first visit: layer costs computed on the way (after ``clear_cost_cache()``);
  * cached costs: again after ``forget_projections()`` - projections, stage aggregates, schedules and
    step tails recomputed, per-layer costs and communication (the cost table) kept.

Figures on the shared 2-core machine (2026-12-02, best / median of 3 passes; benchmarks/RESULTS.md):

| tuner space, projections/s/core        | evaluate_many   | evaluate      |
|----------------------------------------|----------------:|--------------:|
| first visit                            | 7 816           | 2 067         |
| cached costs (3 passes)                | 55 709 / 49 800 | 2 533 / 2 494 |

Issue 5's target (>= 20 000/s per core) is met by the batch path; one-by-one ``evaluate`` still
simulates ~100-4 000 ops and builds ~10 result objects in Python per call (~400 us).

Speed: ``evaluate()`` per call for a DeepSeek-V3-like (TP2 PP8 VPP4 EP64, 128 micro-batches) and a
Llama-3.1-405B-like (TP8 PP8 VPP8, 128 micro-batches) run on 1024 H100s, analytic costs (see the
printed legend for the three cases).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from primus_ext.hardware import load_system
from primus_ext.projection import evaluate
from primus_ext.specs import ExecutionSpec, ModelSpec

ROOT = Path(__file__).resolve().parents[1]

DEEPSEEK_V3 = ModelSpec(
    name="deepseek-v3-like", num_layers=61, hidden_size=7168, ffn_hidden_size=18432, num_attention_heads=128,
    num_query_groups=128, kv_channels=128, vocab_size=129280, num_experts=256, moe_router_topk=8,
    moe_ffn_hidden_size=2048, moe_shared_expert_intermediate_size=2048, moe_layer_pattern=(False,) * 3 + (True,) * 58,
    multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64,
    v_head_dim=128, mtp_num_layers=1)
DSV3_RUN = ExecutionSpec(
    tensor_model_parallel_size=2, pipeline_model_parallel_size=8, virtual_pipeline_model_parallel_size=4,
    expert_model_parallel_size=64, expert_tensor_parallel_size=1, data_parallel_size=64, sequence_parallel=True,
    pipeline_model_parallel_layout="Et|(tt|)*30mL", seq_length=4096, micro_batch_size=1, global_batch_size=8192,
    use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True,
    recompute_granularity="selective", recompute_modules=("mla_up_proj", "moe_act"), precision="fp8")
LLAMA_405B = ModelSpec(name="llama-405b-like", num_layers=126, hidden_size=16384, ffn_hidden_size=53248,
                       num_attention_heads=128, num_query_groups=8, kv_channels=128, vocab_size=128256)
LLAMA_RUN = ExecutionSpec(
    tensor_model_parallel_size=8, pipeline_model_parallel_size=8, virtual_pipeline_model_parallel_size=8,
    data_parallel_size=16, sequence_parallel=True, seq_length=8192, micro_batch_size=1, global_batch_size=2048,
    account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True,
    use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True, tp_comm_overlap=True,
    precision="fp8")


def _time(calls: list) -> list[float]:
    out = []
    for call in calls:
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def speed() -> None:
    system = load_system("h100", 128)
    print("evaluate() on 1024 H100s, analytic costs, ms per call (median / p90 over 40 configurations)")
    print("  new times : every call new layer costs (a perturbed GEMM efficiency), same micro-batch count")
    print("  new m     : every call a new micro-batch count (pipeline order rebuilt, then memoised)")
    print("  same shapes: new DP width / distributed optimizer / overlap flags, same per-rank shapes (the")
    print("               tuner's grouped case: layer costs and the schedule come from the memo)")
    print("  flags     : same DP width and micro-batch count, new optimizer / DP-overlap flags (schedule reused)")
    print("  warm      : a configuration seen before (memoised projection)")
    print(f"  {'config':<18} {'m':>4} {'new times':>16} {'new m':>16} {'same shapes':>16} {'flags':>16} {'warm':>7}"
          f" {'shape/s':>7} {'flags/s':>7} {'warm/s':>8}")
    for model, run in ((DEEPSEEK_V3, DSV3_RUN), (LLAMA_405B, LLAMA_RUN)):
        evaluate(model, run, system)  # build the shared pipeline order once
        eff = system.gpu.efficiency
        systems = [replace(system, gpu=replace(system.gpu, efficiency=replace(eff, gemm_max=eff.gemm_max - k * 1e-4)))
                   for k in range(1, 41)]
        fresh = _time([lambda s=s, model=model, run=run: evaluate(model, run, s) for s in systems])
        step = run.micro_batch_size * run.dp * run.pp  # keep whole interleaving groups
        batches = [run.global_batch_size + k * step for k in range(1, 41)]
        new_m = _time([lambda g=g, model=model, run=run: evaluate(model, replace(run, global_batch_size=g), system)
                       for g in batches])
        shared = []  # same per-rank shapes and stage times, new DP width / sharding / overlap: costs and
        for dp in (run.dp // 2, run.dp * 2, run.dp * 4):  # schedule come from the memo, the tail is new
            for flags in itertools.product((False, True), repeat=3):
                ex = replace(run, data_parallel_size=dp, global_batch_size=run.global_batch_size * dp // run.dp,
                             use_distributed_optimizer=flags[0], overlap_grad_reduce=flags[1],
                             overlap_param_gather=flags[0] and flags[2])
                shared.append((ex, load_system("h100", ex.world_size // 8)))
        same = _time([lambda ex=ex, s=s, model=model: evaluate(model, ex, s) for ex, s in shared])
        variants = [replace(run, use_distributed_optimizer=a, overlap_grad_reduce=b, overlap_param_gather=a and c,
                            grad_reduce_in_bf16=d) for a, b, c, d in itertools.product((False, True), repeat=4)]
        flags = _time([lambda ex=ex, model=model: evaluate(model, ex, system) for ex in variants])
        warm = _time([lambda model=model, run=run: evaluate(model, run, system)] * 200)

        def stat(values: list[float]) -> str:
            return f"{statistics.median(values) * 1e3:7.2f} /{sorted(values)[int(0.9 * len(values))] * 1e3:7.2f}"

        print(f"  {model.name:<18} {run.num_microbatches:>4} {stat(fresh):>16} {stat(new_m):>16} {stat(same):>16}"
              f" {stat(flags):>16} {statistics.median(warm) * 1e3:>7.3f} {1 / statistics.median(same):>7.0f}"
              f" {1 / statistics.median(flags):>7.0f} {1 / statistics.median(warm):>8.0f}")


def space_speed(repeats: int) -> None:
    from primus_ext.errors import PrimusExtError
    from primus_ext.projection.evaluate import clear_cost_cache, forget_projections
    from primus_ext.projection.evaluate_batch import evaluate_many
    from primus_ext.recipe import load_recipe
    from primus_ext.recipe.checks import check
    from primus_ext.tune.prefilter import MemoryFilter
    from primus_ext.tune.space import build_space

    recipe = load_recipe(str(ROOT / "recipes/deepseek_v3-pretrain.yaml"), cluster="h100", nodes=128, validate=False)
    model, system = recipe.model, recipe.system
    space = build_space(model, recipe.execution, system)
    fits = MemoryFilter(model, system, margin=0.0).fits
    configs = [ex for ex in map(space.to_execution, space.iter_configs()) if not check(model, ex, system) and fits(ex)]

    def one_pass() -> float:
        start = time.process_time()
        for ex in configs:
            with contextlib.suppress(PrimusExtError):  # refusing is the projection's answer for that config
                evaluate(model, ex, system)
        return time.process_time() - start

    def batch_pass() -> float:
        start = time.process_time()
        evaluate_many(model, configs, system)
        return time.process_time() - start

    start = time.process_time()
    evaluate_many(model, configs[:1] * 2, system)  # compile (or load the cached) schedule kernel (a batch of one
    # runs the Python simulation: projection.engine)
    compile_s = time.process_time() - start
    clear_cost_cache()
    batch_first = batch_pass()
    batch_cached = []
    for _ in range(repeats):
        forget_projections()
        batch_cached.append(batch_pass())
    clear_cost_cache()
    first = one_pass()
    cached = []
    for _ in range(repeats):
        forget_projections()
        cached.append(one_pass())
    n = len(configs)
    print(f"Tuner space: DeepSeek-V3 on {system.world_size} H100s, {n} legal configurations that fit, analytic "
          f"costs; projections per second per core (CPU time)")
    for label, one, many in (("evaluate_many (batch)", batch_first, batch_cached),
                             ("evaluate (one by one)", first, cached)):
        print(f"  {label}")
        print(f"    first visit (costs computed)  : {n / one:>8,.0f} /s  ({one / n * 1e6:6.1f} us each)")
        print(f"    cached costs, {repeats} passes      : best {n / min(many):>8,.0f} /s, median "
              f"{n / statistics.median(many):>8,.0f} /s  ({statistics.median(many) / n * 1e6:6.1f} us each)")
    print(f"  schedule kernel compile / cache load: {compile_s:.2f} s CPU (once per process)")


def recipes() -> None:
    from primus_ext.errors import PrimusExtError
    from primus_ext.recipe import load_recipe

    print("\nShipped recipes (analytic costs, recipe's own cluster)")
    print(f"  {'recipe':<34} {'GPUs':>5} {'tok/s/GPU':>10} {'step ms':>10} {'MFU':>6}  largest exposed parts")
    for path in sorted((ROOT / "recipes").glob("*.yaml")):
        try:
            recipe = load_recipe(str(path), [])
            p = evaluate(recipe.model, recipe.execution, recipe.system)
        except PrimusExtError as err:
            print(f"  {path.name:<34} refused: {str(err).splitlines()[0]}")
            continue
        b = p.breakdown
        parts = {"bubble": b.bubble_s, **{c.kind: c.exposed_s for c in b.comms}}
        top = ", ".join(f"{k} {v / p.step_time_s:.0%}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])[:3])
        print(f"  {path.name:<34} {recipe.execution.world_size:>5} {p.tokens_per_s_per_gpu:>10,.0f}"
              f" {p.step_time_ms:>10,.0f} {p.mfu:>6.1%}  {top}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speed", action="store_true", help="speed only")
    parser.add_argument("--space", action="store_true", help="the tuner-space rate only")
    parser.add_argument("--repeats", type=int, default=3, help="cached-cost passes over the tuner space")
    args = parser.parse_args(argv)
    space_speed(args.repeats)
    if args.space:
        return 0
    print()
    speed()
    if not args.speed:
        recipes()
    return 0


if __name__ == "__main__":
    sys.exit(main())
