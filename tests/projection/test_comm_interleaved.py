"""DP collectives under megatron-core's aligned grad reduce / param gather (Megatron-LM's and Primus's default).

The closed forms in ``comm.aligned_dp_windows`` are checked against event simulations that follow
megatron-core 0.16.1's own rules (pipeline_parallel/schedules.py): the pass order comes from its
``get_schedule_table`` (the backward runs the table with chunk ids reversed); a chunk's whole gradient
reduce is launched after the backward pass of its last micro-batch plus ``rank`` passes (chunk 0's after
the last pass); chunks 0 and 1 gather their parameters at the start, chunk c+1 when the forward reaches
chunk c's first micro-batch minus ``rank`` passes, and a chunk's first forward waits for its gather.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from primus_ext.projection.comm import aligned_dp_windows as _windows


def _table(m: int, vpp: int, pp: int) -> list[tuple[int, int]]:
    from megatron.core.pipeline_parallel.schedules import get_schedule_table

    return get_schedule_table(m, vpp, pp)


def _stream(launches: list[float], share: float) -> list[float]:
    """Finish times of collectives run one after another on one stream, in launch order."""
    done, clock = [], -np.inf
    for t in launches:
        clock = max(clock, t) + share
        done.append(clock)
    return done


def _grad_hidden(bwd1: float, total: float, vpp: int, pp: int, m: int, rank: int) -> float:
    table = _table(m, vpp, pp)
    passes, b, share = len(table), bwd1 / vpp, total / vpp
    last = {vpp - 1 - c: k for k, (mb, c) in enumerate(table) if mb == m - 1}  # backward chunk -> last pass
    launch = {c: min(0.0, (k + rank + 1 - passes) * b) for c, k in last.items()}  # end of the rank's backward = 0
    launch[0] = 0.0
    order = sorted(launch, key=lambda c: (launch[c], -c))
    done = _stream([launch[c] for c in order], share)
    return sum(max(0.0, min(share, share - (t - 0.0))) if t > 0 else share for t in done)


def _param_hidden(fwd1: float, total: float, vpp: int, pp: int, m: int, rank: int) -> float:
    table = _table(m, vpp, pp)
    f, share = fwd1 / vpp, total / vpp
    first: dict[int, int] = {}
    for k, (_, c) in enumerate(table):
        first.setdefault(c, k)
    trigger = {first[c] - rank: c + 1 for c in range(1, vpp - 1)}  # forward step -> chunk whose gather starts
    end = dict(zip((0, 1), _stream([0.0, 0.0], share), strict=True))  # chunks 0 and 1 at the start
    stream_end, clock = end[1], 0.0
    for k, (_, c) in enumerate(table):
        if k in trigger:  # issued before the step's compute (and before it waits for its own gather)
            stream_end = max(clock, stream_end) + share
            end[trigger[k]] = stream_end
        if first[c] == k:
            clock = max(clock, end[c])
        clock += f
    return total - (clock - len(table) * f)  # hidden = total - the forward's stall


def aligned_dp_windows(bwd1, fwd1, grad_t, param_t, share, vpp, pp, rank):
    """One rank's windows from the array form (every rank given the same times; column ``rank`` read)."""
    full = [np.full((1, pp), float(x)) for x in (bwd1, fwd1, grad_t, param_t, share)]
    return tuple(float(np.broadcast_to(part, (1, pp))[0, rank]) for part in _windows(*full, vpp, pp))


def test_by_hand():
    # 1F1B: rank 0 overlaps its last backward bucket by bucket; other ranks launch after their last pass
    assert aligned_dp_windows(12.0, 6.0, 40.0, 20.0, 0.1, 1, 4, 0) == (12.0, 0.1, 6.0, 0.1)
    assert aligned_dp_windows(12.0, 6.0, 40.0, 20.0, 0.1, 1, 4, 2)[0] == 0.0
    # vpp 4, pp 2, bwd1 12: pass 3, spacing 6; share 10 >= 6: the stream never idles -> 3 * 6 - rank * 3
    assert aligned_dp_windows(12.0, 6.0, 40.0, 20.0, 0.1, 4, 2, 0)[:2] == (18.0, 0.0)
    assert aligned_dp_windows(12.0, 6.0, 40.0, 20.0, 0.1, 4, 2, 1)[0] == 15.0
    # share 2 < 6: chunks 3 and 2 finish in their gaps, chunk 1 within 6 - 3 -> 2 + 2 + 2; chunk 0 exposed
    assert aligned_dp_windows(12.0, 6.0, 8.0, 20.0, 0.1, 4, 2, 1)[0] == pytest.approx(6.0)
    # parameters: fwd1 6, pass 1.5, spacing 3; share 5 -> 3 * min(5, 3)
    assert aligned_dp_windows(12.0, 6.0, 40.0, 20.0, 0.1, 4, 2, 0)[2:] == (9.0, 0.0)


@pytest.mark.parametrize(("pp", "vpp", "m"), [(2, 2, 4), (4, 3, 8), (4, 12, 8), (8, 4, 16), (2, 5, 6)])
def test_gradient_window_equals_the_event_simulation(pp, vpp, m):
    rng = random.Random(pp * 100 + vpp)
    for _ in range(30):
        bwd1, total, rank = rng.uniform(0.01, 1.0), rng.uniform(0.001, 3.0), rng.randrange(pp)
        hidden = aligned_dp_windows(bwd1, 0.0, total, 0.0, 0.0, vpp, pp, rank)[0]
        assert hidden == pytest.approx(_grad_hidden(bwd1, total, vpp, pp, m, rank), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(("pp", "vpp", "m"), [(2, 2, 4), (4, 3, 8), (4, 12, 8), (8, 4, 16)])
def test_parameter_window_equals_the_event_simulation(pp, vpp, m):
    rng = random.Random(pp * 10 + vpp)
    for _ in range(30):
        fwd1, total, rank = rng.uniform(0.01, 1.0), rng.uniform(0.001, 3.0), rng.randrange(pp)
        hidden = aligned_dp_windows(0.0, fwd1, 0.0, total, 0.0, vpp, pp, rank)[2]
        assert hidden == pytest.approx(_param_hidden(fwd1, total, vpp, pp, m, rank), rel=1e-9, abs=1e-12)


def test_each_rank_reads_its_own_row_of_times():
    """A rank's windows depend on its own times and its column only (the tail takes each rank's)."""
    rng = np.random.default_rng(5)
    bwd, fwd = rng.uniform(0.01, 1.0, size=(50, 4)), rng.uniform(0.01, 1.0, size=(50, 4))
    grad, param, share = rng.uniform(0.001, 3.0, size=(50, 4)), rng.uniform(0.001, 3.0, size=(50, 4)), \
        rng.uniform(0.0, 0.2, size=(50, 4))
    for vpp, pp in ((1, 4), (3, 4), (12, 4)):
        batch = _windows(bwd, fwd, grad, param, share, vpp, pp)
        for i, r in ((0, 0), (7, 1), (49, 3)):
            one = aligned_dp_windows(bwd[i, r], fwd[i, r], grad[i, r], param[i, r], share[i, r], vpp, pp, r)
            assert one == tuple(float(np.broadcast_to(part, (50, 4))[i, r]) for part in batch)
