"""Re-rank the verified candidates by their measured step time, against the projection's ranking.

    result = rerank("llama-verify-top")      # reads manifest.json and candidate-N.log (primus_ext.logs.read_log)
    print(format_verify_top(result))
    result.to_dict()                          # the ``verify_top`` field of the tune document

The comparison's projected step is the target run's projection, or, after ``--verify-run local``, the
projection of the same reduced run on this machine (the manifest's ``local`` entries). Selection regret =
(measured step of the projection's #1 - best measured step) / best measured step, over the candidates that ran
(the projection's #1 is the best-projected of them); Spearman's rank correlation (``scipy.stats.spearmanr``) of
projected and measured step times needs three runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from primus_ext.launcher.verify_top.variants import read_manifest

MIN_SPEARMAN = 3
"""Runs needed for a rank correlation (with two, it is always +-1)."""
TARGET_BASIS = "the target run's projected step time"
LOCAL_BASIS = "the projection of the same reduced run on this machine (--verify-run local)"


@dataclass(frozen=True, kw_only=True)
class CandidateOutcome:
    """One candidate: its projected step and, when its log was read, the measured one and both ranks."""

    index: int
    name: str
    summary: str
    log: str
    projected_step_s: float
    projected_rank: int
    """Rank of the projected step among the K (1: the projection's best)."""
    measured_step_s: float | None = None
    """Median step time of the log's stable iterations (``primus_ext.logs``); None when not run."""
    measured_spread: float | None = None
    measured_steps: int | None = None
    measured_rank: int | None = None
    """Rank of the measured step among the candidates that ran."""
    not_run: str | None = None
    """Why there is no measurement (no log, or what the log reader could not find)."""


@dataclass(frozen=True, kw_only=True)
class VerifyTopResult:
    """Measured vs projected ranks of the verified candidates, the selection regret and the rank correlation."""

    folder: str
    basis: str
    """What the projected step is: ``TARGET_BASIS`` or ``LOCAL_BASIS``."""
    candidates: tuple[CandidateOutcome, ...]
    """In the projection's order."""
    regret: float | None
    """(measured step of the projection's #1 - best measured) / best measured; None when nothing ran."""
    spearman: float | None
    """Spearman's rho of projected vs measured step times (None under ``MIN_SPEARMAN`` runs or for constant
    times)."""

    @property
    def measured(self) -> tuple[CandidateOutcome, ...]:
        return tuple(c for c in self.candidates if c.measured_step_s is not None)

    @property
    def projected_best(self) -> CandidateOutcome | None:
        """The best-projected candidate that ran."""
        return min(self.measured, key=lambda c: (c.projected_step_s, c.index), default=None)

    @property
    def measured_best(self) -> CandidateOutcome | None:
        return min(self.measured, key=lambda c: (c.measured_step_s or 0.0, c.index), default=None)

    def to_dict(self) -> dict[str, Any]:
        best, chosen = self.measured_best, self.projected_best
        return {"folder": self.folder, "basis": self.basis, "candidates": [asdict(c) for c in self.candidates],
                "regret": self.regret, "spearman": self.spearman,
                "projected_best": chosen.name if chosen else None, "measured_best": best.name if best else None,
                "not_run": [c.name for c in self.candidates if c.measured_step_s is None]}


def _reader() -> tuple[Callable[[Path], Any], type[Exception]]:
    from primus_ext.logs import LogError, read_log

    return read_log, LogError


def _ranks(values: Mapping[int, Any]) -> dict[int, int]:
    """Index -> 1-based rank by value (ties by index)."""
    return {i: r for r, i in enumerate(sorted(values, key=lambda i: (values[i], i)), start=1)}


def _spearman(projected: list[float], measured: list[float]) -> float | None:
    if len(projected) < MIN_SPEARMAN:
        return None
    from scipy.stats import spearmanr

    rho = float(spearmanr(projected, measured).statistic)
    return None if math.isnan(rho) else rho


def rerank(folder: str | Path) -> VerifyTopResult:
    """Read ``folder``'s manifest and logs and compare measured with projected ranks (see the module docstring).
    A candidate without a readable log is kept, as not run; a missing or foreign manifest is a ``RecipeError``."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    entries = manifest["candidates"]
    local = bool(manifest.get("local"))
    # after a local run, the local projection; a candidate that could not run here keeps its target projection and
    # ranks after the others (it has no measurement to compare either way)
    here = {e["index"]: (e.get("local") or {}).get("projected_step_s") for e in entries} if local else {}
    projected = {e["index"]: float(here.get(e["index"]) or e["step_time_s"]) for e in entries}
    measured: dict[int, tuple[float, float, int]] = {}
    why: dict[int, str] = {}
    for e in entries:
        path = folder / e["log"]
        if (e.get("local") or {}).get("not_run"):
            why[e["index"]] = e["local"]["not_run"]
        elif not path.is_file():
            why[e["index"]] = f"no log ({e['log']})"
        else:
            read_log, log_error = _reader()  # imported only when there is a log to read
            try:
                stats = read_log(path).stats
            except log_error as err:
                why[e["index"]] = f"{e['log']}: {err}"
                continue
            measured[e["index"]] = (stats.median_s, stats.spread, stats.n)
    projected_rank = _ranks({i: (0 if here.get(i) or not local else 1, p) for i, p in projected.items()})
    measured_rank = _ranks({i: m[0] for i, m in measured.items()})
    outcomes = tuple(CandidateOutcome(
        index=e["index"], name=e["name"], summary=e.get("summary", ""), log=e["log"],
        projected_step_s=projected[e["index"]], projected_rank=projected_rank[e["index"]],
        measured_step_s=measured[e["index"]][0] if e["index"] in measured else None,
        measured_spread=measured[e["index"]][1] if e["index"] in measured else None,
        measured_steps=measured[e["index"]][2] if e["index"] in measured else None,
        measured_rank=measured_rank.get(e["index"]), not_run=why.get(e["index"]))
        for e in sorted(entries, key=lambda e: projected_rank[e["index"]]))
    ran = [c for c in outcomes if c.measured_step_s is not None]
    regret = None
    if ran:
        best = min(c.measured_step_s for c in ran if c.measured_step_s is not None)
        chosen = min(ran, key=lambda c: (c.projected_step_s, c.index))
        regret = ((chosen.measured_step_s or 0.0) - best) / best if best > 0 else None
    spearman = _spearman([c.projected_step_s for c in ran], [c.measured_step_s or 0.0 for c in ran])
    return VerifyTopResult(folder=str(folder), basis=LOCAL_BASIS if local else TARGET_BASIS, candidates=outcomes,
                           regret=regret, spearman=spearman)


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(),
           "  ".join("-" * w for w in widths)]
    return out + ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def format_verify_top(result: VerifyTopResult) -> str:
    """The measured vs projected table, the regret line and the rank correlation."""
    rows = []
    for c in result.candidates:
        measured = "not run" if c.measured_step_s is None else (
            f"{c.measured_step_s * 1e3:.1f} ms ± {(c.measured_spread or 0.0) * 100:.0f} % ({c.measured_steps} steps)")
        rows.append([c.name, f"{c.projected_step_s * 1e3:.1f} ms", measured, str(c.projected_rank),
                     "-" if c.measured_rank is None else str(c.measured_rank), c.summary])
    lines = [f"verify-top: measured vs projected ({result.folder}; projected = {result.basis})"]
    lines += _table(["candidate", "projected step", "measured step ± spread", "projected rank", "measured rank",
                     "configuration"], rows)
    lines += [f"not run: {c.name}: {c.not_run}" for c in result.candidates if c.not_run]
    chosen, best = result.projected_best, result.measured_best
    if chosen is None or best is None or result.regret is None:
        lines.append("selection regret: n/a (no candidate has a log yet)")
    else:
        first = "" if chosen.projected_rank == 1 else f" (the best-projected that ran: #{chosen.projected_rank})"
        lines.append(f"selection regret: {result.regret * 100:.1f} % (the projection's #1, {chosen.name}{first}, "
                     f"measures {(chosen.measured_step_s or 0.0) * 1e3:.1f} ms; the best measured, {best.name}, "
                     f"{(best.measured_step_s or 0.0) * 1e3:.1f} ms)")
    n = len(result.measured)
    lines.append(f"Spearman rank correlation: {result.spearman:+.2f} ({n} runs)" if result.spearman is not None
                 else f"Spearman rank correlation: n/a ({n} run{'s' if n != 1 else ''}; needs {MIN_SPEARMAN} with "
                      "different times)")
    return "\n".join(lines)
