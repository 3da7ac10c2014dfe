"""What a log's configuration dump states, in calibration (issue 53 part 6b, 6c): a run on another GPU type or in
another precision never becomes a correction, not even with ``--force --follow-log``; the measured tokens/s is the
log's own batch and sequence over its step.

    python -m pytest -q tests/calibration/test_log_config.py
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from tiny import tiny_recipe

from primus_ext.calibration.compare import compare_log
from primus_ext.cli import main
from primus_ext.launcher.verify_top.local import megatron_log_lines
from primus_ext.logs import read_log
from primus_ext.recipe import load_recipe

SHARED = Path("/work/shared")
LLAMA = Path(__file__).resolve().parents[2] / "tests" / "support" / "recipes" / "primus_llama3.2_1b_fp8_mi355x.yaml"
BRIDGE_LOG = SHARED / "validation" / "logs" / "megatron-bridge-verdimrc-llama3.2-1b-8xH100.log"
STEPS = [0.9, 0.6] + [0.3] * 8


def _bridge_dump(*, seq: int, gbs: int, bf16: bool = True, fp8: str = "null") -> list[str]:
    """Megatron-Bridge's ``ConfigContainer`` as it prints it (the tiny model's shape)."""
    return ["------- Task Configuration -------", "_target_: megatron.bridge.training.config.ConfigContainer",
            "dataset:", f"  sequence_length: {seq}", "mixed_precision:", f"  bf16: {str(bf16).lower()}",
            f"  fp8: {fp8}", "model:", "  num_layers: 2", "  hidden_size: 256", "  ffn_hidden_size: 512",
            "  num_attention_heads: 4", "  tensor_model_parallel_size: 1", "  pipeline_model_parallel_size: 1",
            "  seq_length: 131072", "train:", f"  global_batch_size: {gbs}", "  micro_batch_size: 1",
            "----------------------------------"]


def _log(tmp_path: Path, head: list[str], *, gbs: int) -> Path:
    path = tmp_path / "run.log"
    path.write_text("\n".join([*head, *megatron_log_lines(STEPS, [], global_batch_size=gbs,
                                                          end=datetime(2026, 1, 1))]) + "\n")
    return path


def test_bf16_bridge_log_never_calibrates_an_fp8_recipe_even_forced(tmp_path: Path, capsys):
    recipe = tmp_path / "tiny_fp8.yaml"
    recipe.write_text(tiny_recipe(micro_batch_size=1, global_batch_size=64, tensor_model_parallel_size=1,
                                  fp8="hybrid"))
    log = _log(tmp_path, _bridge_dump(seq=128, gbs=64), gbs=64)
    store = tmp_path / "store.sqlite"
    code = main(["calibrate", str(recipe), str(log), "--cluster", "mi355x", "--nodes", "1", "--analytic",
                 "--store", str(store), "--force", "--follow-log"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "the run logged bf16" in err and "not even with --force" in err
    assert not store.exists()  # nothing stored


def test_h100_named_log_never_calibrates_an_mi355x_recipe_even_forced(tmp_path: Path, capsys):
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(tiny_recipe(micro_batch_size=1, global_batch_size=64, tensor_model_parallel_size=1))
    head = ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)", *_bridge_dump(seq=128, gbs=64)]
    log = _log(tmp_path, head, gbs=64)
    code = main(["calibrate", str(recipe), str(log), "--cluster", "mi355x", "--nodes", "1", "--analytic",
                 "--force", "--follow-log", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "GPU type" in err and "not even with --force" in err


@pytest.mark.skipif(not (BRIDGE_LOG.is_file() and (SHARED / "primus_configs").is_dir()),
                    reason="shared/validation logs or shared/primus_configs absent")
def test_the_issue_real_h100_bf16_log_against_the_mi355x_fp8_recipe(tmp_path: Path, capsys):
    code = main(["calibrate", str(LLAMA), str(BRIDGE_LOG), "--config-root", str(SHARED / "primus_configs"),
                 "--cluster", "mi355x", "--nodes", "1", "--force", "--follow-log", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "the run logged bf16" in err and "Traceback" not in err


def test_measured_tokens_use_the_logs_own_batch_and_sequence(tmp_path: Path):
    """The recipe says 64 x 128 tokens per step; the run logged 32 x 512: its tokens/s is the run's."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(tiny_recipe(micro_batch_size=1, global_batch_size=64, tensor_model_parallel_size=1))
    loaded = load_recipe(recipe, cluster="h100", nodes=1)
    log = read_log(_log(tmp_path, _bridge_dump(seq=512, gbs=32), gbs=32))
    assert (log.run.seq_length, log.run.global_batch_size) == (512, 32)
    c = compare_log(loaded, log, None)
    world = loaded.system.world_size
    assert c.measured.tokens_per_s_per_gpu == pytest.approx(32 * 512 / 0.3 / world)
    assert c.mismatches  # and the difference is still named (calibrate refuses it, or --follow-log follows it)
