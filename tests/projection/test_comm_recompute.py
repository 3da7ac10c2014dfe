"""Recompute re-runs the forward's communication in the backward (megatron-core 0.16.1
``tensor_parallel/random.py`` ``CheckpointFunction.backward``): the whole layer's under full recompute, the
checkpointed modules' under selective; FSDP gathers nothing more. Both projection paths see it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from projection_specs import MOE

from primus_ext.hardware import load_system
from primus_ext.model.layers import rank_shapes
from primus_ext.model.placement import group_placements
from primus_ext.projection import evaluate
from primus_ext.projection.comm import layer_comm, recomputed_parts
from primus_ext.projection.evaluate_batch import evaluate_many
from primus_ext.specs import ExecutionSpec

SYSTEM = load_system("h100", 4)
EX = ExecutionSpec(tensor_model_parallel_size=4, context_parallel_size=2, expert_model_parallel_size=8,
                   expert_tensor_parallel_size=2, data_parallel_size=4, sequence_parallel=True, cp_comm_type="a2a",
                   seq_length=4096, micro_batch_size=1, global_batch_size=32)


def _comm(ex: ExecutionSpec, kind: str, recompute: float = 0.0):
    shape = rank_shapes(MOE, ex)[kind]
    return layer_comm(shape, ex, group_placements(ex, SYSTEM), SYSTEM, fwd_s=1e-3, bwd_s=2e-3, recompute_s=recompute,
                      attn=(2e-4, 4e-4), params=(10**8, 10**8))


def _selective(*modules: str) -> ExecutionSpec:
    return replace(EX, recompute_granularity="selective", recompute_modules=modules)


def test_full_recompute_adds_the_whole_forward_comm_to_the_backward():
    plain = _comm(EX, "moe")
    full = _comm(replace(EX, recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1), "moe",
                 recompute=1e-3)
    assert set(full.bwd) == {"tp", "cp", "ep"}
    for kind in ("tp", "cp", "ep"):
        assert full.fwd[kind] == plain.fwd[kind]
        assert full.bwd[kind][0] == pytest.approx(plain.bwd[kind][0] + plain.fwd[kind][0], rel=1e-12)
        assert full.bwd[kind][1] == pytest.approx(plain.bwd[kind][1] + plain.fwd[kind][1], rel=1e-12)


@pytest.mark.parametrize("modules,kind,redone", [
    (("core_attn",), "moe", {"cp"}),
    ((), "dense", {"cp"}),  # Megatron's default module: core_attn
    (("moe",), "moe", {"ep", "etp", "shared"}),
    (("shared_experts",), "moe", {"shared"}),
    (("mlp",), "dense", {"mlp"}),
    (("mlp",), "moe", set()),  # megatron checkpoints a dense MLP only
    (("moe_act", "layernorm", "mla_up_proj"), "moe", set()),
])
def test_selective_recompute_adds_what_the_modules_communicate(modules, kind, redone):
    ex = _selective(*modules)
    parts = recomputed_parts(rank_shapes(MOE, ex)[kind])
    assert parts == redone
    plain, sel = _comm(EX, kind), _comm(ex, kind, recompute=5e-4)
    expected_cp = plain.bwd["cp"][0] + (plain.fwd["cp"][0] if "cp" in redone else 0.0)
    assert sel.bwd["cp"][0] == pytest.approx(expected_cp, rel=1e-12)
    if kind == "moe":
        assert sel.bwd["ep"][0] == pytest.approx(plain.bwd["ep"][0] * (2 if "ep" in redone else 1), rel=1e-12)
    tp_pairs = {"mlp": 0.5} if kind == "dense" else {}
    extra_tp = sel.bwd["tp"][0] - plain.bwd["tp"][0]
    if kind == "dense":
        assert extra_tp == pytest.approx(plain.fwd["tp"][0] * sum(tp_pairs[p] for p in redone if p in tp_pairs),
                                         abs=1e-15)
    elif redone & {"etp", "shared"}:
        assert 0 < extra_tp < plain.fwd["tp"][0]  # not the attention's pair
    else:
        assert extra_tp == 0.0


def test_recomputed_comm_hides_behind_the_recompute_and_fsdp_is_unchanged():
    ex = replace(EX, tp_comm_overlap=True, fsdp="torch_fsdp2", recompute_granularity="full",
                 recompute_method="uniform", recompute_num_layers=1)
    plain = _comm(replace(ex, recompute_granularity=None, recompute_method=None, recompute_num_layers=None), "dense")
    full = _comm(ex, "dense", recompute=1e-3)  # the recompute takes the forward's time: the forward's exposure
    assert full.bwd["tp"][1] == pytest.approx(plain.bwd["tp"][1] + plain.fwd["tp"][1], rel=1e-12)
    assert full.bwd["fsdp"][0] == plain.bwd["fsdp"][0]
    assert full.bwd["fsdp"][1] <= plain.bwd["fsdp"][1]  # the recompute only widens its window


def test_both_paths_charge_the_recomputed_comm():
    system = load_system("h100", 4)
    ex = replace(EX, pipeline_model_parallel_size=2, data_parallel_size=2, global_batch_size=16)
    plain = evaluate(MOE, ex, system)
    full = replace(ex, recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    got = evaluate(MOE, full, system)
    for kind in ("tp", "cp", "ep"):
        # decoder layers move 3 passes' worth instead of 2 (the edge layers' TP is not recomputed)
        assert got.breakdown.comm(kind).total_s > 1.3 * plain.breakdown.comm(kind).total_s
        assert got.breakdown.comm(kind).exposed_s > plain.breakdown.comm(kind).exposed_s
    batch = evaluate_many(MOE, [full], system)
    assert batch.problems[0] is None
    assert batch.step_time_s[0] == pytest.approx(got.step_time_s, rel=1e-12)
    for kind in ("tp", "cp", "ep"):
        assert batch.parts[f"total_{kind}_s"][0] == pytest.approx(got.breakdown.comm(kind).total_s, rel=1e-12)
        assert batch.parts[f"exposed_{kind}_s"][0] == pytest.approx(got.breakdown.comm(kind).exposed_s, rel=1e-12)


def test_op_level_selective_checkpointing_regathers_only():
    """torchtitan's op SAC saves SDPA's outputs and the reduce-scatters: no CP exchange again (unlike Megatron's
    core_attn recompute under CP), only the all-gathers feeding the re-run matmuls (half of each TP pair)."""
    ex = replace(_selective(), selective_ac_option="op")
    assert recomputed_parts(rank_shapes(MOE, ex)["moe"]) == frozenset()
    assert recomputed_parts(rank_shapes(MOE, _selective())["moe"]) == frozenset({"cp"})
    dense = ExecutionSpec(tensor_model_parallel_size=4, data_parallel_size=8, sequence_parallel=True,
                          seq_length=4096, micro_batch_size=1, global_batch_size=32)
    plain, op = _comm(dense, "dense"), _comm(replace(dense, recompute_granularity="selective",
                                                    selective_ac_option="op"), "dense", recompute=1e-3)
    assert op.bwd["tp"][0] == pytest.approx(plain.bwd["tp"][0] + plain.fwd["tp"][0] / 2)
