"""DualPipe's memory in flight, walked op by op: the activations and the weight-grad inputs waiting for their W are
added at the same moment (``dualpipe.held_walk``), never at their separate peaks; the report's table 2 count."""

from __future__ import annotations

import pytest

from primus_ext.model.pipeline.dualpipe import (
    held_walk,
    in_flight_by_chunk,
    in_flight_chunks,
    op_order,
    wgrad_held_chunks,
)
from primus_ext.model.pipeline.registry import get_schedule, peak_count


@pytest.mark.parametrize("name", ["dualpipe", "dualpipev"])
@pytest.mark.parametrize("pp", [2, 4, 8, 16])
def test_the_walk_never_exceeds_the_separate_peaks_and_reaches_the_activation_peak(name, pp):
    m = peak_count(pp, 10 * pp)
    for rank in range(pp):
        states = held_walk(name, rank, pp, m)
        act_peak = sum(in_flight_by_chunk(name, rank, pp, m))
        w_peak = wgrad_held_chunks(name, rank, pp, m) / 2
        assert max(sum(c) for c, _ in states) == act_peak
        assert all(sum(c) <= act_peak and w <= w_peak for c, w in states)
        # no state is covered by another (the memory model takes the largest of them)
        for c, w in states:
            assert not any(o != (c, w) and o[0][0] >= c[0] and o[0][1] >= c[1] and o[1] >= w for o in states)


def test_a_middle_rank_holds_table_2s_pp_plus_one_stage_micro_batches():
    """DeepSeek-V3 report table 2: DualPipe's activation memory is PP+1 micro-batches of a stage; at that moment no
    weight-grad input waits (the deferred W run in the ramp-up and cool-down)."""
    pp = 16
    for rank in range(1, pp - 1):
        states = held_walk("dualpipe", rank, pp, peak_count(pp, 120))
        top = max(states, key=lambda s: sum(s[0]))
        assert sum(top[0]) == pp + 1 == in_flight_chunks("dualpipe", rank, pp, peak_count(pp, 120))
        assert top[1] == 0


def test_held_states_of_the_registered_schedule_are_the_walk():
    s = get_schedule("dualpipe")
    assert s.held_states(3, 8, 2, 64) == held_walk("dualpipe", 3, 8, peak_count(8, 64))
    assert s.pairs_passes and not get_schedule("interleaved").pairs_passes
    # an illegal count has no order: the table's count, split over the chunks
    assert s.held_states(3, 8, 2, 7) == (((5.0, 4.0), 0.0),)
    assert op_order("dualpipe", 0, 4, 8)
