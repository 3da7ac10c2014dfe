"""``primus-ext train``: --projection-only exit codes 0/2/3 on tiny flat Megatron recipes, the
experiment directory of a Primus recipe, delegation discovery, and one built-in short run."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest

from primus_ext.cli import main
from primus_ext.launcher.delegate import find_launcher, launch_command

TINY = """\
num_layers: 4
hidden_size: 1024
ffn_hidden_size: 2816
num_attention_heads: 16
group_query_attention: true
num_query_groups: 4
seq_length: 2048
max_position_embeddings: 2048
micro_batch_size: 1
global_batch_size: 16
vocab_size: 32000
bf16: true
swiglu: true
normalization: RMSNorm
add_bias_linear: false
position_embedding_type: rope
untie_embeddings_and_output_weights: true
tensor_model_parallel_size: 2
train_iters: 3
"""

# 80 layers x (attention 4*8192^2*(1+8/64)/2 + MLP 3*8192*28672) ~ 69e9 parameters: bf16 weights
# alone are 138 GB on every GPU of an 8 x H100 (80 GB) node without TP/PP/sharding
HUGE = TINY.replace("num_layers: 4", "num_layers: 80").replace("hidden_size: 1024", "hidden_size: 8192") \
    .replace("ffn_hidden_size: 2816", "ffn_hidden_size: 28672").replace("num_attention_heads: 16",
                                                                       "num_attention_heads: 64") \
    .replace("num_query_groups: 4", "num_query_groups: 8").replace("tensor_model_parallel_size: 2",
                                                                   "tensor_model_parallel_size: 1")


def _recipe(tmp_path: Path, text: str, name: str = "tiny.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _project(tmp_path: Path, recipe: Path, *extra: str) -> int:
    return main(["train", "--config", str(recipe), *extra, "--cluster", "h100", "--nodes", "1",
                 "--projection-only", "--analytic", "--workspace", str(tmp_path / "ws")])


def test_exit_0_writes_json_html_png(tmp_path: Path, capsys):
    assert _project(tmp_path, _recipe(tmp_path, TINY)) == 0
    doc = json.loads((tmp_path / "ws" / "projection.json").read_text())
    assert doc["fits"] is True and doc["inputs"]["execution"]["data_parallel_size"] == 4  # 8 GPUs / TP2
    assert (tmp_path / "ws" / "projection.html").read_text().count("<svg") == 0  # drawn by the script
    assert (tmp_path / "ws" / "projection_timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert "tokens/s/GPU" in capsys.readouterr().out


def test_exit_2_lists_every_reason(tmp_path: Path, capsys):
    bad = TINY.replace("tensor_model_parallel_size: 2", "tensor_model_parallel_size: 3") \
        .replace("global_batch_size: 16", "global_batch_size: 5")
    assert _project(tmp_path, _recipe(tmp_path, bad)) == 2
    err = capsys.readouterr().err
    assert "tensor_model_parallel_size" in err or "num_attention_heads" in err
    assert not (tmp_path / "ws" / "projection.json").exists()


def test_exit_3_when_projected_out_of_memory(tmp_path: Path, capsys):
    assert _project(tmp_path, _recipe(tmp_path, HUGE)) == 3
    assert "out of memory: pipeline stage 0" in capsys.readouterr().err
    doc = json.loads((tmp_path / "ws" / "projection.json").read_text())
    assert doc["fits"] is False and doc["memory"]["peak_memory_gib"] > 138e9 / 2**30


def test_overrides_turn_the_oom_into_a_fit(tmp_path: Path):
    # TP4 x PP8 over 4 nodes: ~69e9 / 32 = 2.2e9 params per GPU x 18 B (bf16 weight, fp32 grad, Adam fp32
    # master + 2 moments) = 39 GB < 80 GB
    code = main(["train", "--config", str(_recipe(tmp_path, HUGE)), "tensor_model_parallel_size=4",
                 "pipeline_model_parallel_size=8", "--cluster", "h100", "--nodes", "4", "--projection-only",
                 "--analytic", "--workspace", str(tmp_path / "ws")])
    assert code == 0
    doc = json.loads((tmp_path / "ws" / "projection.json").read_text())
    assert doc["fits"] is True and 2.2e9 * 18 / 2**30 < doc["memory"]["peak_memory_gib"] < 80


def test_primus_recipe_reports_into_its_experiment_directory(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    body = "".join(f"      {line}\n" for line in TINY.splitlines())
    exp = (f"work_group: team\nuser_name: bob\nexp_name: e1\nworkspace: ./space\nmodules:\n  pre_trainer:\n"
           f"    framework: megatron\n    overrides:\n{body}")
    recipe = _recipe(tmp_path, exp, "exp.yaml")
    code = main(["train", "--config", str(recipe), "--cluster", "h100", "--nodes", "1", "--projection-only",
                 "--analytic"])
    assert code == 0 and (tmp_path / "space" / "team" / "bob" / "e1" / "projection.json").exists()


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_delegation_discovery_says_which(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    assert find_launcher(env={"PATH": str(bin_dir)}) is None or find_launcher(env={"PATH": str(bin_dir)}).kind \
        == "primus"  # an importable primus package would still be found
    mlm = tmp_path / "Megatron-LM"
    mlm.mkdir()
    _executable(mlm / "pretrain_gpt.py")
    found = find_launcher("megatron", env={"PATH": str(bin_dir), "MEGATRON_LM_PATH": str(mlm)})
    assert found is not None and found.kind == "megatron-lm" and "MEGATRON_LM_PATH" in found.how
    _executable(bin_dir / "primus-cli")
    found = find_launcher(env={"PATH": str(bin_dir)})
    assert found is not None and found.kind == "primus" and str(bin_dir) in found.how


def test_megatron_command_line(tmp_path: Path):
    from primus_ext.launcher.delegate import Launcher
    from primus_ext.recipe import load_recipe

    recipe = load_recipe(_recipe(tmp_path, TINY), cluster="h100", nodes=1)
    cmd = launch_command(Launcher(kind="megatron-lm", how="test", entry=("/x/pretrain_gpt.py",)), recipe, nproc=8)
    argv = list(cmd.argv)
    assert "--nproc-per-node=8" in argv and "/x/pretrain_gpt.py" in argv
    assert argv[argv.index("--hidden-size") + 1] == "1024" and "--swiglu" in argv and "--bf16" in argv
    assert argv.count("--mock-data") == 1
    # Megatron-LM's own flags (launcher.megatron_cli): a key without one is left out and listed
    other = dataclasses.replace(recipe, megatron_args={**recipe.megatron_args, "fp8": "hybrid",
                                                       "enable_primus_turbo": True})
    cmd = launch_command(Launcher(kind="megatron-lm", how="test", entry=("/x/pretrain_gpt.py",)), other, nproc=8)
    assert "--fp8-format" in cmd.argv and "--fp8" not in cmd.argv and "--enable-primus-turbo" not in cmd.argv
    assert [d.key for d in cmd.dropped] == ["enable_primus_turbo"]


def test_launch_refuses_when_nothing_is_installed(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("MEGATRON_LM_PATH", raising=False)
    if find_launcher() is not None:
        pytest.skip("an upstream launcher is installed here")
    code = main(["train", "--config", str(_recipe(tmp_path, TINY)), "--cluster", "h100", "--nodes", "1"])
    assert code == 2 and "--train-iters" in capsys.readouterr().err


@pytest.mark.slow
def test_builtin_short_run_on_two_cpu_ranks(tmp_path: Path, capsys):
    small = TINY.replace("global_batch_size: 16", "global_batch_size: 2")
    code = main(["train", "--config", str(_recipe(tmp_path, small)), "--cluster", "cpu", "--nodes", "1",
                 "--device", "cpu", "--train-iters", "2", "--scale", "0.125", "--nproc", "2",
                 "seq_length=512", "num_layers=2", "vocab_size=4096"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    # scale 1/8: 16 heads -> 2 (multiple of TP x GQA ratio = 8 -> 8), seq 512 -> 64; TP2 x DP1 on 2 ranks
    assert result["tp"] == 2 and result["dp"] == 1 and result["world_size"] == 2
    assert len(result["step_times_s"]) == 2 and all(t > 0 for t in result["step_times_s"])
    assert os.path.basename(result["schedule"]) == "forward_backward_no_pipelining"


def test_auto_tune_writes_a_tuned_copy_and_projects_it(tmp_path: Path, capsys):
    recipe = _recipe(tmp_path, TINY)
    assert _project(tmp_path, recipe) == 0
    baseline = json.loads((tmp_path / "ws" / "projection.json").read_text())
    code = main(["train", "--config", str(recipe), "--cluster", "h100", "--nodes", "1", "--auto-tune",
                 "--strategy", "exhaustive", "--budget", "30", "--analytic", "--projection-only",
                 "--workspace", str(tmp_path / "tuned")])
    assert code == 0
    tuned_file = tmp_path / "tiny.tuned.yaml"
    assert tuned_file.exists() and recipe.read_text() == TINY  # the original is untouched without --apply
    tuned = json.loads((tmp_path / "tuned" / "projection.json").read_text())
    assert tuned["recipe"] == str(tuned_file)
    assert tuned["tokens_per_s_per_gpu"] >= baseline["tokens_per_s_per_gpu"]


RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_every_shipped_recipe_projects(recipe: Path, tmp_path: Path, capsys):
    code = main(["train", "--config", str(recipe), "--projection-only", "--analytic", "--workspace", str(tmp_path)])
    doc = json.loads((tmp_path / "projection.json").read_text())
    # 3 exactly when the memory model says it does not fit, 4 when over capacity by no more than its error
    assert code == {"out of memory": 3, "within the model's error": 4}.get(doc["memory"]["verdict"], 0)
    assert doc["tokens_per_s_per_gpu"] > 0 and doc["recipe"] == str(recipe)
    assert "tokens/s/GPU" in capsys.readouterr().out


def test_builtin_refuses_a_model_this_machine_cannot_hold(tmp_path: Path, capsys):
    # HUGE: ~69e9 params on each of 2 CPU ranks x 18 B >> the cpu profile's RAM
    code = main(["train", "--config", str(_recipe(tmp_path, HUGE)), "global_batch_size=2", "--cluster", "cpu",
                 "--nodes", "1", "--device", "cpu", "--train-iters", "2", "--nproc", "2"])
    assert code == 2 and "--scale" in capsys.readouterr().err


def test_strict_without_projection_only_is_refused(tmp_path: Path, capsys):
    """``--strict`` sets the gate's exit code (4 inside the memory margin): without ``--projection-only`` nothing is
    gated, and a launch is not silently ungated."""
    assert main(["train", "--config", str(_recipe(tmp_path, TINY)), "--strict", "--cluster", "h100"]) == 2
    assert "--projection-only" in capsys.readouterr().err
