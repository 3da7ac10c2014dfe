"""Many projections at once: the tuner's batch path.

    >>> from primus_ext.projection.evaluate_batch import evaluate_many
    >>> batch = evaluate_many(model, executions, system)       # same costs argument as evaluate()
    >>> batch.tokens_per_s_per_gpu[i], batch.parts["bubble_s"][i], batch.problems[i]
    >>> batch.projection(i)                                   # the full Projection (evaluate())

The executions are prepared one by one (``engine.prepare``: memoised lookups), grouped by schedule structure and
assembled group by group (``engine.assemble``): the arithmetic ``evaluate`` runs on a batch of one.
benchmarks/projection_speed.py measures the rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from primus_ext.errors import PrimusExtError
from primus_ext.projection.engine import COMM_KINDS, PARTS, Member, assemble, prepare
from primus_ext.projection.evaluate import evaluate
from primus_ext.projection.result import Projection
from primus_ext.projection.table import Costs, providers_of, table_of
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec


@dataclass(frozen=True, kw_only=True, eq=False)
class BatchProjection:
    """Projections of ``executions`` as arrays (NaN where ``problems[i]`` says why there is none)."""

    model: ModelSpec
    system: SystemSpec
    costs: Costs
    executions: tuple[ExecutionSpec, ...]
    problems: tuple[PrimusExtError | None, ...]
    step_time_s: np.ndarray
    tokens_per_s_per_gpu: np.ndarray
    model_tflops_per_gpu: np.ndarray
    mfu: np.ndarray
    parts: dict[str, np.ndarray]
    """``PARTS`` -> seconds per step (0 for a kind the configuration does not have)."""
    present: dict[str, np.ndarray]
    """Comm kind -> whether ``evaluate``'s breakdown lists it (a layer kind on the busiest rank has it; pp with
    PP > 1; the DP kinds when they cost something)."""
    sources: tuple[Mapping[str, str] | None, ...]
    """Per configuration: layer kind -> where its cost came from (shared by configurations with one layer set)."""

    def __len__(self) -> int:
        return len(self.executions)

    def breakdown(self, i: int) -> dict[str, float]:
        """Configuration ``i``'s breakdown: ``PARTS`` without the communication kinds it does not have."""
        out = {}
        for name, values in self.parts.items():
            if name.startswith(("exposed_", "total_")) and not self.present[name[name.index("_") + 1:-2]][i]:
                continue
            out[name] = float(values[i])
        return out

    def projection(self, i: int) -> Projection:
        """The full ``Projection`` of configuration ``i`` (``evaluate``; raises its problem)."""
        return evaluate(self.model, self.executions[i], self.system, self.costs)


def evaluate_many(model: ModelSpec, executions: Sequence[ExecutionSpec], system: SystemSpec,
                  costs: Costs = None) -> BatchProjection:
    """Project every execution (``evaluate``'s numbers, as arrays); a configuration that cannot be
    projected gets NaNs and its error (a ``PrimusExtError``, as ``evaluate`` raises) in ``problems``. Other
    exceptions (a broken hardware profile) propagate, as from ``evaluate``."""
    executions = tuple(executions)
    ctx = table_of(model, system, providers_of(costs))
    n = len(executions)
    problems: list[PrimusExtError | None] = [None] * n
    out = {name: np.full(n, np.nan) for name in ("step", "tok", "tflops", "mfu")}
    parts = {name: np.zeros(n) for name in PARTS}
    present = {kind: np.zeros(n, dtype=bool) for kind in COMM_KINDS}
    sources: list[Mapping[str, str] | None] = [None] * n
    groups: dict[tuple, tuple[list[int], list[Member]]] = {}
    for i, ex in enumerate(executions):
        try:
            member = prepare(ctx, ex)
        except PrimusExtError as err:
            problems[i] = err
            continue
        sources[i] = member.sources
        found = groups.setdefault(member.key, ([], []))
        found[0].append(i)
        found[1].append(member)
    for index, members in groups.values():
        steps = assemble(ctx, members)
        idx = np.array(index)
        out["step"][idx], out["tok"][idx] = steps.step, steps.tokens_per_s_per_gpu
        out["tflops"][idx], out["mfu"][idx] = steps.model_tflops_per_gpu, steps.mfu
        for k, name in enumerate(PARTS):
            parts[name][idx] = steps.parts[:, k]
        for k, kind in enumerate(COMM_KINDS):
            present[kind][idx] = steps.present[:, k]
    return BatchProjection(model=model, system=system, costs=costs, executions=executions, problems=tuple(problems),
                           step_time_s=out["step"], tokens_per_s_per_gpu=out["tok"], model_tflops_per_gpu=out["tflops"],
                           mfu=out["mfu"], parts=parts, present=present, sources=tuple(sources))


__all__ = ["PARTS", "BatchProjection", "evaluate_many"]
