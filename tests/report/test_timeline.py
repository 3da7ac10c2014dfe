"""The Gantt segments of one step: they tile the step on every rank, every exposed comm kind has its own
segments adding up to the breakdown, send/recv waits are placed where the simulator waits, per-stage idle."""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus_ext.hardware import load_system
from primus_ext.projection import project
from primus_ext.report.timeline import (
    LAYER_COMMS,
    stage_idle,
    steady_cycle_s,
    step_segments,
    totals_by_kind,
    view_windows,
)
from primus_ext.specs import ExecutionSpec, ModelSpec


def _tail(p) -> float:
    b = p.breakdown
    return b.comm("dp_grad").exposed_s + b.optimizer_s + b.comm("dp_param").exposed_s


def test_segments_cover_the_step_on_every_rank(projection):
    segments = step_segments(projection)
    ranks = sorted({s.rank for s in segments})
    assert ranks == [0, 1, 2, 3]
    makespan = max(e.end for e in projection.timeline)
    for rank in ranks:
        totals = totals_by_kind(segments, rank)
        # every rank's bars tile [0, makespan + tail] without overlap
        assert sum(totals.values()) == pytest.approx(makespan + _tail(projection), rel=1e-9)
        ops = [s for s in segments if s.rank == rank and s.kind == "forward"]
        assert len(ops) == projection.num_microbatches  # one F per micro-batch (no VPP)
    # 1F1B: the first stage idles (PP-1) forward slots more than the last before its first backward
    assert totals_by_kind(segments, 0)["bubble"] > totals_by_kind(segments, 3)["bubble"]


@pytest.mark.parametrize("name", ["llama405b", "deepseek_v3"])
def test_every_exposed_comm_kind_is_drawn_as_itself(name, request):
    """On the busiest rank each layer-comm kind's segments add up to its exposed time in the breakdown (DeepSeek-V3:
    the EP all-to-all, ~21 % of the step); DP terms in the tail; send/recv waits on the chart."""
    p = request.getfixturevalue(name)
    segments = step_segments(p)
    busiest = max(p.stages, key=lambda s: s.busy_s).rank
    totals = totals_by_kind(segments, busiest)
    for kind in (*LAYER_COMMS, "dp_grad", "dp_param"):
        assert totals[kind] == pytest.approx(p.breakdown.comm(kind).exposed_s, rel=1e-6, abs=1e-9), kind
    assert totals["forward"] + totals["backward"] + totals["wgrad"] == pytest.approx(p.breakdown.compute_s, rel=1e-6)
    assert sum(totals.values()) == pytest.approx(p.step_time_s, rel=1e-9)
    assert any(s.kind == "pp" for s in segments)  # some op waited for its input in flight
    if name == "deepseek_v3":
        assert totals["ep"] / p.step_time_s > 0.15


def test_pp_waits_end_where_ops_start(llama405b):
    segments = step_segments(llama405b)
    starts = {(s.rank, round(s.start_s, 12)) for s in segments if s.kind in ("forward", "backward")}
    waits = [s for s in segments if s.kind == "pp"]
    assert waits and all((w.rank, round(w.end_s, 12)) in starts for w in waits)


def test_stage_idle_names_every_stage(request):
    """70B-like pattern: the busiest rank idles little, the others much more (the breakdown shows only the busiest)."""
    p = request.getfixturevalue("deepseek_v3")
    idle = stage_idle(p)
    assert [s.rank for s in idle] == list(range(p.execution.pp))
    busiest = max(idle, key=lambda s: s.busy_s)
    assert busiest.idle_s == pytest.approx(max(0.0, p.step_time_s - _tail(p) - busiest.busy_s), rel=1e-9)
    assert max(s.idle_fraction for s in idle) > 0.15 > busiest.idle_fraction
    for s in idle:
        assert s.busy_s + s.idle_s + s.tail_s == pytest.approx(p.step_time_s, rel=1e-9)


def test_view_windows_elide_the_middle_of_a_long_steady_state(llama405b, projection):
    segments = step_segments(llama405b)
    windows = view_windows(llama405b, segments)
    assert len(windows) == 3 and windows[0][0] == 0.0  # warm-up | steady state | cool-down and tail
    assert windows[2][1] == pytest.approx(llama405b.step_time_s)
    shown = sum(b - a for a, b in windows)
    assert shown < 0.1 * llama405b.step_time_s  # the 192 x 8 steady state is mostly elided
    small = view_windows(projection, step_segments(projection))
    assert small == [(0.0, pytest.approx(projection.step_time_s))]  # nothing to elide


@pytest.mark.parametrize(("pp", "vpp"), [(4, 2), (1, None)])
def test_segments_span_the_step_under_ep_overlap(pp, vpp):
    """Passes without a partner micro-batch run longer (their EP all-to-all exposed): the Gantt still ends at the
    step time, from the simulated timeline and from the stage times alone (PP=1 without a timeline)."""
    model = ModelSpec(name="moe", num_layers=8, hidden_size=2048, ffn_hidden_size=5504, num_attention_heads=16,
                      num_query_groups=4, kv_channels=128, vocab_size=32000, num_experts=16, moe_router_topk=2,
                      moe_ffn_hidden_size=1024, moe_layer_pattern=(True,) * 8)
    execution = ExecutionSpec(pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp,
                              data_parallel_size=16 // pp, expert_model_parallel_size=16 // pp, micro_batch_size=1,
                              global_batch_size=8 * 16 // pp, seq_length=2048, precision="bf16",
                              use_distributed_optimizer=True, overlap_moe_expert_parallel_comm=True)
    p = project(model, execution, load_system("h100", 2), None)
    assert p.breakdown.comm("ep").exposed_s > 0
    for q in (p, replace(p, timeline=())) if pp == 1 else (p,):
        segments = step_segments(q)
        end = max(s.end_s for s in segments)
        assert end == pytest.approx(q.step_time_s, rel=1e-9)


def test_the_steady_state_drawn_is_the_steady_state(llama70b):
    """Interleaved 1F1B repeats every PP micro-batches: two cycles after the warm-up caught stage 0 waiting (~30 %
    busy) where the step keeps it ~83 % busy (issue 43). The window drawn holds every stage as busy as its whole
    steady state, and lies in it."""
    from primus_ext.report.timeline import _phases, busy_share, steady_window

    segments = step_segments(llama70b)
    warm, cool, _ = _phases(llama70b, segments)
    steady = steady_window(llama70b, segments)
    assert steady is not None and warm < steady[0] < steady[1] < cool and steady in view_windows(llama70b, segments)
    for rank in range(llama70b.execution.pp):
        whole = busy_share(segments, rank, warm, cool)
        assert busy_share(segments, rank, *steady) == pytest.approx(whole, abs=0.02)
    assert busy_share(segments, 0, *steady) > 0.8
    two_after_warm_up = busy_share(segments, 0, warm, warm + 2 * steady_cycle_s(llama70b))
    assert two_after_warm_up < 0.5  # what the old window drew


def test_idle_headline_names_every_stage(llama70b, projection):
    """The breakdown's bubble is the busiest stage's (~1 %); the headline gives every stage's idle (~17 %)."""
    from primus_ext.report.projection_table import format_projection
    from primus_ext.report.timeline import idle_headline

    idle = stage_idle(llama70b)
    line = idle_headline(llama70b)
    assert f"{min(s.idle_fraction for s in idle):.1%} .. {max(s.idle_fraction for s in idle):.1%}" in line
    assert max(s.idle_fraction for s in idle) > 0.15 and "busiest stage's (7: " in line
    assert f"  pipeline idle    {line}" in format_projection(llama70b)
    assert idle_headline(replace(projection, stages=projection.stages[:1], timeline=())) is None
