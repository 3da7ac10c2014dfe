"""Terminal report of a tuning run: ranking, best vs recipe, regret, Pareto front, sensitivity.

    print(format_tune(result))          # result: primus_ext.tune.results.TuneResult
"""

from __future__ import annotations

from typing import Any

from primus_ext.tune.agent import Trial
from primus_ext.tune.results import TuneResult

GIB = 2**30
SHOWN_AXES = ("tp", "etp", "pp", "vpp", "schedule", "split", "cp", "ep", "mbs", "recompute", "sharding", "precision",
              "tp_comm_overlap", "ep_overlap", "dp_overlap")
SHORT = {"tp_comm_overlap": "tp_ov", "ep_overlap": "ep_ov", "dp_overlap": "dp_ov", "precision": "prec",
         "recompute": "recomp", "sharding": "shard"}


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return out


def _value(v: Any) -> str:
    return "on" if v is True else "off" if v is False else "-" if v is None else str(v)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.1f} %"


def _row(rank: str, t: Trial) -> list[str]:
    s = t.score
    head = "n/a" if t.headroom_bytes is None else f"{t.headroom_bytes / GIB:.1f}"
    exposed = ", ".join(f"{k} {v * 1e3:.0f}" for k, v in list(s.exposed().items())[:2]) if s else ""
    bubble = f"{s.breakdown.get('bubble_s', 0.0) * 1e3:.0f}" if s else ""
    return [rank, f"{t.tokens_per_s_per_gpu:.0f}", f"{s.step_time_s:.3f}" if s else "", f"{s.mfu:.3f}" if s else "",
            head, bubble, exposed, *(_value(t.config.get(a)) for a in SHOWN_AXES)]


def _trials_table(trials: list[tuple[str, Trial]]) -> list[str]:
    headers = ["#", "tok/s/GPU", "step s", "MFU", "free GiB", "bubble ms", "exposed ms",
               *(SHORT.get(a, a) for a in SHOWN_AXES)]
    return _table(headers, [_row(rank, t) for rank, t in trials if t.score is not None])


def _baseline_label(trial: Trial) -> str:
    """`` (out of memory)`` over the HBM, `` (over the margin)`` inside it but inside the kept-free share."""
    if trial.status == "projected":
        return ""
    m = trial.memory
    return " (over the margin)" if m is not None and m.peak_bytes <= m.capacity_bytes else " (out of memory)"


def format_tune(result: TuneResult, *, top: int = 10) -> str:
    st = result.stats
    lines = [f"strategy {result.strategy}: {st.projected} projected, {st.rejected_by_prefilter} rejected by the "
             f"memory pre-filter, {st.illegal} illegal, {st.cache_hits} cache hits"
             + (f", {st.pruned_illegal} pruned as illegal, {st.pruned_by_prefilter} pruned by memory"
                if st.pruned_illegal or st.pruned_by_prefilter else "")
             + f" in {st.wall_s:.1f} s" + (f" (space: {result.candidates} candidates)" if result.candidates else "")]
    lines.append("")
    ranked = [(str(i + 1), t) for i, t in enumerate(result.ranked[:top])]
    if result.baseline is not None and result.baseline.score is not None:
        ranked.append(("recipe" + _baseline_label(result.baseline), result.baseline))
    lines += _trials_table(ranked) if ranked else ["no configuration was projected"]
    lines.append("")
    if result.best is not None:
        lines.append(f"best: {result.best.tokens_per_s_per_gpu:.0f} tok/s/GPU; gain over the recipe "
                     f"{_pct(result.gain)}; regret vs exhaustive {_pct(result.regret)}"
                     + (f" (optimum {result.optimum.tokens_per_s_per_gpu:.0f})" if result.optimum else ""))
    if result.pareto:
        front = "; ".join(f"{t.tokens_per_s_per_gpu:.0f} tok/s @ {(t.headroom_bytes or 0) / GIB:.1f} GiB free"
                          for t in result.pareto[:6])
        lines.append(f"pareto (tok/s/GPU vs headroom): {front}")
    if result.sensitivity:
        chosen: dict[str, Any] = {}
        for item in result.sensitivity:  # per axis, the least costly change (projected beats OOM / illegal)
            rank = item.change if item.change is not None else float("-inf")
            held = chosen.get(item.axis)
            if held is None or rank > (held.change if held.change is not None else float("-inf")):
                chosen[item.axis] = item
        parts = [f"{i.axis}={_value(i.value)} {_pct(i.change) if i.change is not None else i.status}"
                 for i in chosen.values()]
        lines.append("sensitivity (least costly one-axis change per axis): " + "; ".join(parts))
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)
