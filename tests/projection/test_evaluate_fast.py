"""The tuner's fast path (memoised stages, extrapolated schedule) equals the reference path of ``project``
(no memo, op-by-op schedule simulation) on every field of the projection, in one process."""

import itertools
from dataclasses import replace

import pytest
from projection_specs import BASE, MOE

from primus_ext.hardware import load_system
from primus_ext.projection import evaluate
from primus_ext.projection.evaluate import clear_cost_cache, projection_of


def _fields(p) -> dict:
    b = p.breakdown
    out = {"step": p.step_time_s, "tok": p.tokens_per_s_per_gpu, "mfu": p.mfu, "compute": b.compute_s,
           "bubble": b.bubble_s, "optimizer": b.optimizer_s, "overhead": b.overhead_s, "recompute": b.recompute_s,
           "sources": p.sources, "m": p.num_microbatches}
    for c in b.comms:
        out[c.kind] = (c.total_s, c.exposed_s, c.group)
    for s in p.stages:
        out[f"stage{s.rank}"] = (s.layers, *s.fwd_s, *s.bwd_s, s.busy_s, s.finish_s, s.embedding, s.output,
                                 s.dense_params, s.expert_params)
    return out


def _variants():
    for pp, vpp, dp, flags in itertools.product((1, 4), (None, 3), (8, 16), range(4)):
        if pp == 1 and vpp:
            continue
        yield replace(BASE, pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp,
                      data_parallel_size=dp, global_batch_size=64 * dp, overlap_grad_reduce=bool(flags & 1),
                      overlap_param_gather=bool(flags & 2), tp_comm_overlap=bool(flags & 1),
                      recompute_granularity="full" if flags == 3 else None,
                      recompute_method="block" if flags == 3 else None, recompute_num_layers=1 if flags == 3 else None)


@pytest.mark.parametrize("ex", list(_variants()), ids=lambda ex: f"pp{ex.pp}v{ex.vpp}dp{ex.dp}")
def test_fast_path_equals_reference(ex):
    system = load_system("h100", ex.world_size // 8)
    fast = _fields(evaluate(MOE, ex, system))
    reference = _fields(projection_of(MOE, ex, system, (), timeline=True))  # what project() computes
    assert fast.keys() == reference.keys()
    for key, want in reference.items():
        got = fast[key]
        if isinstance(want, tuple):  # numbers approximately, strings / flags exactly (any pytest version)
            assert len(got) == len(want), key
            for g, w in zip(got, want, strict=True):
                _same(g, w, key)
        else:
            _same(got, want, key)


def _same(got, want, key) -> None:
    if isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), key
    else:
        assert got == want, key


def test_memo_is_per_context_and_cleared():
    system = load_system("h100", 4)
    first = evaluate(MOE, BASE, system)
    assert evaluate(MOE, BASE, system) is first  # a revisited configuration is one lookup
    other = replace(system, gpu=replace(system.gpu, efficiency=replace(system.gpu.efficiency, gemm_max=0.5)))
    slower = evaluate(MOE, BASE, other)  # another system object: its own memo, new layer costs
    assert slower.step_time_s > first.step_time_s
    clear_cost_cache()
    assert evaluate(MOE, BASE, system) is not first


def test_forget_projections_recomputes_the_same_projection():
    from primus_ext.projection.evaluate import forget_projections

    system = load_system("h100", 8)
    ex = replace(BASE, virtual_pipeline_model_parallel_size=3, global_batch_size=1024)
    first = evaluate(MOE, ex, system)
    forget_projections()
    again = evaluate(MOE, ex, system)
    assert again is not first and _fields(again) == _fields(first)


def _alternatives(f, value):
    """Other legal-looking values of one ExecutionSpec field (bool flipped, int doubled, other Literal choices)."""
    import typing

    kind = typing.get_type_hints(type(BASE))[f.name]
    choices = [c for c in typing.get_args(kind) if isinstance(c, str)]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value * 2]
    if choices:
        return [c for c in choices if c != value]
    return []


def test_fields_outside_the_layer_memo_key_leave_the_shapes_unchanged():
    """Every ExecutionSpec field that changes ``rank_shapes`` must be in the layer memo's key, or two
    executions differing in it would share layer costs."""
    from dataclasses import fields

    from primus_ext.model.layers import rank_shapes
    from primus_ext.projection.table import SHAPE_FIELDS as _SHAPE_FIELDS

    base, model = replace(BASE, precision="fp8"), MOE
    reference = rank_shapes(model, base)
    checked = 0
    for f in fields(base):
        if f.name in _SHAPE_FIELDS:
            continue
        for other in _alternatives(f, getattr(base, f.name)):
            try:
                shapes = rank_shapes(model, replace(base, **{f.name: other}))
            except (ValueError, TypeError, ZeroDivisionError):
                continue
            checked += 1
            assert shapes == reference, f"{f.name}={other!r} changes the per-rank shapes but is not in the key"
    assert checked > 20
    rowwise = rank_shapes(model, replace(base, fp8_recipe="rowwise"))
    assert rowwise != reference and "fp8_recipe" in _SHAPE_FIELDS
