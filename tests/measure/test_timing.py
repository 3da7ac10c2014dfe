"""Timing: statistics, forward/backward split, recompute timed inside backward, weight-grad split."""

from __future__ import annotations

import pytest
from archs import GQA

from primus_ext.measure.build import build_layer
from primus_ext.measure.timing import MeasureTimeout, Stats, time_layer
from primus_ext.model.rank_shape import RankShape


def test_stats_median_and_spread():
    st = Stats.of([10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0])
    assert st.median_ms == 15.0 and st.n == 11
    assert st.p10_ms == pytest.approx(11.0) and st.p90_ms == pytest.approx(19.0)
    assert st.spread == pytest.approx(8.0 / 15.0)
    assert Stats.of([5.0]).spread == 0.0


def test_plain_layer_has_no_recompute(world1):
    t = time_layer(build_layer(RankShape(kind="dense", arch=GQA, seq_length=128), device="cpu"), warmup=1, reps=3)
    assert t.fwd.median_ms > 0 and t.bwd.median_ms > 0 and t.fwd.n == 3
    assert t.recompute.median_ms == 0.0


def test_full_recompute_reruns_the_forward_inside_backward(world1):
    """The re-run forward is the layer's forward: the same order of time as the measured forward
    (fastest decile compared: this shared 2-core machine has 40x outliers under load)."""
    built = build_layer(RankShape(kind="dense", arch=GQA, seq_length=256, recompute="full"), device="cpu")
    t = time_layer(built, warmup=1, reps=5, split_wgrad=True)
    assert t.recompute.median_ms > 0
    assert 0.2 < t.recompute.p10_ms / t.fwd.p10_ms < 5.0
    assert t.wgrad_ms is not None and 0 <= t.wgrad_ms <= t.bwd.median_ms + t.recompute.median_ms


def test_selective_recompute_times_core_attention_only(world1):
    built = build_layer(RankShape(kind="dense", arch=GQA, seq_length=256, recompute="selective"), device="cpu")
    t = time_layer(built, warmup=1, reps=5)
    assert 0 < t.recompute.p10_ms < t.fwd.p10_ms


def test_timeout_before_minimum_reps(world1):
    built = build_layer(RankShape(kind="dense", arch=GQA, seq_length=64), device="cpu")
    with pytest.raises(MeasureTimeout):
        time_layer(built, warmup=0, reps=10, timeout_s=0.0)
