"""DeepSeek-V3 as its technical report trains it (arXiv:2412.19437 sec. 3): DualPipe chosen as a what-if from the
command line or the recipe's ``# primus-ext:`` comment, its own micro-batch rule, the report's memory options priced,
the ``h800`` profile, and a peak inside the memory model's demonstrated error said with its figures (exit 4: over
capacity, within the model's error; issue 53)."""

import itertools
import json
from pathlib import Path

import pytest

from primus_ext.cli import main

RECIPE = "recipes/deepseek_v3-pretrain.yaml"
REPORT = [  # sec. 3.1-3.3: TP1 PP16 EP64 (8 nodes), GBS 15 360 at seq 4 096, MTP depth 1, FP8 blockwise
    "tensor_model_parallel_size=1", "pipeline_model_parallel_size=16", "expert_model_parallel_size=64",
    "pipeline_model_parallel_layout=null", "global_batch_size=15360", "micro_batch_size=1", "mtp_num_layers=1",
    "moe_token_dispatcher_type=flex", "fp8_recipe=blockwise",
    "decoder_first_pipeline_num_layers=4", "decoder_last_pipeline_num_layers=1",
]
MEMORY = [  # sec. 3.2.3 / 3.3.3: recompute RMSNorm + MLA up-projections (+ the SwiGLU output), BF16 moments, FP8 cache
    "recompute_granularity=selective", "recompute_modules=[layernorm,mla_up_proj,moe_act]",
    "use_precision_aware_optimizer=true", "exp_avg_dtype=bf16", "exp_avg_sq_dtype=bf16",
    "activation_func_fp8_input_store=true",
]
TARGET = ["--cluster", "h800", "--nodes", "256"]


def _project(capsys, *args):
    code = main(["project", RECIPE, *args, "--json", "-"])
    return code, json.loads(capsys.readouterr().out)


def test_the_report_configuration_projects_under_dualpipe_and_says_what_it_assumes(capsys):
    code, doc = _project(capsys, *REPORT, *MEMORY, *TARGET, "--schedule", "dualpipe")
    assert code == {"within the model's error": 4}.get(doc["memory"]["verdict"], 0)  # model.memory.gate
    assert doc["inputs"]["execution"]["pipeline_schedule"] == "dualpipe"
    assert doc["num_microbatches"] == 120  # 15 360 / (MBS 1 x DP 128): Megatron's interleaved rule would refuse it
    assert any("what-if" in w and "no Primus or Megatron-LM key" in w for w in doc["warnings"])
    assert any("two copies" in n and "256 dense" in n for n in doc["notes"])  # the copies' gradient sync, priced
    assert doc["breakdown"]["comm"]["dp_grad"]["group"].startswith("256 ranks")
    # the F&B pairs hide most of the EP all-to-all (only the passes run alone and the excess stay exposed)
    ep = doc["breakdown"]["comm"]["ep"]
    assert 0 < ep["exposed_fraction"] < 0.5
    assert doc["memory"]["verdict"] in ("fits", "over the margin", "within the model's error")
    assert 0 < doc["tokens_per_s_per_gpu"] < 3000 and 0 < doc["mfu"] < 1


def test_each_memory_option_of_the_report_lowers_the_peak(capsys):
    base = [*REPORT, *TARGET, "--schedule", "dualpipe", "--memory-only"]
    peaks = []
    for i in range(len(MEMORY) + 1):
        _, doc = _project(capsys, *base, *MEMORY[:i])
        peaks.append(doc["memory"]["peak_memory_gib"])
    steps = [peaks[0], peaks[2], peaks[5], peaks[6]]  # recompute, BF16 moments, FP8 SwiGLU input
    assert all(a > b for a, b in itertools.pairwise(steps)), peaks


def test_the_recipe_comment_chooses_the_schedule(tmp_path, capsys):
    text = Path(RECIPE).read_text().replace("# primus-ext: {cluster: gb200, nodes: 64}",
                                            "# primus-ext: {cluster: h800, nodes: 256, schedule: dualpipev}")
    recipe = tmp_path / "deepseek_v3-dualpipev.yaml"
    recipe.write_text(text)
    for sub in ("models", "modules"):
        (tmp_path / sub).symlink_to(Path("recipes", sub).resolve())
    code = main(["project", str(recipe), *REPORT[:7], "pipeline_model_parallel_layout=Et*2|(t*2|)*29,t|mL",
                 "decoder_first_pipeline_num_layers=null", "decoder_last_pipeline_num_layers=null", "--json", "-"])
    doc = json.loads(capsys.readouterr().out)
    assert code in (0, 3, 4)
    assert doc["inputs"]["execution"]["pipeline_schedule"] == "dualpipev"
    assert any("# primus-ext.schedule dualpipev" in w for w in doc["warnings"])


def test_a_schedule_rule_failure_is_named(capsys):
    # DualPipe needs an even micro-batch count of at least 2*PP: 15 360 / 128 / 2 = 60 is fine, GBS 3 968 gives 31
    assert main(["project", RECIPE, *REPORT, "global_batch_size=3968", *TARGET, "--schedule", "dualpipe"]) == 2
    err = capsys.readouterr().err
    assert "dualpipe" in err and "micro-batches" in err
    assert main(["project", RECIPE, *TARGET, "--schedule", "dualpipes"]) == 2
    err = capsys.readouterr().err
    assert "--schedule" in err and "unknown pipeline schedule" in err and "dualpipev" in err


def test_compare_takes_a_schedule_for_one_side(capsys):
    side = " ".join([RECIPE, *REPORT, *MEMORY])
    assert main(["compare", side, side, *TARGET, "--schedule", "1f1b", "--schedule-b", "dualpipe"]) == 0
    out = capsys.readouterr().out
    assert "tokens/s/GPU" in out or "tok/s" in out


@pytest.mark.parametrize("name", ["h800"])
def test_h800_is_an_h100_with_a_slower_nvlink(name):
    from primus_ext.hardware import load_gpu

    h800, h100 = load_gpu(name), load_gpu("h100")
    assert h800.bf16_dense_tflops == h100.bf16_dense_tflops and h800.hbm_bytes == h100.hbm_bytes
    assert h800.scaleup_bandwidth_bytes_per_s == pytest.approx(200e9)  # 400 GB/s bidirectional
    assert h800.nic_bandwidth_bytes_per_s == pytest.approx(50e9)  # 400 Gb/s IB per GPU (the report's 50 GB/s)
    assert h800.inherits_efficiency_from == "h100" and h800.efficiency.gemm_max == h100.efficiency.gemm_max
