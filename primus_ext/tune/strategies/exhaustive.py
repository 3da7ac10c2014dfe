"""Exhaustive search: every candidate of the space, with two sound prunings to stay fast.

Walks the axes in order (structural first, then the memory-relevant ones, then the overlap flags):
  * after the structural axes, the first completion is legality-checked; a problem that depends on
    the structural axes only (``legality.STRUCTURAL_PATHS``) makes the whole prefix illegal;
  * after each memory-relevant axis, the prefix's memory-minimal completion (smallest micro-batch,
    full recompute, the most sharding, no overlap buffers) is pre-filtered; if even that does not fit,
    no completion fits.
Pruned candidates are counted (``stats.pruned_*``), never projected. Every remaining candidate goes
through ``ctx.try_config`` like any other proposal. The budget does not apply (it is exhaustive).
"""

from __future__ import annotations

from typing import Any

from primus_ext.recipe.validate import check
from primus_ext.tune.legality import is_structural
from primus_ext.tune.space import AXIS_ORDER, STRUCTURAL_AXES, Config, Space

MEMORY_MIN: dict[str, tuple[Any, ...]] = {
    "mbs": (),  # smallest
    "recompute": ("full", "block75", "block50", "block25", "selective", "none"),
    "sharding": ("fsdp", "distopt", "ddp"),
    "tp_comm_overlap": (False, True),
    "ep_overlap": (False, True),
    "dp_overlap": ("none", "grad", "grad+param"),
}
"""Per non-structural axis, its values from least to most memory (``()`` = smallest number first).
Precision is not ordered (FP8 keeps extra weight copies but may save activations): every value is
tried."""
PRUNE_AFTER = ("ep", "mbs", "recompute", "sharding", "precision")
DEPENDS = {"mbs": ("tp", "pp", "cp"), "recompute": ("pp", "vpp"), "tp_comm_overlap": ("tp",),
           "ep_overlap": ("ep",), "dp_overlap": ("sharding",)}
"""Axes a candidate list reads (see ``Space.domain``): what the subtree counts are memoised on."""


def _least_memory(name: str, allowed: tuple[Any, ...]) -> Any:
    order = MEMORY_MIN.get(name)
    if not order:
        return min(allowed)
    return min(allowed, key=lambda v: order.index(v) if v in order else len(order))


def _min_completions(space: Space, partial: Config, start: int) -> list[Config]:
    """The memory-minimal completions of a prefix (one per precision candidate)."""
    out = [dict(partial)]
    for name in AXIS_ORDER[start:]:
        if name == "precision":
            out = [{**c, name: v} for c in out for v in space.domain(name, c)]
        else:
            out = [{**c, name: _least_memory(name, space.domain(name, c))} for c in out]
    return out


def run(ctx: Any, options: Any) -> list[str]:
    space: Space = ctx.space
    names = AXIS_ORDER
    assert names[: len(STRUCTURAL_AXES)] == STRUCTURAL_AXES
    prune_at = {names.index(n) + 1 for n in PRUNE_AFTER}
    counts: dict[tuple[Any, ...], int] = {}

    def count(partial: Config, i: int) -> int:
        deps = sorted({d for n in names[i:] for d in DEPENDS.get(n, ()) if d in partial})
        key = (i, *(partial[d] for d in deps))
        if key not in counts:
            if i == len(names):
                counts[key] = 1
            else:
                total = 0
                for value in space.domain(names[i], partial):
                    partial[names[i]] = value
                    total += count(partial, i + 1)
                del partial[names[i]]
                counts[key] = total
        return counts[key]

    def pruned(partial: Config, i: int) -> bool:
        completions = _min_completions(space, partial, i)
        fits = False
        for config in completions:
            execution = space.to_execution(config)
            problems = check(space.model, execution, space.system)
            if i == len(STRUCTURAL_AXES) and is_structural(problems):
                ctx.stats.pruned_illegal += count(partial, i)
                return True
            if is_structural(problems) or ctx.prefilter.fits(execution):
                fits = True
                break
        if not fits:
            ctx.stats.pruned_by_prefilter += count(partial, i)
        return not fits

    def walk(i: int, partial: Config) -> None:
        if i == len(names):
            ctx.try_config(partial, origin="exhaustive", counted=False, trusted=True, keep_rejected=False)
            return
        if i in prune_at and pruned(partial, i):
            return
        for value in space.domain(names[i], partial):
            partial[names[i]] = value
            walk(i + 1, partial)
        del partial[names[i]]

    walk(0, {})
    return []
