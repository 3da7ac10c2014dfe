"""Fast 1F1B / interleaved simulation: simulate the transient, extrapolate the periodic steady state.

    >>> from primus_ext.model.pipeline.periodic import simulate_periodic
    >>> makespan, finish, critical_p2p = simulate_periodic(st, durs, comms, group)

Both fixed schedules are max-plus linear: an op ends at max(its rank is free, its input arrived) + its
duration, and the op times do not depend on the micro-batch. In the steady part of the schedule the
dependency structure is invariant under "shift every micro-batch by one period" (1F1B: one
micro-batch; interleaved: one group of ``group`` micro-batches through every chunk), which moves an op
by ``Q`` positions in the topological order of ``schedules.fixed_structure``. Once the finish times of a
window covering the longest dependency lag repeat shifted by one constant ``lam`` after ``c`` periods
(max-plus systems may repeat only every c periods: on uniform 1F1B stages with p2p, a slow "wave"
crosses the ranks, c ~ PP),
every later op of the invariant region repeats too (induction over the max-plus recurrence), so the
simulation jumps over whole periods and simulates only the drain. The same holds for the send/recv
seconds on the critical path, propagated forward (``cp``): an op inherits the critical p2p of its
binding input, i.e. of the walk back from it that ``pipeline.ops.critical_p2p`` does.

The result equals the op-by-op simulation up to float rounding of the extrapolated sums; when no
period is found the loop simply runs to the end (the full simulation). ``timeline=True`` and the tests
use the op-by-op simulator (``schedules.simulate_fixed``) as the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import sub

PERIOD_TOLERANCE = 1e-12
"""Relative tolerance of the repetition test (float rounding of sums of ~1e4 op times, ~1e-13)."""


@dataclass(frozen=True)
class Periodic:
    """Shift structure of one op order (positions 1-based as in ``pipeline.ops.Structure``)."""

    steps: tuple[tuple[int, int, int, int], ...]
    """(rank predecessor, input, duration slot, p2p slot); a missing input is the predecessor with slot -1."""
    shift: int
    """Q: positions one period moves an op."""
    start: int
    """First position of the shift-invariant run (steps[q] is steps[q - Q] moved by Q for q in the run)."""
    end: int
    """Last position of the run."""
    window: int
    """Longest dependency lag (positions) from ``start`` on."""
    last: tuple[int, ...]


def periodic_structure(ops: tuple, steps: tuple, last: tuple[int, ...], pp: int, vpp: int, group: int) -> Periodic:
    """Find the shift-invariant run of a ``pipeline.ops.Structure`` (``start > end`` when there is none)."""
    g = 1 if vpp == 1 else group
    shift = 2 * pp * vpp * g
    fast = tuple((p, d, ds, cs) if d > 0 else (p, p, ds, -1) for p, d, ds, cs in steps)
    n = len(ops)
    invariant = [False] * (n + 1)
    for q in range(shift + 1, n + 1):
        kind, r, c, mb = ops[q - shift - 1]
        if ops[q - 1] != (kind, r, c, mb + g):  # the op one period later sits Q positions later
            continue
        p0, d0, ds0, cs0 = fast[q - shift - 1]
        p1, d1, ds1, cs1 = fast[q - 1]
        invariant[q] = p0 > 0 and p1 == p0 + shift and d1 == d0 + shift and ds1 == ds0 and cs1 == cs0
    best = (1, 0)
    q = 1
    while q <= n:  # longest run of invariant positions
        if invariant[q]:
            r0 = q
            while q + 1 <= n and invariant[q + 1]:
                q += 1
            if q - r0 > best[1] - best[0]:
                best = (r0, q)
        q += 1
    start, end = best
    window = max((q - min(fast[q - 1][0], fast[q - 1][1]) for q in range(start, n + 1)), default=0)
    return Periodic(steps=fast, shift=shift, start=start, end=end, window=window, last=last)


def stretch(per: Periodic, k: int) -> Periodic:
    """``per`` with ``k`` periods inserted at the end of its invariant run: the last period repeated,
    later positions and their references moved by k * Q (references into the prefix before the run stay).
    The caller checks the rule against directly built structures before trusting it."""
    if k <= 0 or per.end - per.start + 1 < per.shift:
        return per
    c, q = per.end, per.shift
    block = per.steps[c - q:c]
    steps = list(per.steps[:c])
    for j in range(1, k + 1):
        shift = j * q
        steps.extend((p + shift, d + shift, ds, cs) for p, d, ds, cs in block)
    moved = k * q
    first = per.start
    steps.extend((p + moved if p >= first else p, d + moved if d >= first else d, ds, cs)
                 for p, d, ds, cs in per.steps[c:])
    return Periodic(steps=tuple(steps), shift=q, start=per.start, end=c + moved, window=per.window,
                    last=tuple(x + moved if x > c - q else x for x in per.last))


def _run(fin: list[float], cp: list[float], steps, durs: list[float], comms: tuple[float, ...], base: int = 0) -> None:
    """Append the finish time and critical p2p of each op (positions offset by ``base``): the op starts
    when its rank is free and its input arrived; the critical p2p follows the binding input, the rank's
    own predecessor on a tie (as ``pipeline.ops.critical_p2p`` walks back)."""
    append, cappend = fin.append, cp.append
    if base:
        steps = [(p - base, d - base, ds, cs) for p, d, ds, cs in steps]
    for p, d, ds, cs in steps:
        t = fin[p]
        c = comms[cs]
        a = fin[d] + c
        if a > t:
            append(a + durs[ds])
            cappend(cp[d] + c)
        else:
            append(t + durs[ds])
            cappend(cp[p])


def _repeats(fin: list[float], cp: list[float], i: int, lag: int, span: int) -> tuple[float, float] | None:
    """(lam, kappa) when positions (i - span, i] equal those ``lag`` earlier shifted by constants."""
    lo = i - span + 1
    tol = PERIOD_TOLERANCE * max(1.0, abs(fin[i]))
    steps = list(map(sub, fin[lo:i + 1], fin[lo - lag:i + 1 - lag]))
    if max(steps) - min(steps) > tol:
        return None
    gains = list(map(sub, cp[lo:i + 1], cp[lo - lag:i + 1 - lag]))
    if max(gains) - min(gains) > tol:
        return None
    return steps[-1], gains[-1]


def simulate_periodic(per: Periodic, durs: list[float], comms: tuple[float, ...]) -> tuple[tuple[float, ...], float]:
    """Per-rank finish times and the critical path's p2p seconds (see the module docstring).

    A repetition with lag L = c * Q checked at position i proves every position in (i, end]: their steps
    are those L earlier moved by L (each of q, q - Q, ..., q - L + Q lies in the invariant run: i + 1 + Q - L
    >= start) and their inputs lie in the checked window (i - window, i] or after it. Checked every
    ``stride`` positions, lags c = 1, 2, ... as far as the history reaches."""
    steps, shift, span, start, end = per.steps, per.shift, per.window, per.start, per.end
    fin, cp = [0.0], [0.0]
    i = max(start - 1, span + shift)
    if end - i < shift:  # too little steady state to gain anything
        _run(fin, cp, steps, durs, comms)
        return _result(per, fin, cp)
    _run(fin, cp, steps[:i], durs, comms)
    stride = min(shift, max(span, 32))
    while i < end:
        tol = PERIOD_TOLERANCE * max(1.0, abs(fin[i]))
        lag = shift
        mid, low = i - span // 2, i - span + 1
        while i + 1 >= start + lag - shift and i - span - lag >= 0:
            step = fin[i] - fin[i - lag]  # cheap first test on three positions of the window
            if abs(fin[mid] - fin[mid - lag] - step) <= tol and abs(fin[low] - fin[low - lag] - step) <= tol:
                found = _repeats(fin, cp, i, lag, span)
                if found:
                    return _jump(per, fin, cp, i, lag, found, durs, comms)
            lag += shift
        step = min(stride, end - i)
        _run(fin, cp, steps[i:i + step], durs, comms)
        i += step
    _run(fin, cp, steps[i:], durs, comms)
    return _result(per, fin, cp)


def _jump(per: Periodic, fin: list[float], cp: list[float], i: int, lag: int, found: tuple[float, float],
          durs: list[float], comms: tuple[float, ...]) -> tuple[tuple[float, ...], float]:
    """Every position q in (i, end] repeats position q - k * lag (k periods back, in (i - lag, i]) shifted
    by k * lam: rebuild the window before ``end`` from those, then simulate the drain after it."""
    lam, kappa = found
    end = per.end
    base = end - per.window  # fin2[q - base] holds position q > base

    def at(values: list[float], q: int, step: float) -> float:
        if q <= i:
            return values[q]
        k = -((i - q) // lag)  # ceil((q - i) / lag)
        return values[q - k * lag] + k * step

    fin2 = [0.0] + [at(fin, q, lam) for q in range(base + 1, end + 1)]
    cp2 = [0.0] + [at(cp, q, kappa) for q in range(base + 1, end + 1)]
    _run(fin2, cp2, per.steps[end:], durs, comms, base)
    finish = tuple(fin2[q - base] if q > base else at(fin, q, lam) for q in per.last)
    worst = max(range(len(finish)), key=lambda r: finish[r])
    q = per.last[worst]
    return finish, cp2[q - base] if q > base else at(cp, q, kappa)


def _result(per: Periodic, fin: list[float], cp: list[float]) -> tuple[tuple[float, ...], float]:
    finish = tuple(fin[q] for q in per.last)
    worst = max(range(len(finish)), key=lambda r: finish[r])
    return finish, cp[per.last[worst]]
