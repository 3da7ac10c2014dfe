"""Many 1F1B / interleaved schedules of one structure at once, compiled: the tuner's batch path.

    >>> from primus_ext.model.pipeline.batch import simulate_many
    >>> finish, critical_p2p = simulate_many("interleaved", pp, vpp, m, durations, p2p)

``durations[k]``: configuration k's per-micro-batch op times in ``pipeline``'s slot order (forwards of
rank 0 chunk 0, rank 0 chunk 1, ..., then the backwards in the same order; under EP overlap the weight-grads
and the unpaired forwards and backwards follow); ``p2p[k]``: its send/recv
seconds per virtual-stage boundary. Every configuration runs the recurrence of ``schedules.simulate_fixed``
over the structure's op order (``schedules.fixed_structure``; long runs: below): an op ends at max(its rank is
free, its input arrived + p2p) + its duration; the critical p2p follows the binding input, the rank's own
predecessor on a tie (the forward propagation ``pipeline.periodic`` uses, equal to
``pipeline.ops.critical_p2p``'s walk back).

Compiled with numba (the op loop is ~2 ns per op instead of ~250 ns in Python) and run over every
configuration of a group in one call; tests/model/test_pipeline_batch.py checks it against
``pipeline.simulate`` op for op.

Long runs take ``pipeline.periodic``'s fast path, compiled (``_run_periodic``), where ``pipeline.simulate``
takes it (``schedules.worth_extrapolating``: interleaved always, 1F1B when m > 4*PP + 3): the ops in
``schedules.periodic_of``'s order, simulated until the finish times and critical p2p of a window repeat shifted
by a constant (same tolerance, checks, lags and stride as ``simulate_periodic``), then the jump over whole
periods and the drain (``_jump``), with the same float operations; without a repetition every op runs.
``simulated_ops`` says how many ops each configuration simulated.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from primus_ext.model.pipeline.long import LINEAR_TOLERANCE, reference_plan, refusal, simulated_directly
from primus_ext.model.pipeline.ops import UNPAIRED_SLOT_KINDS
from primus_ext.model.pipeline.periodic import PERIOD_TOLERANCE
from primus_ext.model.pipeline.schedules import fixed_structure, periodic_of, worth_extrapolating

DURATION_KINDS = UNPAIRED_SLOT_KINDS + 2
"""Duration slot blocks with ``extra``: forwards, backwards, weight-grads, unpaired forwards and backwards."""


@lru_cache(maxsize=256)
def structure_arrays(schedule: str, pp: int, vpp: int, m: int, group: int, extra: int = 0) -> tuple[np.ndarray, ...]:
    """(rank predecessor, input, duration slot, p2p slot, last op per rank) as int arrays; a missing
    input is the predecessor with the zero p2p slot (index PP*VPP - 1)."""
    st = fixed_structure(schedule, pp, vpp, m, group, extra)
    zero = pp * vpp - 1
    steps = np.array(st.steps, dtype=np.int64).reshape(-1, 4)
    prev, dep, dslot, cslot = (steps[:, k].copy() for k in range(4))
    missing = dep <= 0
    dep[missing] = prev[missing]
    cslot[missing | (cslot < 0)] = zero
    return prev, dep, dslot, cslot, np.array(st.last, dtype=np.int64)


@lru_cache(maxsize=256)
def periodic_arrays(schedule: str, pp: int, vpp: int, m: int, group: int, extra: int = 0) -> tuple[np.ndarray, ...]:
    """``schedules.periodic_of``'s structure as int arrays: (rank predecessor, input, duration slot, p2p slot,
    last op per rank, (shift Q, start, end, window)); the p2p slot -1 (no send/recv) becomes the zero slot
    PP*VPP - 1."""
    per = periodic_of(schedule, pp, vpp, m, group, extra)
    steps = np.array(per.steps, dtype=np.int64).reshape(-1, 4)
    prev, dep, dslot, cslot = (steps[:, k].copy() for k in range(4))
    cslot[cslot < 0] = pp * vpp - 1
    shape = np.array((per.shift, per.start, per.end, per.window), dtype=np.int64)
    return prev, dep, dslot, cslot, np.array(per.last, dtype=np.int64), shape


@njit(cache=True, nogil=True)
def _run_many(prev, dep, dslot, cslot, last, durs, comms, finish, critical):  # pragma: no cover - compiled
    n_ops = prev.shape[0]
    fin = np.zeros(n_ops + 1)
    cp = np.zeros(n_ops + 1)
    for k in range(durs.shape[0]):
        _steps(prev, dep, dslot, cslot, durs[k], comms[k], fin, cp, 0, n_ops)
        _store(last, fin, cp, finish, critical, k)


@njit(cache=True, nogil=True)
def _steps(prev, dep, dslot, cslot, dk, ck, fin, cp, lo, hi):  # pragma: no cover - compiled
    """Positions lo + 1 .. hi (steps lo .. hi - 1): ``pipeline.periodic._run``."""
    for q in range(lo, hi):
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


@njit(cache=True, nogil=True)
def _store(last, fin, cp, finish, critical, k):  # pragma: no cover - compiled
    """Per-rank finish of configuration k; the critical p2p of the first rank finishing last."""
    worst = 0
    for r in range(last.shape[0]):
        f = fin[last[r]]
        finish[k, r] = f
        if f > finish[k, worst]:
            worst = r
    critical[k] = cp[last[worst]]


@njit(cache=True, nogil=True)
def _repeats(fin, cp, i, lag, span, tol):  # pragma: no cover - compiled
    """``pipeline.periodic._repeats``: positions (i - span, i] equal those ``lag`` earlier shifted by constants
    (max - min of the differences within ``tol``; stops at the first partial range over it, which the whole
    range can only exceed too)."""
    lo = i - span + 1
    for values in (fin, cp):
        for stride in (7, 1):  # a sparse pass finds most mismatches sooner
            low = high = values[i] - values[i - lag]
            for q in range(i - 1, lo - 1, -stride):
                step = values[q] - values[q - lag]
                low = min(low, step)
                high = max(high, step)
                if high - low > tol:
                    return False
    return True


@njit(cache=True, nogil=True)
def _at(values, q, i, lag, step):  # pragma: no cover - compiled
    """Position q after a repetition found at i with lag ``lag``: k periods back, shifted by k * step."""
    if q <= i:
        return values[q]
    k = -((i - q) // lag)  # ceil((q - i) / lag)
    return values[q - k * lag] + k * step


@njit(cache=True, nogil=True)
def _run_periodic(prev, dep, dslot, cslot, last, shape, durs, comms, tolerance, finish, critical,
                  simulated):  # pragma: no cover - compiled
    """``pipeline.periodic.simulate_periodic`` (with ``_jump``) per configuration; ``simulated[k]``: the ops
    configuration k simulated."""
    n_ops = prev.shape[0]
    shift, start, end, span = shape[0], shape[1], shape[2], shape[3]
    fin = np.zeros(n_ops + 1)
    cp = np.zeros(n_ops + 1)
    stride = min(shift, max(span, 32))
    for k in range(durs.shape[0]):
        dk = durs[k]
        ck = comms[k]
        i = max(start - 1, span + shift)
        if end - i < shift:  # too little steady state to gain anything
            _steps(prev, dep, dslot, cslot, dk, ck, fin, cp, 0, n_ops)
            simulated[k] = n_ops
            _store(last, fin, cp, finish, critical, k)
            continue
        _steps(prev, dep, dslot, cslot, dk, ck, fin, cp, 0, i)
        count = i
        lag = 0  # the repetition's lag once found
        while i < end:
            tol = tolerance * max(1.0, abs(fin[i]))
            trial = shift
            mid, low = i - span // 2, i - span + 1
            while i + 1 >= start + trial - shift and i - span - trial >= 0:
                step = fin[i] - fin[i - trial]  # cheap first test on three positions of the window
                if (abs(fin[mid] - fin[mid - trial] - step) <= tol and abs(fin[low] - fin[low - trial] - step) <= tol
                        and _repeats(fin, cp, i, trial, span, tol)):
                    lag = trial
                    break
                trial += shift
            if lag:
                break
            step = min(stride, end - i)
            _steps(prev, dep, dslot, cslot, dk, ck, fin, cp, i, i + step)
            count += step
            i += step
        if not lag:
            _steps(prev, dep, dslot, cslot, dk, ck, fin, cp, i, n_ops)
            simulated[k] = count + n_ops - i
            _store(last, fin, cp, finish, critical, k)
            continue
        # the jump: the window before ``end`` from the periods before i, then the drain
        lam = fin[i] - fin[i - lag]
        kappa = cp[i] - cp[i - lag]
        for q in range(max(i, end - span) + 1, end + 1):  # reads positions <= i only
            fin[q] = _at(fin, q, i, lag, lam)
            cp[q] = _at(cp, q, i, lag, kappa)
        _steps(prev, dep, dslot, cslot, dk, ck, fin, cp, end, n_ops)
        simulated[k] = count + n_ops - end
        worst = 0
        for r in range(last.shape[0]):  # positions skipped over (i, end - window]: extrapolated
            q = last[r]
            f = _at(fin, q, i, lag, lam) if i < q <= end - span else fin[q]
            finish[k, r] = f
            if f > finish[k, worst]:
                worst = r
        q = last[worst]
        critical[k] = _at(cp, q, i, lag, kappa) if i < q <= end - span else cp[q]


def _simulate(schedule: str, pp: int, vpp: int, m: int, durations: np.ndarray, p2p: np.ndarray, group: int | None,
              extra: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if simulated_directly(pp, vpp, m):
        return _simulate_short(schedule, pp, vpp, m, durations, p2p, group, extra)
    for m0, period in reference_plan(m, pp, vpp, group or pp):  # ``pipeline.long.long_step``, all at once
        runs = [_simulate_short(schedule, pp, vpp, m0 + i * period, durations, p2p, group, extra) for i in range(4)]
        done = _extend_many(runs, m, m0, period)
        if done is not None:
            return done
    raise refusal(m, pp, vpp, group or pp)


def _extend_many(runs: list, m: int, m0: int, period: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    k = (m - m0) // period
    out = []
    for part in (0, 1):
        x0, x1, x2, x3 = (np.asarray(r[part], dtype=np.float64) for r in runs)
        step, scale = x1 - x0, np.maximum(1.0, np.abs(x3))
        if (np.abs(x2 - x1 - step) > LINEAR_TOLERANCE * scale).any() or \
                (np.abs(x3 - x2 - step) > LINEAR_TOLERANCE * scale).any():
            return None
        out.append(x0 + k * step)
    return out[0], out[1], sum(r[2] for r in runs)


def _simulate_short(schedule: str, pp: int, vpp: int, m: int, durations: np.ndarray, p2p: np.ndarray,
                    group: int | None, extra: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if schedule not in ("1f1b", "interleaved"):
        raise ValueError(f"simulate_many runs the fixed orders (1f1b, interleaved), not {schedule!r}")
    stages = pp * vpp
    durations = np.ascontiguousarray(durations, dtype=np.float64)
    n = durations.shape[0]
    slots = DURATION_KINDS * stages if extra else 2 * stages
    if durations.shape != (n, slots) or p2p.shape != (n, stages - 1):
        raise ValueError(f"need durations (n, {slots}) and p2p (n, {stages - 1}); got {durations.shape}, "
                         f"{p2p.shape}")
    comms = np.zeros((n, stages))
    comms[:, :stages - 1] = p2p
    group = group or pp
    if vpp == 1:  # one chunk: the 1F1B order whatever the name (as ``pipeline.simulate``)
        schedule = "1f1b"
    finish = np.zeros((n, pp))
    critical = np.zeros(n)
    simulated = np.zeros(n, dtype=np.int64)
    if not n:
        return finish, critical, simulated
    if worth_extrapolating(schedule, pp, vpp, m, group, extra):
        *arrays, shape = periodic_arrays(schedule, pp, vpp, m, group, extra)
        _run_periodic(*arrays, shape, durations, comms, PERIOD_TOLERANCE, finish, critical, simulated)
    else:
        arrays = structure_arrays(schedule, pp, vpp, m, group, extra)
        _run_many(*arrays, durations, comms, finish, critical)
        simulated[:] = arrays[0].shape[0]
    return finish, critical, simulated


def simulate_many(schedule: str, pp: int, vpp: int, m: int, durations: np.ndarray, p2p: np.ndarray, *,
                  group: int | None = None, extra: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per configuration: the finish time of every rank's last op (``(n, PP)``) and the send/recv seconds
    on the critical path (``(n,)``; the path ends at the first rank finishing last).

    ``durations``: ``(n, 2 * PP * VPP)``, forwards then backwards, or with ``extra`` ``(n, 5 * PP * VPP)``, in
    ``pipeline.ops.duration_slot``'s order (weight-grads, unpaired forwards and backwards after them);
    ``p2p``: ``(n, PP * VPP - 1)`` (boundary s between virtual stages s and s + 1, virtual stage = chunk * PP +
    rank). ``schedule``: ``1f1b`` or ``interleaved``; ``extra``: ``overlap_moe_expert_parallel_comm``'s combined
    1F1B (Megatron's extra interleaved warm-up forward, the passes without a partner in their own slots)."""
    finish, critical, _ = _simulate(schedule, pp, vpp, m, durations, p2p, group, extra)
    return finish, critical


def simulated_ops(schedule: str, pp: int, vpp: int, m: int, durations: np.ndarray, p2p: np.ndarray, *,
                  group: int | None = None, extra: int = 0) -> np.ndarray:
    """``(n,)``: how many ops ``simulate_many`` simulates per configuration (all 2 * PP * VPP * m of them
    unless the periodic steady state was extrapolated)."""
    return _simulate(schedule, pp, vpp, m, durations, p2p, group, extra)[2]


__all__ = ["periodic_arrays", "simulate_many", "simulated_ops", "structure_arrays"]
