"""Validation-set readers: archs and measured rows -> specs, with every skip named."""

import csv
from pathlib import Path

import pytest
from validate_rows import ARCH_HEADER, runs_of, write

from primus_ext.errors import RecipeError
from primus_ext.validate.archs import read_archs
from primus_ext.validate.runs import fp4_recipe_of, fp8_recipe_of, precision_of, read_runs

VALIDATION = Path(__file__).resolve().parents[3] / "shared" / "validation"


def test_moe_mla_arch_from_columns_and_notes(tmp_path):
    path = write(tmp_path, "a.csv", ARCH_HEADER + 'DSV3,61,7168,18432,128,MLA,129280,256,8,2048,1 (2048),3,yes,'
                 '"q_lora_rank 1536, kv_lora_rank 512, qk_head_dim 128, qk_pos_emb_head_dim 64, v_head_dim 128"\n'
                 'Tiny,2,64,,4,,1000,,,,,,no,no ffn\n')
    archs = read_archs(path)
    m = archs["DSV3"].model
    assert m.multi_latent_attention and m.q_lora_rank == 1536 and m.kv_lora_rank == 512
    assert m.moe_layer_pattern[:3] == (False, False, False) and m.num_moe_layers == 58
    assert m.moe_shared_expert_intermediate_size == 2048 and m.num_experts == 256 and m.moe_router_topk == 8
    tiny = archs["Tiny"]
    assert tiny.model.ffn_hidden_size == 256 and tiny.model.num_query_groups == 4
    assert any("4*hidden" in a for a in tiny.assumptions)


def test_runs_map_columns_flags_and_skips(tmp_path):
    runs = runs_of(tmp_path, (
        'NeMo,2025,M,4096,FP8,H100,64,2,2,2,1,,,16,1,256,"recipe:[recompute_granularity=""full""; '
        'recompute_num_layers=2]",1000,,,,\n'
        "NeMo,2025,M,4096,NVFP4,H100,8,1,1,,1,,,8,1,64,,900,,,,\n"
        "x LoRA,2025,M,4096,BF16,H100,8,1,1,,1,,,8,1,64,,900,,,,\n"
        "NeMo,2025,Unknown,4096,BF16,H100,8,1,1,,1,,,8,1,64,,900,,,,\n"
        "NeMo,2025,M,4096,BF16,TPU9,8,1,1,,1,,,8,1,64,,900,,,,\n"))
    run = runs[0]
    e = run.execution
    assert (e.tp, e.pp, e.vpp, e.dp, e.precision) == (2, 2, 2, 16, "fp8")
    assert e.recompute_granularity == "full" and e.recompute_num_layers == 2 and e.sequence_parallel
    assert e.pipeline_schedule == "interleaved" and run.system.world_size == 64
    reasons = [r.skipped_reason for r in runs[1:]]
    assert "has no FP4 tensor cores" in reasons[0] and "LoRA rank not stated" in reasons[1]
    assert "unknown architecture" in reasons[2]
    assert "TPU9" in reasons[3]


def test_precision_labels():
    assert precision_of("FP8 rowwise (torchao float8)") == "fp8" and precision_of("MXFP8") == "fp8"
    assert precision_of("BF16") == "bf16" and precision_of("NVFP4") == "fp4" and precision_of("") is None
    assert precision_of("MXFP4") == "fp4" and fp4_recipe_of("MXFP4") == "mxfp4" and fp4_recipe_of("NVFP4") == "nvfp4"


def test_nvfp4_rows_on_blackwell_are_projected_with_the_recipe(tmp_path):
    runs = runs_of(tmp_path, ("NeMo,2025,M,4096,NVFP4,GB200,8,1,1,,1,,,8,1,64,,900,,,,\n"
                              "NeMo,2025,M,4096,MXFP4,MI355X,8,1,1,,1,,,8,1,64,,900,,,,\n"
                              "NeMo,2025,M,4096,NVFP4,MI355X,8,1,1,,1,,,8,1,64,,900,,,,\n"))
    assert not runs[0].skipped_reason and runs[0].execution.precision == "fp4"
    assert runs[0].execution.fp4_recipe == "nvfp4" and runs[1].execution.fp4_recipe == "mxfp4"
    assert "use fp4_recipe: mxfp4" in runs[2].skipped_reason


@pytest.mark.parametrize(("label", "notes", "recipe"), [
    ("FP8-MX (32x32)", "", "mxfp8"), ("MXFP8", "", "mxfp8"), ("FP8-CS", "", "tensorwise"),
    ("FP8", "recipe flags from Megatron-Bridge v0.5.0 (LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_CS_V2)", "tensorwise"),
    ("FP8 (per-tensor current scaling)", "", "tensorwise"), ("FP8 rowwise (torchao float8)", "", "rowwise"),
    ("FP8 (torchao float8)", "", "tensorwise"), ("FP8", "", "delayed"),
    ("FP8 alt (parenthesized value; presumably MXFP8/finer granularity - legend not visible)", "", "delayed"),
])
def test_fp8_recipe_labels(label, notes, recipe):
    assert fp8_recipe_of(label, notes) == recipe


def test_wrong_layout_is_a_clean_error(tmp_path):
    with pytest.raises(RecipeError) as err:
        read_archs(write(tmp_path, "bad.csv", "name,hidden\nx,1\n"))
    assert "missing columns" in str(err.value)
    with pytest.raises(RecipeError):
        read_runs(tmp_path / "absent.csv", {})


@pytest.mark.skipif(not VALIDATION.exists(), reason="shared/validation not present")
def test_every_published_row_is_projected_or_named():
    archs = read_archs(VALIDATION / "model_archs.csv")
    runs = read_runs(VALIDATION / "measured_throughput.csv", archs)
    with (VALIDATION / "measured_throughput.csv").open() as fh:
        assert len(runs) == len(list(csv.DictReader(fh)))
    for run in runs:
        assert (run.model is not None) != bool(run.skipped_reason)
        if run.model is not None:
            assert run.execution.world_size == run.num_gpus == run.system.world_size
    assert sum(run.model is not None for run in runs) >= 100


@pytest.mark.skipif(not VALIDATION.exists(), reason="shared/validation not present")
def test_hardware_csv_overrides_datasheet_keeps_profile_efficiency(tmp_path):
    from primus_ext.hardware import load_gpu
    from primus_ext.validate.hardware_csv import read_hardware

    specs = read_hardware(VALIDATION / "hardware_specs.csv")
    assert specs["h100"].bf16_dense_tflops == 989 and specs["gb200"].scaleup_domain == 72
    assert specs["mi300x"].efficiency == load_gpu("mi300x").efficiency
    text = (VALIDATION / "hardware_specs.csv").read_text().replace("H200_SXM_141GB,989,", "H200_SXM_141GB,1234,")
    custom = tmp_path / "hw.csv"
    custom.write_text(text)
    archs = read_archs(VALIDATION / "model_archs.csv")
    runs = read_runs(VALIDATION / "measured_throughput.csv", archs, read_hardware(custom))
    assert any(r.system and r.system.gpu.bf16_dense_tflops == 1234 for r in runs)


def test_indivisible_layers_get_the_recipe_split_and_history_steps_keep_the_final(tmp_path):
    from primus_ext.validate.runs import balanced_layout

    # 61 = 16 * 3 + 13: the 13 extra layers go to middle stages 1..13; embedding/loss stages keep 3
    assert balanced_layout(61, 16) == "Ettt|" + "tttt|" * 13 + "ttt|tttL"
    runs = runs_of(tmp_path, (
        "S,2025,M,4096,BF16,H100,128,1,16,,1,,,8,1,64,,900,,,,\n"
        "S,2025,N,4096,BF16,H100,16,1,16,,1,,,1,1,64,,900,,,,\n"
        'T,2025,N,4096,BF16,H100,16,1,16,,1,,,1,1,64,"step2: fuse",900,,,,optimization-history table\n'
        'T,2025,N,4096,BF16,H100,16,1,16,,1,,,1,1,64,"step5: graphs",950,,,,optimization-history table\n'),
        archs="M,126,1024,4096,16,4,32000,,,,,,no,\nN,61,1024,4096,16,4,32000,,,,,,no,\n")
    assert runs[0].execution.account_for_embedding_in_pipeline_split  # 126 + 2 = 128 = 16 * 8
    assert runs[1].execution.pipeline_model_parallel_layout.count("t") == 61
    assert "intermediate" in runs[2].skipped_reason and runs[3].model is not None


def test_fsdp_read_from_flags_but_not_from_its_negation(tmp_path):
    runs = runs_of(tmp_path, (
        "AMD,2026,M,8192,FP8,MI325X,64,1,1,,1,1,,64,2,512,no FSDP (DDP/distributed optimizer),1000,,,,\n"
        "AMD,2026,M,8192,BF16,MI325X,64,1,1,,1,1,,64,1,256,FSDP,1000,,,,\n"
        "x,2026,M,8192,BF16,H100,64,1,1,,1,1,,64,1,256,recipe:[use_torch_fsdp2=true],1000,,,,\n"
        "NeMo,2025,M,8192,FP8,GB200,64,1,1,,1,1,,64,1,256,FSDP=1 (Megatron FSDP); recipe:[use_mcore_fsdp=1],1000,,,,\n"
    ))
    assert [r.execution.fsdp for r in runs] == ["none", "torch_fsdp2", "torch_fsdp2", "megatron_fsdp"]
    assert runs[0].execution.use_distributed_optimizer
