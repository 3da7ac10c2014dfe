"""A scaling sweep: one recipe projected through the session at several node counts, each exactly as
``primus-ext project RECIPE --nodes N`` projects it (same load, same cost chain, same calibration).

    primus-ext project recipes/llama3.1_8B-pretrain.yaml --cluster h100 --nodes 1,2,4,8 --tokens 1e12

    from primus_ext.sweep import sweep
    result = sweep(session, "recipes/llama3.1_8B-pretrain.yaml", nodes=(1, 2, 4, 8), cluster="h100")
    [(row.nodes, row.gpu_hours) for row in result.rows]

A node count the configuration does not split at (a global batch not divisible by MBS x DP, ...) gets its row
with the reason instead of figures; the sweep goes on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from primus_ext.errors import PrimusExtError

SECONDS_PER_HOUR = 3600.0
DEFAULT_TOKENS = 1e9
"""Training size the GPU-hours are stated for unless ``--tokens`` says otherwise: one billion tokens."""


@dataclass(frozen=True, kw_only=True)
class SweepRow:
    """One node count: its projection and recipe, or the reason it does not project (``reason``)."""

    nodes: int
    tokens: float
    """Training size the hours are for."""
    projection: Any = None
    recipe: Any = None
    reason: str | None = None

    @property
    def projected(self) -> bool:
        return self.projection is not None

    @property
    def gpus(self) -> int | None:
        return None if self.projection is None else int(self.projection.system.world_size)

    @property
    def wall_hours(self) -> float | None:
        """Hours to train ``tokens`` on ``gpus`` GPUs: tokens / (tok/s/GPU x GPUs) / 3600."""
        p = self.projection
        if p is None or p.tokens_per_s_per_gpu <= 0:
            return None
        return self.tokens / (p.tokens_per_s_per_gpu * p.system.world_size) / SECONDS_PER_HOUR

    @property
    def gpu_hours(self) -> float | None:
        """GPU-hours to train ``tokens``: ``wall_hours`` x GPUs (= tokens / tok/s/GPU / 3600)."""
        hours = self.wall_hours
        return None if hours is None else hours * self.projection.system.world_size


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """The rows, in the order the node counts were given."""

    rows: tuple[SweepRow, ...]
    tokens: float

    @property
    def first(self) -> SweepRow | None:
        """The first row that projects (what the header and the document's target name), else ``None``."""
        return next((r for r in self.rows if r.projected), None)


def sweep(session: Any, path: str | os.PathLike[str], overrides: Sequence[str] = (), *, nodes: Sequence[int],
          cluster: str | None = None, config_roots: Sequence[str | os.PathLike[str]] = (),
          schedule: str | None = None, tokens: float = DEFAULT_TOKENS,
          before: Callable[[Any], None] | None = None) -> Sweep:
    """Project the recipe at each node count through ``session`` (``Session.load`` then ``Session.project``, as
    ``project --nodes N``); ``before``: called with each loaded recipe first (``--compute measured`` measures there).
    A domain error at a node count (``PrimusExtError``: an illegal split, a refused target) becomes its row's
    reason."""
    rows = []
    for count in nodes:
        try:
            recipe = session.load(path, overrides, cluster=cluster, nodes=count, config_roots=config_roots,
                                  schedule=schedule)
            if before is not None:
                before(recipe)
            rows.append(SweepRow(nodes=count, tokens=tokens, projection=session.project(recipe), recipe=recipe))
        except PrimusExtError as err:
            rows.append(SweepRow(nodes=count, tokens=tokens, reason=_reason(err)))
    return Sweep(rows=tuple(rows), tokens=tokens)


def _reason(err: PrimusExtError) -> str:
    """The error's problems on one line (``RecipeError`` lists each), without its ``invalid recipe ...`` head."""
    problems = getattr(err, "problems", None)
    if problems:
        return "; ".join(str(p) for p in problems)
    return str(err)
