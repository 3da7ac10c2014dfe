"""Scaling a recipe down for a short local run (pure parts of ``launcher.short_run``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from primus_ext.hardware import load_system
from primus_ext.launcher.short_run import VerifyResult, local_target, scale_model
from primus_ext.specs import ExecutionSpec, ModelSpec

LLAMA_8B = ModelSpec(name="llama3.1_8B", num_layers=32, hidden_size=4096, ffn_hidden_size=14336,
                     num_attention_heads=32, num_query_groups=8, kv_channels=128, vocab_size=128256,
                     max_position_embeddings=8192)


def test_scale_model_keeps_gqa_ratio_and_tp_divisibility():
    small = scale_model(LLAMA_8B, ExecutionSpec(tensor_model_parallel_size=2), 1 / 16)
    # heads in multiples of TP x (32/8) = 8: round(32/16 / 8) -> at least 8; hidden = heads x 128
    assert (small.num_attention_heads, small.num_query_groups, small.hidden_size) == (8, 2, 1024)
    assert small.ffn_hidden_size == 896 and small.ffn_hidden_size % (64 * 2) == 0
    assert small.num_layers == 32 and small.vocab_size == 128256
    assert scale_model(LLAMA_8B, ExecutionSpec(), 1.0) is LLAMA_8B


def test_scale_model_moe_keeps_enough_local_experts():
    moe = ModelSpec(name="m", num_layers=2, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                    num_query_groups=8, kv_channels=128, vocab_size=32000, num_experts=8, moe_router_topk=2,
                    moe_ffn_hidden_size=14336, moe_layer_pattern=(True, True))
    small = scale_model(moe, ExecutionSpec(expert_model_parallel_size=2), 1 / 16)
    assert small.num_experts == 4  # EP x min(8/2, top-k 2)
    assert small.moe_ffn_hidden_size == 896


def test_local_target_runs_on_nproc_ranks():
    recipe = SimpleNamespace(model=LLAMA_8B, system=load_system("h100", 8),
                             execution=ExecutionSpec(tensor_model_parallel_size=2, seq_length=8192,
                                                     global_batch_size=8, data_parallel_size=32))
    target = local_target(recipe, scale=1 / 16, nproc=2, device="cpu")
    assert target.system.world_size == 2 and target.system.gpu.name == load_system("cpu", 1).gpu.name
    assert target.execution.dp == 1 and target.execution.seq_length == 512
    assert target.model.max_position_embeddings >= 512


def test_verify_error_sign():
    result = VerifyResult(projection=SimpleNamespace(step_time_s=0.9, tokens_per_s_per_gpu=1.0),
                          training=SimpleNamespace(median_step_time_s=1.0), measured=())
    assert result.error_pct == pytest.approx(-10.0)


def test_verify_reports_the_measured_comm_split_next_to_the_projected():
    comms = (SimpleNamespace(exposed_s=0.05), SimpleNamespace(exposed_s=0.02))
    projection = SimpleNamespace(step_time_s=0.9, tokens_per_s_per_gpu=1.0, breakdown=SimpleNamespace(comms=comms))
    timed = SimpleNamespace(median_step_time_s=1.0, median_collective_s=(0.2, 0.3), median_skew_s=(0.1, 0.05))
    split = VerifyResult(projection=projection, training=timed, measured=()).comm_split()
    # one rank's figures: the rank with the most time inside collectives (rank 1), not a max of each
    assert split == pytest.approx({"measured_collective_s": 0.3, "measured_skew_s": 0.05,
                                   "projected_exposed_comm_s": 0.07})
    untimed = SimpleNamespace(median_step_time_s=1.0, median_collective_s=(), median_skew_s=())
    assert VerifyResult(projection=projection, training=untimed, measured=()).comm_split()["measured_skew_s"] is None


def test_shrink_cuts_the_global_batch_and_says_so():
    from primus_ext.launcher.short_run import shrink_for_here

    recipe = ExecutionSpec(seq_length=8192, micro_batch_size=2, global_batch_size=512, data_parallel_size=64,
                           precision="fp8", use_distributed_optimizer=True, overlap_param_gather=True)
    model, execution, shrinks = shrink_for_here(LLAMA_8B, recipe, scale=1 / 16, nproc=2, device="cpu")
    # 2 ranks: DP 2; MBS 2 kept; 2 micro-batches per DP rank (PP 1) -> GBS 2 x 2 x 2 = 8
    assert (execution.dp, execution.micro_batch_size, execution.global_batch_size) == (2, 2, 8)
    assert execution.num_microbatches == 2 and execution.precision == "bf16"
    assert not execution.use_distributed_optimizer and execution.seq_length == 512 and model.hidden_size == 512
    lines = {s.key: str(s) for s in shrinks}
    assert lines["global_batch_size"].startswith("global_batch_size 512 -> 8: ") and "this machine" in \
        lines["global_batch_size"]
    assert lines["seq_length"].startswith("seq_length 8192 -> 512: --scale 0.0625")
    assert {"data_parallel_size", "precision", "use_distributed_optimizer", "hidden_size"} <= set(lines)
    assert "tensor_model_parallel_size" not in lines  # unchanged settings are not reported


def test_shrink_keeps_a_small_batch_and_a_legal_interleaved_schedule():
    from primus_ext.launcher.short_run import local_batch, shrink_for_here

    _, small, shrinks = shrink_for_here(LLAMA_8B, ExecutionSpec(global_batch_size=4), scale=1.0, nproc=2,
                                        device="cpu")
    assert small.global_batch_size == 4 and "global_batch_size" not in {s.key for s in shrinks}
    # PP 2 x VPP 2 on 2 ranks: DP 1, 2 x PP = 4 micro-batches, a multiple of PP as interleaved 1F1B needs
    interleaved = ExecutionSpec(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2,
                                micro_batch_size=1, global_batch_size=256)
    assert local_batch(interleaved) == 4
    assert local_batch(ExecutionSpec(micro_batch_size=2, global_batch_size=7)) == 7  # illegal: left to plan_run


def test_refuses_early_when_this_machines_ram_is_too_small():
    from primus_ext.errors import InfeasibleConfig
    from primus_ext.launcher.short_run import check_fits

    recipe = SimpleNamespace(model=LLAMA_8B, system=load_system("h100", 8),
                             execution=ExecutionSpec(seq_length=8192, micro_batch_size=2, global_batch_size=512))
    target = local_target(recipe, scale=1 / 16, nproc=2, device="cpu")
    need = check_fits(target, available_bytes=64 * 1024**3)  # fits a 64 GiB machine
    assert 2 * 1024**3 < need < 64 * 1024**3
    with pytest.raises(InfeasibleConfig) as err:
        check_fits(target, available_bytes=int(need) // 2)
    text = str(err.value)
    assert "needs ~" in text and "GiB available" in text and "--scale" in text
