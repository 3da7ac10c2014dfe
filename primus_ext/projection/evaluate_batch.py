"""Many projections at once: the tuner's batch path.

    >>> from primus_ext.projection.evaluate_batch import evaluate_many
    >>> batch = evaluate_many(model, executions, system)       # same costs argument as evaluate()
    >>> batch.tokens_per_s_per_gpu[i], batch.parts["bubble_s"][i], batch.problems[i]
    >>> batch.projection(i)                                   # the full Projection (evaluate())

The arithmetic of ``evaluate`` laid out as arrays over configurations. Per configuration, Python only
looks up what the cost table memoises (``projection.table``: per-rank layer costs and communication, the
layer split's counts per chunk) and its schedule structure. Configurations sharing a structure
(schedule, PP, VPP, micro-batches) then go through together:
  * chunk sums: counts per chunk (PP*VPP x 8 layer kinds) times the layer kinds' values (8 x 22 fields:
    fwd, bwd, compute, recompute, params, analytic passes, layers, what a pass without a partner micro-batch
    adds under EP overlap, total / exposed per layer comm kind), one batched matrix product;
  * the schedule: ``model.pipeline.batch.simulate_many`` (compiled op loop; long runs extrapolate the
    periodic steady state as ``evaluate`` does);
  * the step tail (DP gradient reduction and parameter gather, optimizer): ``projection.tail.rank_tail`` per (rank
    parameters, DP layout), the same memo ``evaluate`` uses, and their overlap as arrays;
  * the breakdown of the busiest rank, tok/s/GPU, TFLOP/s/GPU, MFU.
The zero-bubble schedule (its op order chosen on each configuration's op times) goes through ``evaluate`` one by
one.

tests/projection/test_evaluate_batch.py checks every number against ``evaluate`` over a sample of a tuner
space; benchmarks/projection_speed.py measures the rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from primus_ext.errors import PrimusExtError
from primus_ext.model.kinds.registry import pattern_kinds
from primus_ext.model.pipeline import simulate_many, unpaired_counts
from primus_ext.model.pipeline.registry import get_schedule
from primus_ext.model.placement import group_placements
from primus_ext.model.stages import virtual_stages
from primus_ext.projection.comm import aligned_dp_windows_many, overlapped_exposed_many
from primus_ext.projection.evaluate import LAYER_COMM_KINDS, evaluate, schedule_of
from primus_ext.projection.result import Projection
from primus_ext.projection.table import (
    Costs,
    CostTable,
    counts_entry,
    layer_entry,
    layer_sources,
    providers_of,
    table_of,
)
from primus_ext.projection.tail import TAIL_LIMIT, boundary_p2p, rank_tail, step_constants
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

FIELDS = ("fwd", "bwd", "compute", "recompute", "dense", "experts", "passes", "layers", "fwd_unpaired", "bwd_unpaired",
          *(f"{part}_{kind}" for kind in LAYER_COMM_KINDS for part in ("total", "exposed", "has")))
"""Per-micro-batch values summed over a chunk's layers (``stage_sums._chunk``'s sums)."""
_F = {name: k for k, name in enumerate(FIELDS)}
GPT_ROWS = 8
"""Layer-kind rows of a chunk before the hybrid ones: dense kept / recomputed, MoE kept / recomputed, MTP layer,
MTP's output head (shared parameters: none of its own), embedding, output; then a hybrid model's kinds
(``kinds.registry.pattern_kinds``)."""

PARTS = ("compute_s", "bubble_s", "optimizer_s", "recompute_s", "overhead_s",
         *(f"{part}_{kind}_s" for kind in (*LAYER_COMM_KINDS, "pp", "dp_grad", "dp_param")
           for part in ("exposed", "total")))
"""``BatchProjection.parts``: the breakdown, named as ``tune.oracle.score_of`` names it."""

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


def _values(ctx: CostTable, layer_id: int, layers: dict) -> np.ndarray:
    """The layer kinds' per-micro-batch values (``GPT_ROWS`` + hybrid kinds x ``FIELDS``) of one layer set."""
    key = ("values", layer_id)
    found = ctx.batch.get(key)
    if found is None:
        mtp = "moe" if ctx.model.is_moe else "dense"
        hybrid = pattern_kinds(ctx.model.hybrid_layer_pattern).values()
        keys = (("dense", False), ("dense", True), ("moe", False), ("moe", True), (mtp, False), ("output", False),
                ("embedding", False), ("output", False), *((k, (k, True) in layers) for k in hybrid))
        found = np.zeros((len(keys), len(FIELDS)))
        for row, key_ in enumerate(keys):
            layer = layers.get(key_)
            if layer is None:
                continue
            out = found[row]
            out[_F["fwd"]], out[_F["bwd"]] = layer.fwd, layer.bwd
            out[_F["fwd_unpaired"]], out[_F["bwd_unpaired"]] = layer.fwd_unpaired, layer.bwd_unpaired
            out[_F["compute"]], out[_F["recompute"]] = layer.compute_fwd + layer.compute_bwd, layer.recompute
            if row != 5:  # the MTP head shares the output layer's parameters
                out[_F["dense"]], out[_F["experts"]] = layer.dense_params, layer.expert_params
            out[_F["passes"]] = 2 * layer.launched
            out[_F["layers"]] = row < 5 or row >= GPT_ROWS
            for kind, total, exposed in layer.comm_items:
                out[_F[f"total_{kind}"]] += total
                out[_F[f"exposed_{kind}"]] += exposed
                out[_F[f"has_{kind}"]] = 1.0  # listed in the breakdown even when it costs nothing
        ctx.batch[key] = found
    return found


def _sources(ctx: CostTable, layer_id: int, layers: dict) -> Mapping[str, str]:
    """Layer kind -> cost source of one layer set (``evaluate.layer_sources``), one read-only view per set."""
    key = ("sources", layer_id)
    found = ctx.batch.get(key)
    if found is None:
        found = ctx.batch[key] = MappingProxyType(layer_sources(layers))  # shared: read-only
    return found


def _counts(ctx: CostTable, ex: ExecutionSpec) -> tuple[np.ndarray, tuple[int, ...]]:
    """(layer counts per chunk, rank-major (PP*VPP x kinds), and per rank its distinct row index)."""
    distinct, rank_rows = counts_entry(ctx, ex)
    key = ("counts", rank_rows, tuple(row_id for row_id, _ in distinct))
    found = ctx.batch.get(key)
    if found is None:
        rows = [row for _, row in distinct]
        found = ctx.batch[key] = (np.array([(dk, dr, mk, mr, mtp, mtp, emb, out, *hybrid)
                                            for k in rank_rows for dk, dr, mk, mr, mtp, emb, out, *hybrid in rows[k]],
                                           dtype=np.float64), rank_rows)
    return found


def _p2p(memo: dict, nbytes: float, ex: ExecutionSpec, system: SystemSpec) -> np.ndarray:
    """Send/recv seconds per virtual-stage boundary (``tail.boundary_p2p``, as ``evaluate``), as an array."""
    pl = group_placements(ex, system)
    pp, vpp = ex.pp, virtual_stages(ex)
    key = (nbytes, pp, vpp, pl.pp_boundary_crosses, pl.pp.crosses)
    found = memo.get(key)
    if found is None:
        found = memo[key] = np.array(boundary_p2p(nbytes, ex, system))
    return found


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
    present = {kind: np.zeros(n, dtype=bool) for kind in (*LAYER_COMM_KINDS, "pp", "dp_grad", "dp_param")}
    sources: list[Mapping[str, str] | None] = [None] * n
    memo = ctx.batch.get("pass")
    if memo is None or len(memo["p2p"]) > TAIL_LIMIT:
        memo = ctx.batch["pass"] = {"p2p": {}}
    groups: dict[tuple, list] = {}
    for i, ex in enumerate(executions):
        try:
            m, schedule = schedule_of(ex)
            if get_schedule(schedule).batch_kernel is None:  # op order chosen per configuration: one by one
                projection = evaluate(model, ex, system, costs)
                _store(out, parts, present, i, projection)
                sources[i] = projection.sources
                continue
            layers, nbytes, layer_id = layer_entry(ctx, ex)
            sources[i] = _sources(ctx, layer_id, layers)
            counts, rank_rows = _counts(ctx, ex)
        except PrimusExtError as err:
            problems[i] = err
            continue
        pp, vpp = ex.pp, virtual_stages(ex)
        extra = int(ex.overlap_moe_expert_parallel_comm)  # combined 1F1B (zero-bubble went through evaluate)
        p2p = _p2p(memo["p2p"], nbytes, ex, system) if pp > 1 else None
        groups.setdefault((schedule, pp, vpp, m, extra), []).append(
            (i, ex, _values(ctx, layer_id, layers), counts, rank_rows, p2p))
    for key, members in groups.items():
        _group(ctx, memo, key, members, out, parts, present)
    return BatchProjection(model=model, system=system, costs=costs, executions=executions, problems=tuple(problems),
                           step_time_s=out["step"], tokens_per_s_per_gpu=out["tok"], model_tflops_per_gpu=out["tflops"],
                           mfu=out["mfu"], parts=parts, present=present, sources=tuple(sources))


def _store(out: dict, parts: dict, present: dict, i: int, p: Projection) -> None:
    out["step"][i], out["tok"][i], out["tflops"][i], out["mfu"][i] = (
        p.step_time_s, p.tokens_per_s_per_gpu, p.model_tflops_per_gpu, p.mfu)
    b = p.breakdown
    for name, value in (("compute_s", b.compute_s), ("bubble_s", b.bubble_s), ("optimizer_s", b.optimizer_s),
                        ("recompute_s", b.recompute_s), ("overhead_s", b.overhead_s)):
        parts[name][i] = value
    for c in b.comms:
        parts[f"exposed_{c.kind}_s"][i], parts[f"total_{c.kind}_s"][i] = c.exposed_s, c.total_s
        present[c.kind][i] = True


def _group(ctx: CostTable, memo: dict, key: tuple, members: list, out: dict, parts: dict, present: dict) -> None:
    """One schedule structure's configurations, as arrays (see the module docstring)."""
    schedule, pp, vpp, m, extra = key
    system, model = ctx.system, ctx.model
    n = len(members)
    idx = np.array([row[0] for row in members])
    vals = np.matmul(np.stack([row[3] for row in members]), np.stack([row[2] for row in members]))  # (n, PP*VPP, F)
    fwd, bwd = vals[:, :, _F["fwd"]], vals[:, :, _F["bwd"]]
    if extra:  # EP overlap: the passes without a partner in their own slots (``pipeline.ops.duration_slot``)
        durations = np.concatenate((fwd, bwd, np.zeros_like(fwd), fwd + vals[:, :, _F["fwd_unpaired"]],
                                    bwd + vals[:, :, _F["bwd_unpaired"]]), axis=1)
    else:
        durations = np.concatenate((fwd, bwd), axis=1)
    p2p = np.stack([row[5] for row in members]) if pp > 1 else np.zeros((n, pp * vpp - 1))
    finish, critical = simulate_many(schedule, pp, vpp, m, durations, p2p, extra=extra)
    ranks = vals.reshape(n, pp, vpp, len(FIELDS)).sum(axis=2)  # (n, PP, F)
    busy = m * (ranks[:, :, _F["fwd"]] + ranks[:, :, _F["bwd"]])
    alone = np.zeros((n, pp))  # what the passes without a partner add per rank (``ScheduleResult.unpaired``)
    if extra:
        counts = np.array(unpaired_counts(schedule, pp, vpp, m, pp, extra), dtype=np.float64)  # (PP, VPP, 2)
        chunks = vals.reshape(n, pp, vpp, len(FIELDS))
        alone = (chunks[:, :, :, _F["fwd_unpaired"]] * counts[None, :, :, 0]
                 + chunks[:, :, :, _F["bwd_unpaired"]] * counts[None, :, :, 1]).sum(axis=2)
        busy = busy + alone
    makespan = finish.max(axis=1)
    pp_exposed = np.minimum(critical, np.maximum(0.0, makespan - busy.max(axis=1)))

    tails = np.empty((n, pp, 4))  # grad, param, last-bucket share, optimizer
    for j, (_, ex, _, _, rank_rows, _) in enumerate(members):
        distinct = {}
        for r, row in enumerate(rank_rows):
            found = distinct.get(row)
            if found is None:
                found = distinct[row] = rank_tail(ctx.tails, int(ranks[j, r, _F["dense"]]),
                                                  int(ranks[j, r, _F["experts"]]), ex, system)
            tails[j, r] = found
    grad_t, param_t, share, opt = tails[:, :, 0], tails[:, :, 1], tails[:, :, 2], tails[:, :, 3]
    ovl = system.gpu.efficiency.overlap
    flags = np.array([(ex.overlap_grad_reduce, ex.overlap_param_gather) for _, ex, *_ in members], dtype=bool)
    grad_w, grad_s, param_w, param_s = aligned_dp_windows_many(ranks[:, :, _F["bwd"]], ranks[:, :, _F["fwd"]],
                                                               grad_t, param_t, share, vpp, pp)
    grad_exp = np.where(flags[:, :1], overlapped_exposed_many(grad_t, grad_w, grad_s, ovl), grad_t)
    param_exp = np.where(flags[:, 1:], overlapped_exposed_many(param_t, param_w, param_s, ovl), param_t)
    tail = (finish + grad_exp).max(axis=1)
    step = tail + opt.max(axis=1) + param_exp.max(axis=1)

    rows = np.arange(n)
    busiest_rank = busy.argmax(axis=1)
    busiest = ranks[rows, busiest_rank]  # (n, F): the rank that sets the steady state
    parts["compute_s"][idx] = m * busiest[:, _F["compute"]]
    parts["recompute_s"][idx] = m * busiest[:, _F["recompute"]]
    parts["overhead_s"][idx] = m * busiest[:, _F["passes"]] * system.gpu.efficiency.kernel_overhead_s
    for kind in LAYER_COMM_KINDS:
        parts[f"total_{kind}_s"][idx] = m * busiest[:, _F[f"total_{kind}"]]
        parts[f"exposed_{kind}_s"][idx] = m * busiest[:, _F[f"exposed_{kind}"]]
        present[kind][idx] = busiest[:, _F[f"has_{kind}"]] > 0
    parts["exposed_ep_s"][idx] += alone[rows, busiest_rank]
    if pp > 1:
        parts["total_pp_s"][idx] = 2 * m * p2p.sum(axis=1)
        parts["exposed_pp_s"][idx] = pp_exposed
        present["pp"][idx] = True
    grad_worst = grad_t[rows, grad_t.argmax(axis=1)]
    parts["total_dp_grad_s"][idx] = grad_worst
    parts["exposed_dp_grad_s"][idx] = np.where(grad_worst > 0, tail - makespan, 0.0)
    param_worst = param_exp.argmax(axis=1)
    parts["total_dp_param_s"][idx] = param_t[rows, param_worst]
    parts["exposed_dp_param_s"][idx] = np.where(param_t[rows, param_worst] > 0, param_exp[rows, param_worst], 0.0)
    present["dp_grad"][idx] = grad_worst > 0
    present["dp_param"][idx] = param_t[rows, param_worst] > 0
    parts["bubble_s"][idx] = np.maximum(0.0, makespan - pp_exposed - busy.max(axis=1))
    parts["optimizer_s"][idx] = opt.max(axis=1)

    flops, world, peak, tokens = (np.array(column, dtype=np.float64) for column in zip(
        *(step_constants(ctx.constants, model, system, ex) for _, ex, *_ in members), strict=True))
    out["step"][idx] = step
    out["tok"][idx] = tokens / (step * world)
    out["tflops"][idx] = tflops = flops / step / world / 1e12
    out["mfu"][idx] = tflops / peak


__all__ = ["FIELDS", "PARTS", "BatchProjection", "evaluate_many"]
