"""The upstream patches apply to fixtures shaped like their targets, and the patched launchers
short-circuit with --projection-only (exit 0 / 3) and train as before without it.

The fixtures (tests/launcher/upstream/) reproduce the parts of Megatron-LM's pretrain_gpt.py and
Primus's primus/cli/subcommands/train.py that the patches touch; no upstream checkout is available
here (patches/README.md). Each patched launcher runs in a subprocess with the fixtures on PYTHONPATH,
so the stand-in ``primus`` package never becomes importable in the test process.
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

SMALL = ["--num-layers", "4", "--hidden-size", "1024", "--ffn-hidden-size", "2816", "--num-attention-heads", "16",
         "--group-query-attention", "--num-query-groups", "4", "--seq-length", "2048", "--max-position-embeddings",
         "2048", "--micro-batch-size", "1", "--global-batch-size", "16", "--vocab-size", "32000", "--bf16",
         "--swiglu", "--normalization", "RMSNorm", "--disable-bias-linear", "--position-embedding-type", "rope",
         "--untie-embeddings-and-output-weights", "--tensor-model-parallel-size", "2"]

pytestmark = pytest.mark.skipif(PATCH is None, reason="GNU patch not installed")


def _apply(tmp_path: Path, patch_name: str) -> Path:
    work = tmp_path / "upstream"
    shutil.copytree(HERE / "upstream", work)
    done = subprocess.run([PATCH, "-p1", "--batch", "--forward", "-i", str(PATCHES / patch_name)], cwd=work,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED" not in done.stdout and "fuzz" not in done.stdout, done.stdout
    return work


def _env(work: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(work), str(HERE), str(ROOT)])}


def test_megatron_patch(tmp_path: Path):
    work = _apply(tmp_path, "megatron-lm-pretrain_gpt.patch")
    out = tmp_path / "out"
    base = [sys.executable, "pretrain_gpt.py", *SMALL]
    trained = subprocess.run(base, cwd=work, env=_env(work), capture_output=True, text=True, timeout=60)
    assert trained.returncode == 0 and "standin pretrain: trained" in trained.stdout, trained.stderr
    gated = subprocess.run([*base, "--projection-only", "--projection-cluster", "h100", "--projection-costs",
                            "analytic", "--projection-out", str(out)], cwd=work, env=_env(work),
                           capture_output=True, text=True, timeout=60)
    assert gated.returncode == 0, gated.stdout + gated.stderr
    assert "standin pretrain: trained" not in gated.stdout and "tokens/s/GPU" in gated.stdout
    assert json.loads((out / "projection.json").read_text())["inputs"]["model"]["hidden_size"] == 1024


PRIMUS_RUN = """
import argparse, sys
from primus.cli.subcommands import train
import primus.pretrain as launched
parser = argparse.ArgumentParser(prog="primus-cli")
train.register_subcommand(parser.add_subparsers(dest="command"))
args, overrides = parser.parse_known_args(sys.argv[1:])
args.func(args, overrides)
print("launched", launched.LAUNCHED)
"""

EXPERIMENT = """\
work_group: team
user_name: carol
exp_name: gate
workspace: {workspace}
modules:
  pre_trainer:
    framework: megatron
    overrides:
      num_layers: {layers}
      hidden_size: {hidden}
      ffn_hidden_size: {ffn}
      num_attention_heads: {heads}
      group_query_attention: true
      num_query_groups: 8
      seq_length: 4096
      max_position_embeddings: 4096
      micro_batch_size: 1
      global_batch_size: 16
      vocab_size: 32000
      bf16: true
      swiglu: true
      normalization: RMSNorm
      add_bias_linear: false
      position_embedding_type: rope
      untie_embeddings_and_output_weights: true
"""


def _primus(work: Path, config: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", PRIMUS_RUN, "train", "pretrain", "--config", str(config), *extra]
    return subprocess.run(cmd, cwd=work, env=_env(work), capture_output=True, text=True, timeout=60)


def test_primus_patch(tmp_path: Path):
    work = _apply(tmp_path, "primus-train-projection-only.patch")
    small = tmp_path / "small.yaml"
    small.write_text(EXPERIMENT.format(workspace=tmp_path / "ws", layers=4, hidden=1024, ffn=2816, heads=16))
    launched = _primus(work, small, "--train_iters", "5")
    assert launched.returncode == 0 and "launched [(" in launched.stdout, launched.stderr
    gated = _primus(work, small, "--projection-only", "--projection-cluster", "h100", "--projection-nodes", "1",
                    "--global_batch_size", "32")
    assert gated.returncode == 0, gated.stdout + gated.stderr
    assert "launched" not in gated.stdout
    doc = json.loads((tmp_path / "ws" / "team" / "carol" / "gate" / "projection.json").read_text())
    assert doc["inputs"]["execution"]["global_batch_size"] == 32
    # 80 x 8192 / 28672 with no model parallelism on 8 x H100: ~69e9 params per GPU -> exit 3
    huge = tmp_path / "huge.yaml"
    huge.write_text(EXPERIMENT.format(workspace=tmp_path / "ws2", layers=80, hidden=8192, ffn=28672, heads=64))
    oom = _primus(work, huge, "--projection-only", "--projection-cluster", "h100", "--projection-nodes", "1")
    assert oom.returncode == 3, oom.stdout + oom.stderr
    assert "out of memory" in oom.stdout
