"""The upstream patches apply without fuzz to fixtures shaped like their targets; the patched launchers
exit 0 / 2 / 3 with --projection-only, before any CUDA check or torch.distributed start, and behave
exactly as the unpatched ones without it.

The fixtures (tests/launcher/upstream/) reproduce only the structure of the lines each patch touches,
each saying which upstream file and versions it mirrors: ``megatron_pretrain/pretrain_gpt.py``
(Megatron-LM core_v0.13 .. v0.17, d3528a2: ``pretrain(..., extra_args_provider=...)``),
``megatron_parse/pretrain_gpt.py`` (core_v0.18 .. main: ``parse_and_validate_args(extra_args_provider=...)``)
over a stand-in ``megatron.training``, and a Primus tree (fd1eeab) whose ``primus/cli/main.py``
discovers the subcommands and passes unknown arguments on as overrides, like the real CLI. The real
upstream files are checked by ``benchmarks/upstream_gates.py``. Every launcher runs in a subprocess,
so the stand-in packages never become importable in the test process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
PATCHES = ROOT / "patches"
PATCH = shutil.which("patch")
TIMEOUT_S = 60

pytestmark = pytest.mark.skipif(PATCH is None, reason="GNU patch not installed")

MEGATRON = {  # fixture folder -> the patch for its calling convention
    "megatron_pretrain": "megatron-lm-pretrain_gpt.core_v0.13-v0.17.patch",
    "megatron_parse": "megatron-lm-pretrain_gpt.core_v0.18-main.patch",
}
PRIMUS_PATCH = "primus-train-projection-only.patch"

SMALL = ["--num-layers", "4", "--hidden-size", "1024", "--ffn-hidden-size", "2816", "--num-attention-heads", "16",
         "--group-query-attention", "--num-query-groups", "4", "--seq-length", "2048", "--max-position-embeddings",
         "2048", "--micro-batch-size", "1", "--global-batch-size", "16", "--vocab-size", "32000", "--bf16",
         "--swiglu", "--normalization", "RMSNorm", "--disable-bias-linear", "--position-embedding-type", "rope",
         "--untie-embeddings-and-output-weights", "--tensor-model-parallel-size", "2"]
# 80 x (4 x 8192^2 x 1.25 [GQA] + 3 x 8192 x 28672) ~ 69e9 parameters on every GPU of one 8 x H100 node
BIG = [*SMALL[:-2], "--num-layers", "80", "--hidden-size", "8192", "--ffn-hidden-size", "28672",
       "--num-attention-heads", "64"]
GATE = ["--projection-only", "--projection-cluster", "h100", "--projection-costs", "analytic"]


def _patch(folder: Path, patch_name: str) -> None:
    done = subprocess.run([PATCH, "-p1", "-F0", "--batch", "--forward", "-i", str(PATCHES / patch_name)],
                          cwd=folder, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED" not in done.stdout and "fuzz" not in done.stdout, done.stdout


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``before``: the fixtures as they are; ``after``: the same with every patch applied (-F0)."""
    base = tmp_path_factory.mktemp("upstream")
    before, after = base / "before", base / "after"
    shutil.copytree(HERE / "upstream", before)
    shutil.copytree(HERE / "upstream", after)
    for folder, patch_name in MEGATRON.items():
        _patch(after / folder, patch_name)
    _patch(after, PRIMUS_PATCH)
    return {"before": before, "after": after}


def _env(tree: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "NNODES", "PRIMUS_EXT_CLUSTER")}
    return {**env, "PYTHONPATH": os.pathsep.join([str(tree), str(HERE), str(ROOT)]), **extra}


def _megatron(tree: Path, folder: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "pretrain_gpt.py", *argv], cwd=tree / folder, env=_env(tree),
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


@pytest.mark.parametrize("folder", sorted(MEGATRON))
def test_megatron_without_the_flag_nothing_changes(trees: dict[str, Path], folder: str):
    before = _megatron(trees["before"], folder, *SMALL)
    after = _megatron(trees["after"], folder, *SMALL)
    assert before.returncode == 0 and "megatron: train 4 layers" in before.stdout, before.stderr
    assert (after.returncode, after.stdout, after.stderr) == (before.returncode, before.stdout, before.stderr)


@pytest.mark.parametrize("folder", sorted(MEGATRON))
def test_megatron_projection_only_exits_before_cuda_and_distributed(trees: dict[str, Path], folder: str,
                                                                     tmp_path: Path):
    gated = _megatron(trees["after"], folder, *SMALL, *GATE, "--projection-out", str(tmp_path))
    assert gated.returncode == 0, gated.stdout + gated.stderr
    assert "megatron:" not in gated.stdout  # no CUDA check, no validation, no torch.distributed, no training
    assert "tokens/s/GPU" in gated.stdout
    doc = json.loads((tmp_path / "projection.json").read_text())
    assert doc["inputs"]["model"]["hidden_size"] == 1024 and doc["inputs"]["model"]["num_query_groups"] == 4
    assert doc["inputs"]["execution"]["tensor_model_parallel_size"] == 2


@pytest.mark.parametrize("folder", sorted(MEGATRON))
def test_megatron_illegal_exits_2_and_oom_exits_3(trees: dict[str, Path], folder: str, tmp_path: Path):
    illegal = _megatron(trees["after"], folder, *SMALL[:-1], "3", *GATE, "--projection-out", str(tmp_path))
    assert illegal.returncode == 2, illegal.stdout + illegal.stderr
    assert "tensor_model_parallel_size" in illegal.stdout and "Traceback" not in illegal.stderr
    oom = _megatron(trees["after"], folder, *BIG, *GATE, "--projection-out", str(tmp_path))
    assert oom.returncode == 3, oom.stdout + oom.stderr
    assert "out of memory: pipeline stage 0" in oom.stdout and "megatron:" not in oom.stdout


EXPERIMENT = """\
work_group: team
user_name: carol
exp_name: {name}
workspace: {workspace}
modules:
  {module}:
    framework: megatron
    model: tiny_llama.yaml
    overrides:
      seq_length: 4096
      micro_batch_size: 1
      global_batch_size: 16
      bf16: true
{extra}"""
HUGE = "      num_layers: 80\n      hidden_size: 8192\n      ffn_hidden_size: 28672\n      num_attention_heads: 64\n"


def _experiment(tmp_path: Path, name: str, *, module: str = "pre_trainer", extra: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(EXPERIMENT.format(name=name, workspace=tmp_path / "ws", module=module, extra=extra))
    return path


def _primus(tree: Path, *argv: str, **env: str) -> subprocess.CompletedProcess:
    """``python primus/cli/main.py ARGV`` from the tree's root, as Primus's launch scripts run it."""
    return subprocess.run([sys.executable, "primus/cli/main.py", *argv], cwd=tree, env=_env(tree, **env),
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


@pytest.mark.parametrize("suite", ["pretrain", "posttrain"])
def test_primus_without_the_flag_nothing_changes(trees: dict[str, Path], suite: str, tmp_path: Path):
    config = str(_experiment(tmp_path, "plain"))
    before = _primus(trees["before"], "train", suite, "--config", config, "--train_iters", "5")
    after = _primus(trees["after"], "train", suite, "--config", config, "--train_iters", "5")
    assert before.returncode == 0 and "primus: run_train_module" in before.stdout, before.stderr
    assert (after.returncode, after.stdout, after.stderr) == (before.returncode, before.stdout, before.stderr)


def test_primus_projection_only_through_the_cli(trees: dict[str, Path], tmp_path: Path):
    config = _experiment(tmp_path, "gate")
    gated = _primus(trees["after"], "train", "pretrain", "--config", str(config), "--projection-only",
                    "--projection-cluster", "h100", "--projection-costs", "analytic", "--global_batch_size", "32",
                    NNODES="2")
    assert gated.returncode == 0, gated.stdout + gated.stderr
    assert "primus:" not in gated.stdout and "tokens/s/GPU" in gated.stdout
    doc = json.loads((tmp_path / "ws" / "team" / "carol" / "gate" / "projection.json").read_text())
    assert doc["inputs"]["execution"]["global_batch_size"] == 32  # the override, passed on as `--key value`
    assert doc["inputs"]["model"]["hidden_size"] == 1024  # the checkout's preset (primus/configs/models/megatron)
    assert doc["inputs"]["system"]["num_nodes"] == 2  # $NNODES: the recipe has no primus_ext block


def test_primus_exit_codes(trees: dict[str, Path], tmp_path: Path):
    config = str(_experiment(tmp_path, "codes"))
    gate = ["--projection-only", "--projection-cluster", "h100", "--projection-nodes", "1", "--projection-costs",
            "analytic"]
    illegal = _primus(trees["after"], "train", "pretrain", "--config", config, *gate,
                      "--tensor_model_parallel_size", "3")
    assert illegal.returncode == 2 and "tensor_model_parallel_size" in illegal.stdout, illegal.stdout + illegal.stderr
    huge = str(_experiment(tmp_path, "huge", extra=HUGE))
    oom = _primus(trees["after"], "train", "pretrain", "--config", huge, *gate)
    assert oom.returncode == 3 and "out of memory" in oom.stdout, oom.stdout + oom.stderr
    post = str(_experiment(tmp_path, "sft", module="post_trainer"))
    sft = _primus(trees["after"], "train", "posttrain", "--config", post, *gate)
    assert sft.returncode == 0 and "primus:" not in sft.stdout, sft.stdout + sft.stderr
    assert (tmp_path / "ws" / "team" / "carol" / "sft" / "projection.json").is_file()


@pytest.mark.parametrize(("option", "value", "says"), [("--projection-nodes", "0", "node count"),
                                                       ("--projection-cluster", "nosuch", "nosuch")])
def test_primus_bad_input_exits_2_without_traceback(trees: dict[str, Path], tmp_path: Path, option: str,
                                                    value: str, says: str):
    config = str(_experiment(tmp_path, "bad"))
    bad = _primus(trees["after"], "train", "pretrain", "--config", config, "--projection-only", option, value)
    assert bad.returncode == 2 and says in bad.stdout, bad.stdout + bad.stderr
    assert "Traceback" not in bad.stderr
