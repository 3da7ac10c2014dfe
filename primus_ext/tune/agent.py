"""The search loop: legality -> memory pre-filter -> oracle, with a trial cache and a JSON-lines log.

Every strategy talks to a ``SearchContext``: ``ctx.try_config(config, origin=...)`` returns a
``Trial`` (illegal with every reason, rejected by the pre-filter with the memory verdict, or projected
with the oracle's score). The same configuration is never projected twice (cache by
``config_keys.config_key``); ``budget`` counts projections by the strategy. ``tune`` runs a strategy and
assembles the ``TuneResult`` (``primus_ext.tune.run``).

    ctx = SearchContext(space, oracle, prefilter, budget=100, log=TrialLog("trials.jsonl"))
    result = tune(ctx, "tpe", baseline=recipe.execution)
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from primus_ext.errors import Problem, RecipeError, redact
from primus_ext.recipe.checks import check
from primus_ext.specs import ExecutionSpec
from primus_ext.tune.axes import canonical
from primus_ext.tune.config_keys import config_key
from primus_ext.tune.legality import problems_of, rule_of
from primus_ext.tune.oracle import Oracle, Score
from primus_ext.tune.prefilter import MemoryFilter, MemoryVerdict
from primus_ext.tune.space import Config, Space

Status = Literal["projected", "oom", "illegal"]
ATTEMPTS_PER_PROJECTION = 20
"""Proposals allowed per unit of budget (illegal, rejected and cached ones included) before a
strategy is stopped: bounds every loop whatever the proposer does."""
LOG_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class Trial:
    """One configuration tried: its verdict and, when projected, its score."""

    config: Config
    status: Status
    origin: str
    """Who proposed it: a strategy name, ``recipe``, ``sensitivity`` or ``resume``."""
    score: Score | None = None
    memory: MemoryVerdict | None = None
    problems: tuple[Problem, ...] = ()

    @functools.cached_property
    def key(self) -> str:  # computed once: the incumbent check asks it per projected trial
        return config_key(self.config)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.score.tokens_per_s_per_gpu if self.score else 0.0

    @property
    def figures(self) -> tuple[float, float, float, int | None]:
        """What the ranking shows of it (tok/s/GPU, step, MFU, headroom): two trials with equal figures are one row
        (``tune.run.distinct``)."""
        s = self.score
        return (self.tokens_per_s_per_gpu, s.step_time_s, s.mfu, self.headroom_bytes) if s else (0.0, 0.0, 0.0, None)

    @property
    def headroom_bytes(self) -> int | None:
        if self.score is not None and self.score.headroom_bytes is not None:
            return self.score.headroom_bytes
        return self.memory.headroom_bytes if self.memory else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config, "status": self.status, "origin": self.origin,
            "score": self.score.to_dict() if self.score else None,
            "memory": None if self.memory is None else {
                "fits": self.memory.fits, "peak_bytes": self.memory.peak_bytes,
                "capacity_bytes": self.memory.capacity_bytes, "worst_stage": self.memory.worst_stage},
            "problems": [{"path": p.path, "message": p.message, "fix": p.fix,
                          "value": p.value if isinstance(p.value, int | float | str | bool) else None}
                         for p in self.problems],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trial:
        memory = data.get("memory")
        return cls(
            config=canonical(data["config"]), status=data["status"], origin=str(data.get("origin", "resume")),
            score=Score.from_dict(data["score"]) if data.get("score") else None,
            memory=MemoryVerdict(**memory) if memory else None,
            problems=tuple(Problem(**p) for p in data.get("problems") or ()),
        )


@dataclass
class SearchStats:
    """Counters of one search (what the benchmark and the report print)."""

    proposals: int = 0
    cache_hits: int = 0
    illegal: int = 0
    rejected_by_prefilter: int = 0
    projected: int = 0
    pruned_illegal: int = 0
    """Candidates skipped by the exhaustive search's structural legality pruning (never proposed)."""
    pruned_by_prefilter: int = 0
    """Candidates skipped because a memory-minimal completion of their prefix does not fit."""
    pruned_by_bound: int = 0
    """Candidates skipped by the exhaustive search's branch and bound (cannot beat the best found)."""
    bound_projections: int = 0
    """Projections spent on the bounds (one per structural + micro-batch prefix)."""
    sensitivity_projected: int = 0
    """Projections spent on the winner's one-axis changes (after the search, outside the budget)."""
    wall_s: float = 0.0
    excluded: dict[str, int] = field(default_factory=dict)
    """Illegal candidates (tried or pruned) by the rule that excluded them (``legality.rule_of``: the first problem)."""

    def exclude(self, problems: Sequence[Problem], count: int = 1) -> None:
        rule = rule_of(problems)
        self.excluded[rule] = self.excluded.get(rule, 0) + count


MAX_LOG_BYTES = 128 << 20
"""A trial log holds ~1 kB per projected trial (an exhaustive search of the largest shipped space logs ~4 000): a
larger --resume file is refused unread (read whole, it would cost ~4x its size in memory)."""

class TrialLog:
    """Append-only JSON-lines log: a header, then one line per new trial (``--resume`` reads it)."""

    def __init__(self, path: str | Path, header: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.header = dict(header or {})
        self._fh: Any = None

    def write(self, trial: Trial) -> None:
        if self._fh is None:
            from primus_ext.files import open_journal

            fresh = not self.path.exists() or self.path.stat().st_size == 0
            self._fh = open_journal(self.path, label="--log")
            if fresh:
                self._fh.write(json.dumps({"header": self.header, "version": LOG_VERSION}) + "\n")
        self._fh.write(json.dumps({"trial": trial.to_dict()}) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_log(path: str | Path, *, expect: Mapping[str, Any] | None = None) -> list[Trial]:
    """Trials of a log. ``expect``: header fields that must match (same recipe, cluster, space)."""
    from primus_ext.files import InputRefused, load_json, note_journal, read_input

    trials: list[Trial] = []
    try:
        lines = read_input(path, max_bytes=MAX_LOG_BYTES, what="trial log").decode("utf-8").splitlines(keepends=True)
        note_journal(path)  # read to be continued: appending to it is its purpose
    except (OSError, UnicodeDecodeError, InputRefused) as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"cannot read the log: {err}",
                                            fix="give the --log file of the search to continue")]) from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = load_json(line, parse_constant=_not_finite)
            if not isinstance(item, dict) or not isinstance(item.get("header", {}), dict):
                raise ValueError("expected {\"header\": {...}} or {\"trial\": {...}}")
            if "header" in item:
                header = _logged_header(item["header"])
                mismatch = {k: (header.get(k), v) for k, v in (expect or {}).items()
                            if header.get(k) != (redact(v) if isinstance(v, str) else v)}  # logged redacted
                if mismatch:
                    raise RecipeError(problems=[Problem(
                        path=f"{path}:{number}", value=str(mismatch),
                        message="the log was written for another recipe, cluster or space (logged, now)",
                        fix="resume with the same recipe, --cluster, --nodes, --margin and --pin")])
                continue
            trials.append(_logged_trial(item["trial"]))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            if isinstance(err, json.JSONDecodeError) and number > 1 and not line.endswith("\n"):
                break  # a write interrupted mid-line: keep what came before
            raise RecipeError(problems=[Problem(path=f"{path}:{number}", message=f"unreadable trial line: {err}",
                                                fix="remove the line or start a fresh log")]) from None
    return trials


def _logged_header(header: dict[str, Any]) -> dict[str, Any]:
    """A log's header with its pins' axes by name (a log written before the axes took the recipe's names keys them
    by their short labels: ``axes.canonical``)."""
    pins = header.get("pins")
    return {**header, "pins": canonical(pins)} if isinstance(pins, dict) else header


def _logged_trial(data: Any) -> Trial:
    """A log line's trial as logged; its configuration must be a mapping of axis names (or their short labels, as
    older logs write them: translated here) to plain values (only the configuration and its origin are used again:
    ``SearchContext.seed`` judges it anew)."""
    config = data["config"]
    if not isinstance(config, dict) or not all(
            isinstance(k, str) and (v is None or isinstance(v, int | float | str | bool)) for k, v in config.items()):
        raise ValueError("config is not a mapping of axis names to numbers, text or booleans")
    return Trial.from_dict(data)


def _not_finite(name: str) -> float:
    raise ValueError(f"{name} is not a finite number")


class BudgetExhausted(Exception):
    """Raised inside a strategy when its projection budget or attempt cap is spent."""


@dataclass
class SearchContext:
    """What a strategy sees: the space, the cached evaluation, the budget and the counters."""

    space: Space
    oracle: Oracle
    prefilter: MemoryFilter
    budget: int = 100
    log: TrialLog | None = None
    detail: bool = True
    """Compute the memory verdict (peak, headroom) of rejected configurations (the LLM needs it; the
    exhaustive search switches it off for speed)."""
    trials: dict[str, Trial] = field(default_factory=dict)
    stats: SearchStats = field(default_factory=SearchStats)
    spent: int = 0
    """Projections counted against the budget."""
    _best: Trial | None = field(default=None, repr=False)
    _stale: bool = field(default=True, repr=False)
    """The incumbent must be recomputed from ``trials`` (set at creation and by ``seed``)."""

    @property
    def remaining(self) -> int:
        return max(0, self.budget - self.spent)

    def seed(self, trials: Iterable[Trial]) -> None:
        """Trials from a log (``--resume``): evidence to re-check, not to trust. Each logged configuration goes
        through this space's membership and legality checks, the memory pre-filter and the oracle again, as a new
        proposal would (the log's status and figures are not reused: a hand-edited line with an illegal TP or a
        forged throughput is judged, not reported); a projection counts against the budget, as it did when logged.
        Nothing is logged again."""
        self._stale = True
        log, self.log = self.log, None
        try:
            for trial in trials:
                key = config_key(trial.config)
                if key in self.trials:
                    continue
                again = self.try_config(trial.config, origin=str(trial.origin)[:40], counted=False)
                self.spent += again.status == "projected"
        finally:
            self.log = log

    def try_config(self, config: Config, *, origin: str, counted: bool = True, trusted: bool = False,
                   keep_rejected: bool = True, execution: ExecutionSpec | None = None,
                   problems: list[Problem] | None = None, fits: bool | None = None,
                   score: Score | Exception | None = None) -> Trial:
        """Legality, pre-filter, oracle (each once per configuration). Raises ``BudgetExhausted``.

        ``counted``: the proposal counts against the attempt cap and its projection against the budget.
        ``trusted``: the configuration was generated from the space (skip the membership check).
        ``keep_rejected``: cache and log illegal / rejected trials too (the exhaustive search only counts them).
        ``execution``, ``problems``, ``fits``: of a trusted configuration, when the caller already has
        them (``space.to_execution``, ``check`` and the pre-filter's answer; the exhaustive search).
        ``score``: the oracle's answer for ``execution`` (a ``Score`` or the error it raised), when the
        caller projected a batch (``oracle.many``); used only where the oracle would be called.
        """
        if counted and (self.remaining == 0 or self.stats.proposals >= ATTEMPTS_PER_PROJECTION * self.budget):
            raise BudgetExhausted
        self.stats.proposals += counted
        key = config_key(config)
        cached = self.trials.get(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return cached
        if trusted:
            if execution is None:
                execution = self.space.to_execution(config)
            if problems is None:
                problems = check(self.space.model, execution, self.space.system)
        else:
            problems = problems_of(self.space, config)
            execution = None if problems else self.space.to_execution(config)
        if problems or execution is None:
            self.stats.illegal += 1
            self.stats.exclude(problems or ())
            trial = Trial(config=dict(config), status="illegal", origin=origin, problems=tuple(problems))
            return self._keep(key, trial, keep_rejected)
        try:
            if not (fits if fits is not None and trusted else self.prefilter.fits(execution)):
                self.stats.rejected_by_prefilter += 1
                verdict = self.prefilter.verdict(execution) if self.detail else None
                trial = Trial(config=dict(config), status="oom", origin=origin, memory=verdict)
                return self._keep(key, trial, keep_rejected)
            if score is None:
                score = self.oracle(execution)
            elif isinstance(score, Exception):
                raise score
        except RecipeError as err:  # the memory model or the projection found it infeasible
            self.stats.illegal += 1
            self.stats.exclude(err.problems)
            trial = Trial(config=dict(config), status="illegal", origin=origin, problems=tuple(err.problems))
            return self._keep(key, trial, keep_rejected)
        if score.peak_bytes is None:
            score = dataclasses.replace(score, peak_bytes=self.prefilter.peak(execution),
                                        capacity_bytes=self.prefilter.capacity_bytes)
        self.stats.projected += 1
        self.spent += counted
        return self._keep(key, Trial(config=dict(config), status="projected", origin=origin, score=score), True)

    def _keep(self, key: str, trial: Trial, record: bool) -> Trial:
        if trial.status == "projected":
            incumbent = self.best()  # from the trials already there (seeded ones included)
            if incumbent is None or trial.tokens_per_s_per_gpu > incumbent.tokens_per_s_per_gpu:
                self._best = trial
        if record:
            self.trials[key] = trial
            if self.log is not None:
                self.log.write(trial)
        return trial

    def projected(self) -> list[Trial]:
        """Projected trials, best first."""
        done = [t for t in self.trials.values() if t.status == "projected"]
        return sorted(done, key=lambda t: -t.tokens_per_s_per_gpu)

    def best(self) -> Trial | None:
        """The fastest projected trial (kept up to date as trials come in)."""
        if self._best is None or self.trials.get(self._best.key) is not self._best or self._stale:
            self._stale = False
            done = self.projected()
            self._best = done[0] if done else None
        return self._best


def evaluate_execution(ctx: SearchContext, execution: ExecutionSpec, *, origin: str) -> Trial:
    """A trial for an execution that may lie outside the space (the recipe's own configuration).

    Unlike a proposal it is projected even when the memory model says it does not fit (status
    ``oom`` with a score), so that the gain over it can still be stated."""
    config = ctx.space.config_of(execution)
    if ctx.space.to_execution(config) == execution and not ctx.space.membership(config):
        trial = ctx.try_config(config, origin=origin, counted=False)
        if trial.status != "oom":
            return trial
    problems = check(ctx.space.model, execution, ctx.space.system)
    if problems:
        return Trial(config=config, status="illegal", origin=origin, problems=tuple(problems))
    verdict = ctx.prefilter.verdict(execution)
    try:
        score = ctx.oracle(execution)
    except RecipeError as err:
        return Trial(config=config, status="illegal", origin=origin, problems=tuple(err.problems))
    if score.peak_bytes is None:
        score = dataclasses.replace(score, peak_bytes=verdict.peak_bytes, capacity_bytes=verdict.capacity_bytes)
    return Trial(config=config, status="projected" if verdict.fits else "oom", origin=origin, score=score,
                 memory=verdict)
