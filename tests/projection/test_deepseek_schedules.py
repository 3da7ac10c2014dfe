"""DualPipe / DualPipeV in the projection: their own micro-batch rule (not Megatron's interleaved group rule), the EP
all-to-all their F&B pairs hide, the gradient sync between DualPipe's two copies, and the MoE wire dtypes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from projection_specs import BASE, MOE

from primus_ext.errors import InfeasibleConfig
from primus_ext.hardware import load_system
from primus_ext.model.layers import rank_shapes
from primus_ext.model.placement import GroupPlacement, group_placements, with_copies
from primus_ext.projection import evaluate
from primus_ext.projection.comm import MXFP8_WIRE_BYTES, _ep
from primus_ext.projection.evaluate import schedule_of
from primus_ext.projection.table import pairs_passes

SYSTEM = load_system("h800", 32)  # 256 GPUs: TP2 x PP4 x DP32, EP8
EX = replace(BASE, pipeline_model_parallel_size=4, data_parallel_size=32, global_batch_size=32 * 12,
             moe_token_dispatcher_type="alltoall")


def test_each_schedule_checks_its_own_micro_batch_rule():
    # 12 micro-batches on PP=8: interleaved's last group of 4 < PP refuses; DualPipe takes any even count >= 2*PP
    ex = replace(EX, pipeline_model_parallel_size=8, data_parallel_size=16, global_batch_size=16 * 12 * 2)
    assert schedule_of(replace(ex, pipeline_schedule="dualpipe"))[1] == "dualpipe"
    with pytest.raises(InfeasibleConfig, match=r"interleaved 1F1B: .* last group"):
        schedule_of(replace(ex, pipeline_schedule="interleaved", virtual_pipeline_model_parallel_size=2,
                            global_batch_size=16 * 12))
    with pytest.raises(InfeasibleConfig, match=r"DualPipe: .*even count"):
        schedule_of(replace(ex, pipeline_schedule="dualpipe", global_batch_size=16 * 17))


def test_dualpipes_pairs_hide_the_ep_all_to_all_that_1f1b_leaves_exposed():
    one = evaluate(MOE, EX, SYSTEM)
    dual = evaluate(MOE, replace(EX, pipeline_schedule="dualpipe"), SYSTEM)
    assert pairs_passes(replace(EX, pipeline_schedule="dualpipe")) and not pairs_passes(EX)
    assert one.breakdown.comm("ep").exposed_fraction == pytest.approx(1.0)
    assert dual.breakdown.comm("ep").exposed_fraction < 0.6
    # the same per-pass volume: the pairing changes what is exposed, not what is sent
    assert dual.breakdown.comm("ep").total_s == pytest.approx(one.breakdown.comm("ep").total_s, rel=0.35)


def test_the_two_copies_reduce_over_both_copies_data_parallel_ranks():
    pl = group_placements(EX, SYSTEM)
    two = with_copies(pl, 2)
    assert two.dp_cp.size == 2 * pl.dp_cp.size and two.edp.size == 2 * pl.edp.size
    assert two.dp_cp.domains == 2 * pl.dp_cp.domains  # PP crosses nodes: the copies sit in other domains
    assert with_copies(pl, 1) is pl
    small = GroupPlacement(size=2, domains=1, per_domain=2)
    assert with_copies(replace(pl, dp_cp=small, pp=GroupPlacement(size=4, domains=1, per_domain=4)), 2).dp_cp == \
        GroupPlacement(size=4, domains=1, per_domain=4)
    dual = evaluate(MOE, replace(EX, pipeline_schedule="dualpipe"), SYSTEM)
    assert dual.breakdown.comm("dp_grad").group.startswith(f"{2 * pl.dp_cp.size} ranks")
    assert any("two copies" in note for note in dual.notes)


def test_an_mxfp8_dispatch_sends_about_half_the_forward_dispatch_bytes():
    ex = replace(EX, moe_token_dispatcher_type="flex", pipeline_model_parallel_size=1, data_parallel_size=128)
    shape = rank_shapes(MOE, ex)["moe"]
    pl = group_placements(ex, SYSTEM)
    fwd, bwd = _ep(shape, ex, pl, SYSTEM)
    assert fwd == pytest.approx(bwd)
    fp8_fwd, fp8_bwd = _ep(shape, replace(ex, moe_dispatch_fwd_dtype="mxfp8"), pl, SYSTEM)
    assert fp8_bwd == pytest.approx(bwd)
    # dispatch (half of the pass) at 1 + 1/32 bytes per element instead of 2; latency terms aside (they are ~2-3 %
    # of the pass at the fitted link fraction)
    assert fp8_fwd == pytest.approx(fwd / 2 * (1 + MXFP8_WIRE_BYTES / 2), rel=0.03)
    _, fp8_back = _ep(shape, replace(ex, moe_combine_bwd_dtype="mxfp8"), pl, SYSTEM)
    assert fp8_back == pytest.approx(fp8_fwd)


def test_the_shared_experts_hide_part_of_the_all_to_all_under_shared_expert_overlap():
    from primus_ext.projection.comm import layer_comm, shared_expert_seconds

    ex = replace(EX, pipeline_model_parallel_size=1, data_parallel_size=128)
    shape = rank_shapes(MOE, ex)["moe"]
    pl = group_placements(ex, SYSTEM)
    shared_f, shared_b = shared_expert_seconds(shape, SYSTEM)
    assert 0 < shared_f < shared_b
    plain = layer_comm(shape, ex, pl, SYSTEM, fwd_s=1.0, bwd_s=2.0)
    over = layer_comm(shape, replace(ex, moe_shared_expert_overlap=True), pl, SYSTEM, fwd_s=1.0, bwd_s=2.0)
    e = plain.fwd["ep"][0]
    assert over.fwd["ep"][0] == e and plain.fwd["ep"][1] == e
    ovl = SYSTEM.gpu.efficiency.overlap
    assert over.fwd["ep"][1] == pytest.approx(e - min(e, shared_f) * ovl)
