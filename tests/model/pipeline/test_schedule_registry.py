"""Schedules as objects: lookup, the resolve rules, each schedule's legality, no name comparisons elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from primus_ext.errors import PrimusExtError
from primus_ext.model.pipeline import ChunkTimes, simulate
from primus_ext.model.pipeline.registry import (
    SCHEDULES,
    Schedule,
    by_primus_name,
    get_schedule,
    register,
    resolve,
    resolve_schedule,
    spec_schedule,
)
from primus_ext.specs import ExecutionSpec

PACKAGE = Path(__file__).resolve().parents[3] / "primus_ext"


def test_lookup_returns_the_registered_instance():
    for name, schedule in SCHEDULES.items():
        assert get_schedule(name) is schedule
        assert schedule.name == name and schedule.label
        assert get_schedule(schedule) is schedule
    assert {"1f1b", "interleaved", "zb-h1"} <= set(SCHEDULES)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(PrimusExtError) as err:
        get_schedule("zb-h9")
    for name in SCHEDULES:
        assert name in str(err.value)
    with pytest.raises(PrimusExtError):
        get_schedule(None)  # type: ignore[arg-type]


def test_register_refuses_a_taken_name():
    class Clash(Schedule):
        name = "1f1b"

    with pytest.raises(ValueError):
        register(Clash)
    assert type(get_schedule("1f1b")) is not Clash


@pytest.mark.parametrize(("requested", "pp", "vpp", "runs"), [
    ("1f1b", 4, None, "1f1b"), ("1f1b", 4, 2, "interleaved"), ("interleaved", 4, 1, "1f1b"),
    ("interleaved", 4, 3, "interleaved"), ("zb-h1", 4, 1, "zb-h1"), ("zb-h1", 1, 1, "1f1b"),
    ("zb-h1", 4, 2, "interleaved"), ("1f1b", 1, 2, "interleaved"),
])
def test_resolve_runs_what_evaluate_ran(requested, pp, vpp, runs):
    assert resolve_schedule(requested, pp, vpp).name == runs


@pytest.mark.parametrize(("requested", "pp", "vpp", "recorded"), [
    ("zb-h1", 4, 2, "zb-h1"), ("zb-h1", 1, 1, "1f1b"), ("zb-h1", 4, 1, "zb-h1"),
    ("1f1b", 4, 2, "interleaved"), ("interleaved", 4, 1, "1f1b"), ("1f1b", 1, 2, "interleaved"),
])
def test_spec_schedule_keeps_the_zero_bubble_flag(requested, pp, vpp, recorded):
    assert spec_schedule(requested, pp, vpp).name == recorded


def test_resolve_of_an_execution_spec():
    e = ExecutionSpec(pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=2,
                      pipeline_schedule="zb-h1")
    assert resolve(e).name == "interleaved"


def test_legality():
    assert get_schedule("1f1b").legality(4, None, 8) == []
    assert get_schedule("zb-h1").legality(4, 1, 8) == []
    assert "one-chunk" in get_schedule("zb-h1").legality(4, 2, 8)[0]
    assert get_schedule("interleaved").legality(4, 2, 8) == []
    assert "last group" in get_schedule("interleaved").legality(4, 2, 6)[0]
    for schedule in SCHEDULES.values():
        assert schedule.legality(0, 1, 8), schedule.name
        assert schedule.legality(2, 1, 0), schedule.name


def test_hooks():
    one, inter, zb = get_schedule("1f1b"), get_schedule("interleaved"), get_schedule("zb-h1")
    assert (one.splits_wgrad, zb.splits_wgrad) == (False, True)
    assert zb.batch_kernel is None and one.batch_kernel and inter.batch_kernel
    assert [zb.wgrad_held_microbatches(r, 4, 2) for r in range(4)] == [0, 1, 2, 2]
    assert one.wgrad_held_microbatches(3, 4, 8) == 0
    assert [one.in_flight_microbatches(r, 4, 1, 8) for r in range(4)] == [4, 3, 2, 1]
    assert inter.in_flight_microbatches(0, 4, 2, 8) == (3 * 2 + 4 + 1) / 2
    assert one.chunks_per_rank(None) == 1 and inter.chunks_per_rank(3) == 3
    assert all(s.model_copies == 1 for s in (one, inter, zb))
    assert [one.stage_of(r, c, 4) for c in range(2) for r in range(4)] == list(range(8))
    assert by_primus_name("patch_zero_bubble") is zb and by_primus_name("no-such") is None


def test_rank_order_and_simulate_delegate():
    times = ((ChunkTimes(fwd=1.0, bwd=2.0, wgrad=1.0),),) * 4
    for name in ("1f1b", "zb-h1"):
        assert get_schedule(name).simulate(times, 8).makespan == simulate(name, times, 8).makespan
    order = get_schedule("1f1b").rank_order(0, 4, 1, 8)
    assert len(order) == 16 and order[:3] == [(0, 0, 0), (0, 1, 0), (0, 2, 0)]


_COMPARISON = re.compile(
    r"""(==|!=|\bin\b|\bnot in\b)\s*\(?[^\n#]*?["'](?P<a>{names})["']|["'](?P<b>{names})["']\s*(==|!=)""")


def test_no_schedule_name_comparisons_outside_the_pipeline_package():
    names = "|".join(re.escape(n) for n in SCHEDULES)
    pattern = re.compile(_COMPARISON.pattern.format(names=names))
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "pipeline" and path.parent.parent.name == "model":
            continue  # the schedules' own implementations
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if pattern.search(code) or re.search(r"pipeline_schedule\s*(==|!=)", code):
                offenders.append(f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert not offenders, "ask the registry instead:\n" + "\n".join(offenders)


def test_the_grep_catches_a_comparison():
    names = "|".join(re.escape(n) for n in SCHEDULES)
    pattern = re.compile(_COMPARISON.pattern.format(names=names))
    assert pattern.search('zb = e.pipeline_schedule == "zb-h1"')
    assert pattern.search('if schedule not in ("1f1b", "interleaved"):')
    assert not pattern.search('get_schedule("1f1b")')


def test_memory_in_flight_asks_the_schedule():
    from primus_ext.model.memory.schedule import chunk_in_flight

    for vpp, sched in ((None, "1f1b"), (2, "interleaved"), (None, "zb-h1"), (2, "zb-h1")):
        e = ExecutionSpec(pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=vpp,
                          pipeline_schedule=sched, global_batch_size=8)
        for rank in range(4):
            assert chunk_in_flight(e, rank) == resolve(e).chunk_in_flight(rank, 4, vpp or 1, e.num_microbatches)
    assert get_schedule("interleaved").chunk_in_flight(0, 4, 2, 8) == (7.0, 4.0)


def test_an_unknown_spec_schedule_is_a_recipe_problem():
    from primus_ext.recipe.checks import _batch

    out: list = []
    _batch(ExecutionSpec(pipeline_schedule="zb-h9"), out)
    assert out and out[0].path == "pipeline_schedule" and "zb-h1" in out[0].fix


def test_dualpipe_doubles_parameter_memory_and_dualpipev_does_not():
    """The DeepSeek report's table 2: DualPipe keeps 2x the parameters (and gradients) per rank, DualPipeV (one copy
    cut in 2*PP V-placed chunks) 1x; the optimizer state of a stage is sharded over both copies' DP ranks.
    A middle rank of an even 8-stage split holds no embedding or output layer: exact."""
    from dataclasses import replace

    from primus_ext.model.memory import estimate_memory
    from primus_ext.model.stages import pipeline_plan
    from primus_ext.recipe import load_recipe

    recipe = load_recipe(Path(__file__).parents[3] / "recipes" / "llama3.1_70B-pretrain.yaml")
    base = replace(recipe.execution, pipeline_model_parallel_size=8, virtual_pipeline_model_parallel_size=None,
                   pipeline_model_parallel_layout=None, global_batch_size=256)
    mem = {s: estimate_memory(recipe.model, replace(base, pipeline_schedule=s), recipe.system).stages[3]
           for s in ("1f1b", "dualpipe", "dualpipev")}
    assert mem["dualpipe"].params_bytes == 2 * mem["1f1b"].params_bytes
    assert mem["dualpipe"].grads_bytes == 2 * mem["1f1b"].grads_bytes
    # one optimizer state per parameter, sharded over both copies' data-parallel ranks (registry.copies_of)
    assert mem["dualpipe"].optimizer_bytes == mem["1f1b"].optimizer_bytes
    assert mem["dualpipev"].params_bytes == mem["1f1b"].params_bytes
    plan = pipeline_plan(recipe.model, replace(base, pipeline_schedule="dualpipe"))
    assert plan[3].chunks[0].layers == pipeline_plan(recipe.model, base)[3].layers   # copy 0: stage 3
    assert plan[3].chunks[1].layers == pipeline_plan(recipe.model, base)[4].layers   # copy 1: stage PP-1-3
    assert plan[0].embedding and plan[0].output and plan[7].embedding and plan[7].output


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_split_w_memory_peaks_stop_changing_past_peak_count(pp):
    """``peak_count``: the held counts at 3*PP and 12*PP micro-batches agree (the peak is in the warm-up)."""
    from primus_ext.model.pipeline.dualpipe import in_flight_by_chunk, wgrad_held_chunks
    from primus_ext.model.pipeline.zb2 import zb_h2_in_flight, zb_h2_wgrad_held
    from primus_ext.model.pipeline.zbv import held_at_peak

    for m in (3 * pp, 4 * pp):
        for r in range(pp):
            for name in ("zb-v", "v-half", "v-min"):
                assert held_at_peak(name, r, pp, m) == held_at_peak(name, r, pp, 12 * pp)
            for name in ("dualpipe", "dualpipev"):
                assert in_flight_by_chunk(name, r, pp, 4 * pp) == in_flight_by_chunk(name, r, pp, 12 * pp)
                assert wgrad_held_chunks(name, r, pp, 4 * pp) == wgrad_held_chunks(name, r, pp, 12 * pp)
            assert zb_h2_in_flight(r, pp, m) == zb_h2_in_flight(r, pp, 12 * pp)
            assert zb_h2_wgrad_held(r, pp, m) == zb_h2_wgrad_held(r, pp, 12 * pp)


@pytest.mark.parametrize("name", ["zb-h2", "zb-v", "v-half", "dualpipe", "dualpipev"])
def test_long_steps_of_own_simulators_extend_exactly(name):
    """``Schedule.run`` past its small reference budget equals the op-by-op simulation (uneven chunk times)."""
    s = get_schedule(name)
    chunks = s.chunks_per_rank(1)
    times = tuple(tuple(ChunkTimes(fwd=1.0 + 0.1 * r + 0.05 * c, bwd=2.1 + 0.1 * r, wgrad=0.9)
                        for c in range(chunks)) for r in range(4))
    m = 160
    long = s.run(times, m, (0.01,) * (4 * chunks - 1))
    direct = s.simulate(times, m, (0.01,) * (4 * chunks - 1))
    assert long.makespan == pytest.approx(direct.makespan, rel=1e-9)
    assert long.busy == pytest.approx(direct.busy, rel=1e-9)


def test_zb_v_keeps_deferred_weight_gradients_under_one_limit():
    """Primus zbv.py keeps forward activations and deferred W inputs under one limit (2P chunks of f_mem); with a
    W share the greedy order's joint holding stays within it, and a larger share defers fewer W."""
    from primus_ext.model.pipeline.zbv import held_states, wgrad_share

    share = wgrad_share(4096, 32, 4096)  # runtime.py: 32h / (34h + 5as)
    assert share == pytest.approx(32 * 4096 / (34 * 4096 + 5 * 32 * 4096))
    for pp in (2, 4, 8):
        for rank in range(pp):
            joint = max(f0 + f1 + share * 2 * w for (f0, f1), w in held_states("zb-v", rank, pp, 4 * pp, share))
            assert joint <= 2 * pp + 1e-9
            heavy = max(w for _, w in held_states("zb-v", rank, pp, 4 * pp, 1.0))
            assert heavy <= max(w for _, w in held_states("zb-v", rank, pp, 4 * pp, 0.0))
