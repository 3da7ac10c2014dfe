"""Fine-tuning rows (LoRA, SFT) read as what they run: adapters on a frozen base, recompute, FP8 parameters."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus_ext.validate.finetune import finetune_of, is_finetune
from tests.validate.validate_rows import runs_of

VALIDATION = Path(__file__).resolve().parents[3] / "shared" / "validation"

AMD_FLAGS = ('"recompute=full/block/21 layers; LoRA r=16 alpha=32 on attention (qkv+proj); packed seq 8192; '
             'LORA_A2A=1; SP=False"')


def test_lora_row_states_rank_targets_and_recompute(tmp_path):
    runs = runs_of(tmp_path, f"MLPerf llama2_70b_lora,2025,M,8192,FP8,MI300X,8,1,1,,1,,,8,1,8,{AMD_FLAGS},2000,,,,"
                             '"fp8 params, FP8 activation store"\n')
    e = runs[0].execution
    assert not runs[0].skipped_reason
    assert e.lora_rank == 16 and e.lora_targets == ("linear_qkv", "linear_proj")
    assert (e.recompute_granularity, e.recompute_method, e.recompute_num_layers) == ("full", "block", 21)
    assert e.fp8_param_gather and e.precision == "fp8" and e.seq_length == 8192


def test_benchmark_rules_fill_what_a_row_leaves_out(tmp_path):
    runs = runs_of(tmp_path, "MLPerf NVIDIA llama2_70b_lora,2025,M,8192,FP8,B200,8,1,1,,1,,,8,1,8,"
                             '"LoRA r=16; no CUDA graphs",5000,,,,"FP8_DPA=1: FP8 attention"\n')
    run = runs[0]
    assert run.execution.lora_targets == ("linear_qkv", "linear_proj") and run.execution.lora_rank == 16
    assert any("llama2_70b_lora rules" in a for a in run.assumptions)
    assert any("FP8 attention" in a for a in run.assumptions)


def test_lora_costs_less_than_the_same_step_trained_in_full(tmp_path):
    from primus_ext.validate.run import analytic_projector

    lora, full = runs_of(tmp_path, (
        'x llama2_70b_lora,2025,M,4096,BF16,H100,8,1,1,,1,,,8,1,8,"LoRA r=16",900,,,,\n'
        "x,2025,M,4096,BF16,H100,8,1,1,,1,,,8,1,8,,900,,,,\n"))
    assert analytic_projector(lora) > analytic_projector(full)  # no weight-gradient GEMMs for the frozen base


def test_unprojectable_lora_rows_say_why():
    assert finetune_of({"source": "x", "notes": "", "extra_flags": "LoRA on attention (qkv)"}) == (
        "LoRA rank not stated (write e.g. 'LoRA r=16' in extra_flags)")
    missing = finetune_of({"source": "x", "notes": "", "extra_flags": "LoRA r=8"})
    assert isinstance(missing, str) and "target modules" in missing


def test_sft_row_is_the_pretraining_step(tmp_path):
    row = {"source": "Primus SFT", "notes": "", "extra_flags": "recompute=full/uniform/2 layers"}
    assert is_finetune(row)
    tune = finetune_of(row)
    assert not isinstance(tune, str) and tune.kind == "sft" and tune.recompute == ("full", "uniform", 2)
    runs = runs_of(tmp_path, 'Primus SFT,2025,M,4096,BF16,H100,8,1,1,,1,,,8,1,8,"recompute=full/uniform/2 layers",'
                             "900,,,,\n")
    e = runs[0].execution
    assert e.lora_rank == 0 and e.recompute_granularity == "full" and e.recompute_num_layers == 2


@pytest.mark.skipif(not (VALIDATION / "mlperf_training.csv").exists(), reason="shared/validation not present")
def test_every_mlperf_row_is_projected():
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.hardware_csv import read_hardware
    from primus_ext.validate.runs import read_runs

    runs = read_runs(VALIDATION / "mlperf_training.csv", read_archs(VALIDATION / "model_archs.csv"),
                     read_hardware(VALIDATION / "hardware_specs.csv"))
    assert runs and all(r.model is not None for r in runs), [r.skipped_reason for r in runs if r.model is None]
    assert all(r.execution.lora_rank == 16 for r in runs)
    assert {r.execution.recompute_num_layers for r in runs if r.gpu == "MI300X"} == {21}
