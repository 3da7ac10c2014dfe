"""Step-time projection of one configuration: per-rank layer costs re-inflated to the target cluster.

    >>> from primus_ext.projection import evaluate, project
    >>> p = evaluate(model, execution, system)              # fast path (tuner): no I/O, no timeline
    >>> p = project(model, execution, system, store)        # CLI: + timeline, memory, uncertainty band
    >>> p.tokens_per_s_per_gpu, p.breakdown.comm("ep").exposed_s, p.sources

docs/DESIGN.md "Downscale, measure, upscale": per layer and micro-batch, compute from the cost chain (the given
providers in order - the timing store first - then the analytic roofline) + exposed TP / CP / EP / FSDP comm
(``projection.comm``); per pipeline chunk the sum over its layers (+ embedding on the first chunk,
output + loss and MTP on the last); the step is the simulated schedule (``model.pipeline``) with
send/recv between stages, then the step tail: exposed DP gradient reduction (when ``overlap_grad_reduce``,
overlapped as megatron's aligned grad reduce allows: ``comm.aligned_dp_windows``), the optimizer step and
the exposed parameter all-gather (overlapped with the next forward when ``overlap_param_gather``).

One configuration is a batch of one: the arithmetic is ``projection.engine``'s, the same the tuner's
``evaluate_many`` runs over thousands. Pure arithmetic over memoised lookups: no torch, no I/O, no printing.
"""

from __future__ import annotations

from primus_ext.model.costs import CostProvider
from primus_ext.projection.engine import F as _F
from primus_ext.projection.engine import assemble, chunk_microbatches, prepare, rank_sums, schedule_of
from primus_ext.projection.result import Projection
from primus_ext.projection.table import (  # noqa: F401 (clear_cost_cache, forget_projections: re-exported)
    PROJECTIONS_LIMIT,
    Costs,
    clear_cost_cache,
    forget_projections,
    providers_of,
    table_of,
)
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec


def projection_of(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec,
                  providers: tuple[CostProvider, ...], *, timeline: bool = False) -> Projection:
    """``execution``'s projection through the engine, not memoised (``project``: with its timeline)."""
    ctx = table_of(model, system, providers)
    return assemble(ctx, [prepare(ctx, execution)], timeline=timeline).projection(0)


def evaluate(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec, costs: Costs = None) -> Projection:
    """The fast path: one configuration's projection, no timeline, no memory, no band.

    ``costs``: a ``CostProvider`` or a sequence tried in order (timing store first); the analytic
    roofline always closes the chain. Raises ``RecipeError`` / ``InfeasibleConfig`` on an illegal split.
    Memoised per (model, system, providers) objects: revisited configurations cost one dict lookup, and
    configurations that share per-rank shapes, layer split and layer communication share their layer rows;
    the pipeline schedule's steady state is extrapolated (``model.pipeline.periodic``).
    """
    ctx = table_of(model, system, providers_of(costs))
    memo = ctx.projections
    found = memo.get(execution) if memo is not None else None
    if found is None:
        found = assemble(ctx, [prepare(ctx, execution)]).projection(0)
        if memo is not None:
            if len(memo) >= PROJECTIONS_LIMIT:
                memo.clear()
            memo[execution] = found
    return found


def compute_floor(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec,
                  costs: Costs = None) -> tuple[float, dict[str, str]]:
    """Seconds of compute of the busiest rank, without simulating the schedule: no step of ``execution`` is shorter
    (a rank's busy time includes its compute), and sharding and the overlap flags do not change it (the tuner's
    branch and bound, ``tune.strategies.exhaustive``). ``Breakdown.compute_s`` is the compute of the rank the
    simulation finds busiest, so this is at least that. Returns it with the layers' cost sources; raises as
    ``evaluate``."""
    member = prepare(table_of(model, system, providers_of(costs)), execution)
    return chunk_microbatches(member) * float(rank_sums(member)[:, _F["compute"]].max()), dict(member.sources)


def step_floor(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec,
               costs: Costs = None) -> tuple[float, dict[str, str]]:
    """Seconds ``evaluate``'s step cannot go below, without simulating the schedule: the busiest rank's passes run
    one after another (every micro-batch through each of its chunks, at their paired times: the shortest a pass
    takes). The tuner's branch and bound uses it for schedules whose simulation is costly (op orders built in
    Python). Returns it with the layers' cost sources (``Projection.sources``); raises as ``evaluate``."""
    member = prepare(table_of(model, system, providers_of(costs)), execution)
    ranks = rank_sums(member)
    return chunk_microbatches(member) * float((ranks[:, _F["fwd"]] + ranks[:, _F["bwd"]]).max()), \
        dict(member.sources)


__all__ = ["compute_floor", "evaluate", "projection_of", "schedule_of", "step_floor"]
