"""Any input, bounded work: mutated shipped recipes (hypothesis) and the issue-32 reproducers, each run through the
real CLI in a forked child with a time and a memory bound; exit 0 / 2 / 3 / 4, never a traceback.

The long run (thousands of cases) is ``benchmarks/fuzz_recipes.py``; its counts are in RESULTS.md.
"""

from __future__ import annotations

import os
import random
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe_mutations import REPO, case_argv, mutate, run_forked

LIMIT_S = 5.0
LIMIT_BYTES = 1 << 30
RECIPE = str(REPO / "recipes" / "llama3.1_8B-pretrain.yaml")

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="needs fork and /proc")


def _check(argv: list[str], workdir: str):
    outcome = run_forked(argv, limit_s=LIMIT_S, limit_bytes=LIMIT_BYTES, workdir=workdir)
    assert not outcome.timed_out, f"{argv}: over {LIMIT_S} s"
    assert not outcome.traceback, f"{argv}:\n{outcome.stderr[-2000:]}"
    assert outcome.exit_code in (0, 2, 3, 4), f"{argv}: exit {outcome.exit_code}\n{outcome.stderr[-2000:]}"
    assert outcome.peak_bytes < LIMIT_BYTES
    return outcome


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rng=st.randoms(use_true_random=False))
def test_mutated_shipped_recipes(tmp_path_factory, rng: random.Random) -> None:
    folder = tmp_path_factory.mktemp("fuzz")
    _, text, extra = mutate(rng)
    path = folder / "recipe.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _check(case_argv(rng, str(path), extra), str(folder))


def _alias_chain(levels: int) -> str:
    lines = ["l0: &l0 [a, a, a, a, a, a, a, a, a, a]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_reproducers_of_issue_32(tmp_path) -> None:
    base = (REPO / "recipes" / "llama3.1_8B-pretrain.yaml").read_text()
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(base.replace("modules:", _alias_chain(8) + "modules:").replace(
        "context_parallel_size: 1", "context_parallel_size: *l8"))
    big = tmp_path / "big.yaml"
    big.write_text(base.replace("mock_data: true", "mock_data: true\n      data_path: [" + ",".join(["1"] * 1_900_000)
                                + "]"))
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 30_000 + "]" * 30_000)  # crashed the process in libyaml's composer
    nan_store = tmp_path / "store.jsonl"
    nan_store.write_text('{"table": "layers", "fwd_ms": NaN}\n')
    nan_log = tmp_path / "trials.jsonl"
    nan_log.write_text('{"trial": {"config": {}, "status": "ok", "tokens_per_s_per_gpu": NaN}}\n')
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(bytes(range(128, 256)) * 4)
    cases = [
        (["recipe", "show", str(bomb)], 2, "expand to more than"),
        (["recipe", "show", str(big)], 2, "YAML nodes"),
        (["project", RECIPE, "pipeline_model_parallel_layout=(t*99999)*99999"], 2, "expands to more than"),
        (["project", RECIPE, "--nodes", "1", "global_batch_size=2147483640", "micro_batch_size=1"], 0, ""),
        (["project", RECIPE, "--cluster", "x" * 300], 2, "not a profile name"),
        (["project", RECIPE, "--json", str(tmp_path / "no" / "out.json")], 2, "does not exist"),
        (["project", RECIPE, "--json", str(tmp_path / ("o" * 300))], 2, "too long"),
        (["recipe", "show", RECIPE, "moe_expert_capacity_factor=.nan"], 2, "finite"),
        (["tune", RECIPE, "--margin", "nan"], 2, "finite"),
        (["recipe", "show", str(deep)], 2, "nest"),  # ours, or libyaml >= 0.2.5's "maximum nesting depth"
        (["project", RECIPE, "--store", str(nan_store)], 2, "not a finite number"),
        (["tune", RECIPE, "--resume", str(nan_log)], 2, "not a finite number"),
        (["ci", str(binary)], 2, "not UTF-8"),
        (["tune", RECIPE, "--strategy", "exhaustive", "--out", str(binary)], 2, "not UTF-8"),
        (["project", RECIPE, "global_batch_size=1073741824", "micro_batch_size=1", "num_layers=1024",
          "pipeline_model_parallel_size=512", "num_virtual_stages_per_pipeline_rank=2", "--nodes", "64"], 2,
         "pipeline stages"),
    ]
    for argv, code, text in cases:
        outcome = _check(argv, str(tmp_path))
        assert outcome.exit_code == code, (argv, outcome.stderr[-1000:])
        assert text in outcome.stderr, (argv, outcome.stderr[-1000:])
