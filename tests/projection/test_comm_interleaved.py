"""DP collectives under the interleaved schedule overlap the chunks megatron-core finishes early.

The window is checked against an event simulation whose chunk order comes from megatron-core's own
``get_schedule_table`` (the backward runs the table with chunk ids reversed), independent of the closed
form in ``comm.interleaved_window``.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from primus_ext.projection.comm import interleaved_window, interleaved_window_many


def _simulated_hidden(window: float, total: float, vpp: int, pp: int, m: int) -> float:
    """Comm seconds done by the end of the rank's backward: per-chunk collectives on one stream, each
    chunk's buckets starting with its last micro-batch's backward pass (grad sync is enabled before it)."""
    from megatron.core.pipeline_parallel.schedules import get_schedule_table

    table = get_schedule_table(m, vpp, pp)
    chunk_pass = window / vpp
    passes = len(table)
    start_of_last: dict[int, float] = {}
    for k, (microbatch, chunk) in enumerate(table):
        if microbatch == m - 1:
            start_of_last[vpp - 1 - chunk] = (k - passes) * chunk_pass  # backward chunk id, end of backward = 0
    clock, done = -np.inf, 0.0
    share = total / vpp
    for chunk in sorted(start_of_last, key=start_of_last.get):
        clock = max(clock, start_of_last[chunk])
        done += max(0.0, min(share, -clock))
        clock += share
    return done


def test_megatron_order_finishes_chunk_c_c_times_pp_passes_before_the_end():
    from megatron.core.pipeline_parallel.schedules import get_schedule_table

    pp, vpp, m = 4, 3, 8
    table = get_schedule_table(m, vpp, pp)
    for chunk in range(vpp):
        last = max(k for k, (mb, c) in enumerate(table) if mb == m - 1 and vpp - 1 - c == chunk)
        assert len(table) - 1 - last == chunk * pp


def test_by_hand():
    assert interleaved_window(12.0, 40.0, 1, 4) == 12.0  # 1F1B: one micro-batch's pass
    # vpp 4, pp 2: chunk pass 3, spacing 6; share 10 >= 6: the stream never idles -> 3 * 6 + 3
    assert interleaved_window(12.0, 40.0, 4, 2) == pytest.approx(21.0)
    # share 2 < 6: every chunk finishes in its gap, the last one within its own pass -> all 8 hidden
    assert interleaved_window(12.0, 8.0, 4, 2) == pytest.approx(8.0)


@pytest.mark.parametrize(("pp", "vpp", "m"), [(2, 2, 4), (4, 3, 8), (4, 12, 8), (8, 4, 16), (2, 5, 6)])
def test_window_equals_the_event_simulation_on_megatrons_order(pp, vpp, m):
    rng = random.Random(pp * 100 + vpp)
    for _ in range(40):
        window, total = rng.uniform(0.01, 1.0), rng.uniform(0.001, 3.0)
        hidden = min(total, interleaved_window(window, total, vpp, pp))
        assert hidden == pytest.approx(_simulated_hidden(window, total, vpp, pp, m), rel=1e-9, abs=1e-12)


def test_array_form_equals_the_scalar_one():
    rng = np.random.default_rng(5)
    window, total = rng.uniform(0.01, 1.0, size=(50, 4)), rng.uniform(0.001, 3.0, size=(50, 4))
    for vpp, pp in ((1, 4), (3, 4), (12, 4)):
        batch = interleaved_window_many(window, total, vpp, pp)
        scalar = [[interleaved_window(w, t, vpp, pp) for w, t in zip(wr, tr, strict=True)]
                  for wr, tr in zip(window, total, strict=True)]
        assert np.array_equal(batch, np.array(scalar))
