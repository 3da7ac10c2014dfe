"""Terminal report of a tuning run: ranking, best vs recipe, regret, Pareto front, sensitivity.

    print(format_tune(result))          # result: primus_ext.tune.run.TuneResult
"""

from __future__ import annotations

from typing import Any

from primus_ext.report.mfu import mfu_basis
from primus_ext.specs import GPUSpec
from primus_ext.tune import axes
from primus_ext.tune.agent import Trial
from primus_ext.tune.axes import label
from primus_ext.tune.run import TuneResult

GIB = 2**30
SHOWN_AXES = tuple(axes.LABELS)  # every axis, in the order axes.py lists them
SHORT = {axes.TP_OVERLAP: "tp_ov", axes.EP_OVERLAP: "ep_ov", axes.DP_OVERLAP: "dp_ov", axes.PRECISION: "prec",
         axes.RECOMPUTE: "recomp", axes.SHARDING: "shard"}
"""Column headers narrower than the axes' labels (``axes.label`` for the others)."""


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
    return [rank, f"{t.tokens_per_s_per_gpu:.0f}", f"{s.step_time_s:.3f}" if s else "", f"{s.mfu:.1%}" if s else "",
            head, bubble, exposed, *(_value(t.config.get(a)) for a in SHOWN_AXES)]


def _trials_table(trials: list[tuple[str, Trial]]) -> list[str]:
    headers = ["#", "tok/s/GPU", "step s", "MFU", "free GiB", "bubble ms", "exposed ms",
               *(SHORT.get(a, label(a)) for a in SHOWN_AXES)]
    return _table(headers, [_row(rank, t) for rank, t in trials if t.score is not None])


def _baseline_label(trial: Trial) -> str:
    """`` (out of memory)`` over the HBM, `` (over the margin)`` inside it but inside the kept-free share."""
    if trial.status == "projected":
        return ""
    m = trial.memory
    return " (over the margin)" if m is not None and m.peak_bytes <= m.capacity_bytes else " (out of memory)"


def _mfu_legend(trials: list[Trial], gpu: GPUSpec | None) -> list[str]:
    """What the MFU column is taken against, when a row runs below BF16 (FP8 / FP4 peaks)."""
    precisions = sorted({str(t.config.get(axes.PRECISION)) for t in trials if t.score is not None})
    low = [p for p in precisions if gpu is not None and mfu_basis(gpu, p) in ("FP8", "FP4")]
    if gpu is None or not low:
        return []
    peaks = "; ".join(f"{p}: the {mfu_basis(gpu, p)} peak, {gpu.peak_tflops(p):,.0f} TFLOP/s "
                      f"(x{gpu.peak_tflops(p) / gpu.bf16_dense_tflops:.2g} the BF16 peak: MFU against BF16 is that "
                      "much higher)" for p in low)
    return [f"MFU: model TFLOP/s over the {gpu.name} dense peak of the row's precision; {peaks}"]


def format_tune(result: TuneResult, *, top: int = 10, gpu: GPUSpec | None = None) -> str:
    """The report; ``gpu``: the target's, to say which peak the MFU column is taken against."""
    st = result.stats
    lines = [f"strategy {result.strategy}: {st.projected} projected, {st.rejected_by_prefilter} rejected by the "
             f"memory pre-filter, {st.illegal} illegal, {st.cache_hits} cache hits"
             + (f", {st.pruned_illegal} pruned as illegal, {st.pruned_by_prefilter} pruned by memory"
                if st.pruned_illegal or st.pruned_by_prefilter else "")
             + f" in {st.wall_s:.1f} s" + (f" (space: {result.candidates} candidates)" if result.candidates else "")]
    lines.append("")
    base = result.baseline
    own = base.key if base is not None and base.status == "projected" else None
    tied = {t.key for t in result.ties}
    ranked = [(f"{i + 1}{'~' if t.key in tied else ''}{' recipe' if t.key == own else ''}", t)
              for i, t in enumerate(result.ranked[:top])]
    if base is not None and base.score is not None and all(t.key != base.key for _, t in ranked):
        ranked.append(("recipe" + ("~" if base.key in tied else "") + _baseline_label(base), base))
    lines += _trials_table(ranked) if ranked else ["no configuration was projected"]
    lines += _mfu_legend([t for _, t in ranked], gpu)
    lines.append("")
    lines += _best_lines(result)
    if result.pareto:
        front = list(dict.fromkeys(f"{t.tokens_per_s_per_gpu:.0f} tok/s @ {(t.headroom_bytes or 0) / GIB:.1f} GiB free"
                                   for t in result.pareto))  # near-equal neighbours print once
        lines.append(f"pareto (tok/s/GPU vs headroom): {'; '.join(front[:6])}")
    if result.sensitivity:
        chosen: dict[str, Any] = {}
        for item in result.sensitivity:  # per axis, the least costly change (projected beats OOM / illegal)
            rank = item.change if item.change is not None else float("-inf")
            held = chosen.get(item.axis)
            if held is None or rank > (held.change if held.change is not None else float("-inf")):
                chosen[item.axis] = item
        parts = [f"{label(i.axis)}={_value(i.value)} {_pct(i.change) if i.change is not None else i.status}"
                 for i in chosen.values()]
        lines.append("sensitivity (least costly one-axis change per axis): " + "; ".join(parts))
    if result.same_figures:
        lines.append(f"note: {result.same_figures} more configuration(s) project exactly as one listed (they differ "
                     "only in settings the projection does not price); each is listed once, closest to the recipe")
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def _best_lines(result: TuneResult) -> list[str]:
    """The winner, its gain and the search's regret; the ties inside the fastest's band and which one is kept."""
    best, fastest = result.best, result.fastest
    if best is None:
        return []
    regret = f"regret vs exhaustive {_pct(result.regret)}" + (
        f" (optimum {result.optimum.tokens_per_s_per_gpu:.0f}" + (
            f"; the {result.strategy} search alone {_pct(-result.search_regret)}" if result.search_regret else "")
        + ")" if result.optimum else "")
    if result.band is None or len(result.ties) < 2:
        return [f"best: {best.tokens_per_s_per_gpu:.0f} tok/s/GPU; gain over the recipe {_pct(result.gain)}; {regret}"]
    low, high = result.band
    band = (f"the fastest's band {low:,.0f} .. {high:,.0f} tok/s/GPU (the projection's sensitivity band: it cannot "
            "order configurations inside it)")
    if result.kept_recipe:
        ahead = (fastest.tokens_per_s_per_gpu / best.tokens_per_s_per_gpu - 1) if fastest is not None else 0.0
        return [f"best: the recipe's own configuration, {best.tokens_per_s_per_gpu:.0f} tok/s/GPU, kept: "
                f"{len(result.ties)} configurations (marked ~) tie inside {band}; the fastest projects "
                f"{ahead * 100:+.1f} %, inside that band; {regret}",
                "  a short real run decides between ties: --verify-top K"]
    return [f"best: {best.tokens_per_s_per_gpu:.0f} tok/s/GPU; gain over the recipe {_pct(result.gain)}; {regret}",
            f"  {len(result.ties)} configurations (marked ~) tie inside {band}; the recipe is outside it; a short "
            "real run decides between ties: --verify-top K"]
