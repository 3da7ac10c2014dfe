"""Many 1F1B / interleaved schedules of one structure at once, compiled: the tuner's batch path.

    >>> from primus_ext.model.pipeline_batch import simulate_many
    >>> finish, critical_p2p = simulate_many("interleaved", pp, vpp, m, durations, p2p)

``durations[k]``: configuration k's per-micro-batch op times in ``pipeline``'s slot order (forwards of
rank 0 chunk 0, rank 0 chunk 1, ..., then the backwards in the same order); ``p2p[k]``: its send/recv
seconds per virtual-stage boundary. Every configuration runs the recurrence of ``pipeline._fixed``
over the same op order (``pipeline._structure``): an op ends at max(its rank is free, its input arrived
+ p2p) + its duration; the critical p2p follows the binding input, the rank's own predecessor on a tie
(the forward propagation ``pipeline_periodic`` uses, equal to ``pipeline._critical_p2p``'s walk back).

Compiled with numba (the op loop is ~2 ns per op instead of ~250 ns in Python) and run over every
configuration of a group in one call; tests/model/test_pipeline_batch.py checks it against
``pipeline.simulate`` op for op.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from primus_ext.model.pipeline import _structure


@lru_cache(maxsize=256)
def structure_arrays(schedule: str, pp: int, vpp: int, m: int, group: int, extra: int = 0) -> tuple[np.ndarray, ...]:
    """(rank predecessor, input, duration slot, p2p slot, last op per rank) as int arrays; a missing
    input is the predecessor with the zero p2p slot (index PP*VPP - 1)."""
    st = _structure(schedule, pp, vpp, m, group, extra)
    zero = pp * vpp - 1
    steps = np.array(st.steps, dtype=np.int64).reshape(-1, 4)
    prev, dep, dslot, cslot = (steps[:, k].copy() for k in range(4))
    missing = dep <= 0
    dep[missing] = prev[missing]
    cslot[missing | (cslot < 0)] = zero
    return prev, dep, dslot, cslot, np.array(st.last, dtype=np.int64)


@njit(cache=True, nogil=True)
def _run_many(prev, dep, dslot, cslot, last, durs, comms, finish, critical):  # pragma: no cover - compiled
    n_ops = prev.shape[0]
    fin = np.zeros(n_ops + 1)
    cp = np.zeros(n_ops + 1)
    for k in range(durs.shape[0]):
        dk = durs[k]
        ck = comms[k]
        for q in range(n_ops):
            p = prev[q]
            d = dep[q]
            t = fin[p]
            c = ck[cslot[q]]
            a = fin[d] + c
            if a > t:
                fin[q + 1] = a + dk[dslot[q]]
                cp[q + 1] = cp[d] + c
            else:
                fin[q + 1] = t + dk[dslot[q]]
                cp[q + 1] = cp[p]
        worst = 0
        for r in range(last.shape[0]):
            f = fin[last[r]]
            finish[k, r] = f
            if f > finish[k, worst]:
                worst = r
        critical[k] = cp[last[worst]]


def simulate_many(schedule: str, pp: int, vpp: int, m: int, durations: np.ndarray, p2p: np.ndarray, *,
                  group: int | None = None, extra: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per configuration: the finish time of every rank's last op (``(n, PP)``) and the send/recv seconds
    on the critical path (``(n,)``; the path ends at the first rank finishing last).

    ``durations``: ``(n, 2 * PP * VPP)``; ``p2p``: ``(n, PP * VPP - 1)`` (boundary s between virtual stages
    s and s + 1, virtual stage = chunk * PP + rank). ``schedule``: ``1f1b`` or ``interleaved``;
    ``extra``: Megatron's extra interleaved warm-up forward (``overlap_moe_expert_parallel_comm``)."""
    if schedule not in ("1f1b", "interleaved"):
        raise ValueError(f"simulate_many runs the fixed orders (1f1b, interleaved), not {schedule!r}")
    stages = pp * vpp
    durations = np.ascontiguousarray(durations, dtype=np.float64)
    n = durations.shape[0]
    if durations.shape != (n, 2 * stages) or p2p.shape != (n, stages - 1):
        raise ValueError(f"need durations (n, {2 * stages}) and p2p (n, {stages - 1}); got {durations.shape}, "
                         f"{p2p.shape}")
    comms = np.zeros((n, stages))
    comms[:, :stages - 1] = p2p
    prev, dep, dslot, cslot, last = structure_arrays(schedule, pp, vpp, m, group or pp, extra)
    finish = np.zeros((n, pp))
    critical = np.zeros(n)
    if n:
        _run_many(prev, dep, dslot, cslot, last, durations, comms, finish, critical)
    return finish, critical


__all__ = ["simulate_many", "structure_arrays"]
