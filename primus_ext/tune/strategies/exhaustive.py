"""Exhaustive search: every candidate of the space, with two sound prunings to stay fast.

Walks the axes in order (structural first, then the memory-relevant ones, then the overlap flags):
  * after the structural axes, the first completion is legality-checked; a problem that depends on
    the structural axes only (``legality.STRUCTURAL_PATHS``) makes the whole prefix illegal;
  * after each memory-relevant axis, the prefix's memory-minimal completion (smallest micro-batch,
    full recompute, the most sharding, no overlap buffers) is pre-filtered; if even that does not fit,
    no completion fits.
  * branch and bound (``options.bound``, on by default): every (structural, micro-batch) prefix gets
    an upper bound on tok/s/GPU (``_upper_bound``: the busiest rank's compute, no schedule simulated);
    prefixes are searched best bound first, and those whose bound cannot beat the best configuration
    found (the ``options.keep``-th best: ``--verify-top K``) are skipped. The bound is exact, not a
    heuristic: ``tests/tune/test_exhaustive.py`` checks its premises on the real projection and that the
    optimum equals the plain search's. The ranking below the ``keep``-th place holds what was projected.
Pruned candidates are counted (``stats.pruned_*``), never projected. Every remaining candidate goes
through ``ctx.try_config`` like any other proposal. The budget does not apply (it is exhaustive).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from primus_ext.errors import RecipeError
from primus_ext.model.pipeline.registry import get_schedule
from primus_ext.recipe.checks import check
from primus_ext.tune.axes import DP_OVERLAP, EP, EP_OVERLAP, MBS, PRECISION, RECOMPUTE, SCHEDULE, SHARDING, TP_OVERLAP
from primus_ext.tune.legality import STRUCTURAL_PATHS, is_structural
from primus_ext.tune.space import AXIS_ORDER, DOMAIN_DEPENDS, STRUCTURAL_AXES, Config, Space

if TYPE_CHECKING:
    from primus_ext.tune.agent import SearchContext
    from primus_ext.tune.strategies import StrategyOptions

MEMORY_MIN: dict[str, tuple[Any, ...]] = {
    MBS: (),  # smallest
    RECOMPUTE: ("full", "block75", "block50", "block25", "selective", "none"),
    SHARDING: ("fsdp", "distopt", "ddp"),
    TP_OVERLAP: (False, True),
    EP_OVERLAP: (False, True),
    DP_OVERLAP: ("none", "grad", "grad+param"),
}
"""Per non-structural axis, its values from least to most memory (``()`` = smallest number first).
Precision is not ordered (FP8 keeps extra weight copies but may save activations): every value is
tried."""
PRUNE_AFTER = (EP, MBS, RECOMPUTE, SHARDING, PRECISION)
BOUND_AFTER = MBS
"""Branch and bound works on prefixes up to this axis (see ``_upper_bound``)."""
BATCH_AFTER = 2000
"""Projections made one by one before the leaves go to the oracle in batches (``oracle.many``): the batch
path's fixed cost, numba's import and the compiled kernel's cache load (0.4-0.6 s per process, printed by
benchmarks/projection_speed.py), pays off after ~2 000 projections (one by one ~250-400 us each, batched
~20-110 us; measured on the DeepSeek-V3, GPT-OSS and Llama-3.1-8B spaces), so small searches never pay it."""
LEAST_COMPUTE = ("none", "selective", "block25", "block50", "block75", "full")
"""Recompute choices from the least to the most recomputed work."""


def _least_memory(name: str, allowed: tuple[Any, ...]) -> Any:
    order = MEMORY_MIN.get(name)
    if not order:
        return min(allowed)
    return min(allowed, key=lambda v: order.index(v) if v in order else len(order))


_SUFFIX_DEPENDS = [tuple(sorted({d for n in AXIS_ORDER[i:] for d in DOMAIN_DEPENDS[n]} - set(AXIS_ORDER[i:])))
                   for i in range(len(AXIS_ORDER) + 1)]
"""Per start index: the earlier axes that the candidates of the axes from there on read (the memo key of
a prefix's completions and of its subtree count)."""


def _min_completions(space: Space, partial: Config, start: int,
                     memo: dict[tuple[Any, ...], list[Config]] | None = None) -> list[Config]:
    """The memory-minimal completions of a prefix (one per precision candidate). ``memo``: suffixes
    already built, keyed on the prefix axes the remaining axes' candidates read (``DOMAIN_DEPENDS``)."""
    if memo is not None:
        deps = _SUFFIX_DEPENDS[start]
        key = (start, *(partial.get(d) for d in deps))
        if key not in memo:
            memo[key] = [{n: c[n] for n in AXIS_ORDER[start:]} for c in _min_completions(space, partial, start)]
        return [{**partial, **suffix} for suffix in memo[key]]
    out = [dict(partial)]
    for name in AXIS_ORDER[start:]:
        if name == PRECISION:
            out = [{**c, name: v} for c in out for v in space.domain(name, c)]
        else:  # an axis with no value left for a prefix (a pin, a domain the prefix empties): no completion
            out = [{**c, name: _least_memory(name, domain)} for c in out if (domain := space.domain(name, c))]
    return out


_PRUNE_AT = frozenset(AXIS_ORDER.index(n) + 1 for n in PRUNE_AFTER)  # the depths right after a PRUNE_AFTER axis


@dataclass
class _Search:
    """One exhaustive search: the walk over the axes with its two prunings, and the leaves collected for projection.
    Memos: ``counts`` (subtree sizes, keyed as ``_SUFFIX_DEPENDS`` says), ``prepared`` (execution and ``check``
    problems of the memory-minimal completions, which come back at several depths and as leaves), ``fitted`` (the
    pre-filter's answers), ``suffixes`` (``_min_completions``')."""

    ctx: SearchContext
    space: Space
    counts: dict[tuple[Any, ...], int] = field(default_factory=dict)
    prepared: dict[tuple[Any, ...], tuple[Any, list[Any]]] = field(default_factory=dict)
    fitted: dict[tuple[Any, ...], bool] = field(default_factory=dict)
    suffixes: dict[tuple[Any, ...], list[Config]] = field(default_factory=dict)
    leaves: list[Config] = field(default_factory=list)

    def prepare(self, config: Config) -> tuple[tuple[Any, ...], Any, list[Any]]:
        """``config``'s key, execution and ``check`` problems, each built once."""
        key = tuple(config[n] for n in AXIS_ORDER)
        found = self.prepared.get(key)
        if found is None:
            execution = self.space.to_execution(config)
            found = self.prepared[key] = (execution, check(self.space.model, execution, self.space.system))
        return key, found[0], found[1]

    def count(self, partial: Config, i: int) -> int:
        """The number of complete configurations under the prefix ``partial`` (its first ``i`` axes set)."""
        key = (i, *(partial[d] for d in _SUFFIX_DEPENDS[i]))  # subtree counts read only these axes
        if key not in self.counts:
            if i == len(AXIS_ORDER):
                self.counts[key] = 1
            else:
                total = 0
                for value in self.space.domain(AXIS_ORDER[i], partial):
                    partial[AXIS_ORDER[i]] = value
                    total += self.count(partial, i + 1)
                partial.pop(AXIS_ORDER[i], None)  # an empty domain set nothing
                self.counts[key] = total
        return self.counts[key]

    def pruned(self, partial: Config, i: int) -> bool:
        """Whether no completion of the prefix can be legal (checked after the structural axes) or fit (its
        memory-minimal completions do not); the subtree is then counted in ``ctx.stats``."""
        stats = self.ctx.stats
        for config in _min_completions(self.space, partial, i, self.suffixes):
            key, execution, problems = self.prepare(config)
            if i == len(STRUCTURAL_AXES) and is_structural(problems):
                stats.pruned_illegal += self.count(partial, i)
                stats.exclude([p for p in problems if p.path in STRUCTURAL_PATHS], self.count(partial, i))
                return True
            if is_structural(problems):
                return False
            if key not in self.fitted:
                self.fitted[key] = self.ctx.prefilter.fits(execution)
            if self.fitted[key]:
                return False
        stats.pruned_by_prefilter += self.count(partial, i)
        return True

    def walk(self, i: int, partial: Config, out: list[Config], stop: int = len(AXIS_ORDER),
             checked: int = -1) -> None:
        """Append to ``out`` every unpruned prefix of ``stop`` axes extending ``partial`` (its first ``i`` axes
        set), in axis-value order; ``checked``: a depth whose pruning was already done for ``partial``."""
        if i in _PRUNE_AT and i != checked and self.pruned(partial, i):
            return
        if i == stop:
            out.append(dict(partial))
            return
        for value in self.space.domain(AXIS_ORDER[i], partial):
            partial[AXIS_ORDER[i]] = value
            self.walk(i + 1, partial, out, stop)
        partial.pop(AXIS_ORDER[i], None)  # an empty domain set nothing

    def project_leaves(self) -> None:
        """Every collected leaf through ``ctx.try_config`` in walk order, the legal ones that fit projected
        as one batch first when the oracle can (``oracle.many``: the same scores, faster) and the search is
        big enough (``BATCH_AFTER``)."""
        ctx, space = self.ctx, self.space
        many = getattr(ctx.oracle, "many", None) if ctx.stats.projected >= BATCH_AFTER else None
        entries = []
        for config in self.leaves:
            key = tuple(config[n] for n in AXIS_ORDER)
            execution, problems = self.prepared.pop(key, (None, None))
            fits = self.fitted.get(key)
            if many is not None:  # what try_config would find, found first to pick the batch
                if execution is None:
                    execution = space.to_execution(config)
                    problems = check(space.model, execution, space.system)
                if fits is None and not problems:
                    fits = ctx.prefilter.fits(execution)
            entries.append((config, execution, problems, fits))
        self.leaves.clear()
        batch = [e for e in entries if not e[2] and e[3]] if many is not None else []
        scores = dict(zip(map(id, batch), many([e[1] for e in batch]), strict=True)) if batch else {}
        for entry in entries:
            config, execution, problems, fits = entry
            ctx.try_config(config, origin="exhaustive", counted=False, trusted=True, keep_rejected=False,
                           execution=execution, problems=problems, fits=fits, score=scores.get(id(entry)))


def run(ctx: SearchContext, options: StrategyOptions) -> list[str]:
    """Project every candidate of ``ctx.space`` that the prunings keep (module docstring); nothing to report."""
    assert AXIS_ORDER[: len(STRUCTURAL_AXES)] == STRUCTURAL_AXES
    search = _Search(ctx=ctx, space=ctx.space)
    if getattr(options, "bound", True):
        _branch_and_bound(search, max(1, getattr(options, "keep", 1)))
    else:
        search.walk(0, {}, search.leaves)
        search.project_leaves()
    return []


def _branch_and_bound(search: _Search, keep: int) -> None:
    """Search the (structural axes, micro-batch) prefixes best upper bound first, skipping those whose bound
    cannot beat the ``keep``-th best configuration found so far."""
    ctx, space = search.ctx, search.space
    depth = AXIS_ORDER.index(BOUND_AFTER) + 1
    prefixes: list[Config] = []
    search.walk(0, {}, prefixes, depth)
    bounds = []
    for n, prefix in enumerate(prefixes):
        batch = _batch_problems(space, prefix, depth)
        if batch:  # the micro-batch count breaks a schedule rule: no completion of the prefix is legal
            ctx.stats.pruned_illegal += search.count(prefix, depth)
            ctx.stats.exclude(batch, search.count(prefix, depth))
            continue
        bounds.append((_upper_bound(ctx, space, prefix, depth), n, prefix))
    for bound, _, prefix in sorted(bounds, key=lambda b: (-b[0], b[1])):
        best = ctx.best() if keep == 1 else _kth_distinct(ctx.projected(), keep)
        if best is not None and bound <= best.tokens_per_s_per_gpu:
            ctx.stats.pruned_by_bound += search.count(prefix, depth)
            continue
        search.walk(depth, dict(prefix), search.leaves, checked=depth)
        search.project_leaves()


def _kth_distinct(projected: list[Any], k: int) -> Any:
    """The ``k``-th fastest of ``projected`` (fastest first) counting trials with equal figures once, as the ranking
    (``tune.run.distinct``) and ``--verify-top K`` do; ``None`` when fewer are distinct."""
    seen: set[tuple[float, float, float, int | None]] = set()
    for trial in projected:
        if trial.figures not in seen:
            seen.add(trial.figures)
            if len(seen) == k:
                return trial
    return None


BATCH_PATHS = frozenset({"global_batch_size", "pipeline_schedule"})
"""Paths of ``check`` problems that depend on the axes up to the micro-batch only (the global batch's split into
micro-batches and each schedule's rule on their count: ``recipe.checks._batch``): a (structural, micro-batch)
prefix with one has no legal completion (``tests/tune/test_exhaustive.py`` samples completions to confirm)."""


def _batch_problems(space: Space, prefix: Config, depth: int) -> list[Any]:
    """The micro-batch rules the prefix's first completion breaks (``BATCH_PATHS``), [] when none."""
    config = dict(prefix)
    for name in AXIS_ORDER[depth:]:
        allowed = space.domain(name, config)
        if not allowed:
            return []
        config[name] = allowed[0]
    return [p for p in check(space.model, space.to_execution(config), space.system) if p.path in BATCH_PATHS]


def _upper_bound(ctx: SearchContext, space: Space, prefix: Config, depth: int) -> float:
    """tok/s/GPU no completion of ``prefix`` can beat: the step of any completion is at least the
    busiest rank's compute (``Breakdown.compute_s``), which sharding and the overlap flags do not change
    and recompute only raises; so the representative with the least recompute bounds them all.
    ``inf`` when the representative cannot be projected (the prefix is then searched in full)."""
    config = dict(prefix)
    for name in AXIS_ORDER[depth:]:
        allowed = space.domain(name, config)
        config[name] = min(allowed, key=lambda v: LEAST_COMPUTE.index(v)) if name == RECOMPUTE else allowed[0]
    floor = getattr(ctx.oracle, "step_floor", None)
    if floor is not None and get_schedule(config.get(SCHEDULE) or "1f1b").batch_kernel is None:
        return _floor_bound(ctx, space, config, depth, floor)
    if floor is not None:
        return _compute_bound(ctx, space, config, floor)
    trial = ctx.try_config(config, origin="exhaustive", counted=False, trusted=True, keep_rejected=False)
    if trial.status == "projected":  # a candidate like any other: cached, never projected again
        score = trial.score
    elif trial.status == "oom":  # never projected as a trial: project it for the bound only
        try:
            score = ctx.oracle(space.to_execution(config))
        except RecipeError:
            return float("inf")
        ctx.stats.bound_projections += 1
    else:
        return float("inf")
    compute = score.breakdown.get("compute_s", 0.0)
    if compute <= 0:
        return float("inf")
    return score.tokens_per_s_per_gpu * score.step_time_s / compute


def _compute_bound(ctx: SearchContext, space: Space, config: Config, floor: Any) -> float:
    """``_upper_bound``'s bound without projecting the representative: the tokens per GPU of a step over the
    busiest rank's compute (``oracle.step_floor(compute_only=True)``: the per-rank layer times, no schedule
    simulated), at least as tight as the projected representative's ``compute_s``. Projecting each representative
    cost the shipped Qwen3-235B space 62 of its 72 CPU-s (2 694 prefixes; 25 of them past the op budget of
    ``pipeline.long``, 46 s), for 227 trials reused; this costs ~1 ms a prefix."""
    rate = _floor_rate(ctx, space, config, lambda e: floor(e, compute_only=True), (RecipeError, ValueError))
    return float("inf") if rate is None else rate


def _floor_rate(ctx: SearchContext, space: Space, config: Config, price: Any,
                errors: tuple[type[Exception], ...]) -> float | None:
    """tok/s/GPU of ``config`` at the step floor ``price`` gives its execution: ``None`` when ``check`` finds a
    problem, ``inf`` when the floor cannot be priced (one of ``errors``) or is not positive."""
    execution = space.to_execution(config)
    if check(space.model, execution, space.system):
        return None
    try:
        seconds = price(execution)
    except errors:
        return float("inf")
    ctx.stats.bound_projections += 1
    if seconds <= 0:
        return float("inf")
    return execution.global_batch_size * execution.seq_length / (execution.world_size * seconds)


FLOOR_AXES = (SHARDING, PRECISION, TP_OVERLAP, EP_OVERLAP)
"""The axes after the micro-batch that change a pass's time (and so the step floor): every value is tried."""


def _floor_bound(ctx: SearchContext, space: Space, config: Config, depth: int, floor: Any) -> float:
    """The bound for a schedule simulated one configuration at a time (Python op orders), without simulating it:
    the most tok/s/GPU the step floor (``oracle.step_floor``: the busiest rank's passes back to back) allows, over
    every value of the axes that change a pass's time, at the least recompute; ``inf`` when a representative
    cannot be priced (the prefix is then searched in full)."""
    variants = [dict(config)]
    for name in FLOOR_AXES:
        if AXIS_ORDER.index(name) >= depth:
            variants = [{**v, name: x} for v in variants for x in space.domain(name, v)] or variants
    best = 0.0
    for variant in variants:
        rate = _floor_rate(ctx, space, variant, floor, (RecipeError,))
        if rate == float("inf"):
            return rate
        best = max(best, rate or 0.0)  # None: an illegal variant, skipped
    return best if best > 0 else float("inf")
