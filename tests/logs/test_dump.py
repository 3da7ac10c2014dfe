"""The configuration dumps logs print (issue 53 part 6a): Megatron-LM's argument block, Megatron-Bridge's
``ConfigContainer`` YAML, NeMo 2's ``Resolved Arguments`` table, read into ``TrainingLog.run`` (a ``RunConfig``).
Synthetic fixtures (below) cover each format; the four real logs are checked against the hand-read
shared/validation/logs/index.csv when ../shared is present.

    python -m pytest -q tests/logs/test_dump.py
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from primus_ext.logs import RunConfig, read_log

LOGS = Path(__file__).resolve().parents[3] / "shared" / "validation" / "logs"
if not LOGS.is_dir():
    LOGS = Path("/work/shared/validation/logs")

ITERATIONS = [f" [2026-01-01 00:00:0{i}] iteration {i:8d}/{9:8d} | consumed samples: {i * 32:12d} | elapsed time "
              f"per iteration (ms): 500.0 | global batch size: {32:5d} | loss scale: 1.0 |" for i in range(1, 10)]

MEGATRON = ["------------------------ arguments ------------------------",
            "  bf16 ............................................ True",
            "  context_parallel_size ........................... 2",
            "  data_parallel_size .............................. 4",
            "  ffn_hidden_size ................................. 14336",
            "  fp8 ............................................. e4m3",
            "  global_batch_size ............................... 32",
            "  hidden_size ..................................... 4096",
            "  micro_batch_size ................................ 1",
            "  num_attention_heads ............................. 32",
            "  num_layers ...................................... 32",
            "  pipeline_model_parallel_size .................... 2",
            "  seq_length ...................................... 8192",
            "  tensor_model_parallel_size ...................... 2",
            "  world_size ...................................... 32",
            "-------------------- end of arguments ---------------------"]

BRIDGE = ["------- Task Configuration -------", "_target_: megatron.bridge.training.config.ConfigContainer",
          "dataset:", "  sequence_length: 1024", "mixed_precision:", "  bf16: true", "  fp8: null", "model:",
          "  ffn_hidden_size: 8192", "  fp8: null", "  hidden_size: 2048", "  num_attention_heads: 32",
          "  num_layers: 16", "  pipeline_model_parallel_size: 1", "  seq_length: 131072",
          "  tensor_model_parallel_size: 2", "optimizer:", "  bf16: true", "train:", "  global_batch_size: 512",
          "  micro_batch_size: 1", "----------------------------------"]

NEMO = ["┃ Argument Name        ┃ Resolved Value                                               ┃",
        "│ data                 │ MockDataModule(seq_length=128, micro_batch_size=1,           │",
        "│                      │ global_batch_size=64)                                        │",
        "│ model                │ LlamaModel(                                                  │",
        "│                      │     num_layers=1,                                            │",
        "│                      │     hidden_size=256,                                         │",
        "│                      │     num_attention_heads=32,                                  │",
        "│                      │     ffn_hidden_size=512,                                     │",
        "│                      │   devices='2',                                               │",
        "│                      │   num_nodes=2,                                               │",
        "│                      │     precision='bf16-mixed',                                  │",
        "│                      │     tensor_model_parallel_size=2,                            │",
        "│                      │     pipeline_model_parallel_size=1,                          │",
        "│                      │     context_parallel_size=1,                                 │"]


def test_megatron_argument_dump():
    run = read_log("\n".join([*MEGATRON, *ITERATIONS])).run
    assert run == RunConfig(num_layers=32, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=14336,
                            precision="fp8", seq_length=8192, micro_batch_size=1, global_batch_size=32,
                            tensor_parallel=2, pipeline_parallel=2, context_parallel=2, expert_parallel=None,
                            data_parallel=4, world_size=32)


def test_bridge_yaml_dump_the_dataset_sequence_and_the_microbatch_count():
    """The trained sequence is the dataset's (1024), not the model's maximum (131072); the world size from the
    global batch over micro-batch x micro-batches per step (512 / (1 x 32) = 16 data-parallel x TP 2)."""
    text = ["INFO:megatron.core.num_microbatches_calculator:setting number of microbatches to constant 32", *BRIDGE,
            *ITERATIONS]
    run = read_log("\n".join(text)).run
    assert (run.seq_length, run.precision, run.num_layers, run.hidden_size, run.ffn_hidden_size) == (
        1024, "bf16", 16, 2048, 8192)
    assert (run.global_batch_size, run.micro_batch_size, run.tensor_parallel, run.data_parallel,
            run.world_size) == (512, 1, 2, 16, 32)


def test_bridge_dump_without_its_closing_rule_does_not_swallow_the_iterations():
    log = read_log("\n".join([*BRIDGE[:-1], *ITERATIONS]))
    assert len(log.iterations) == 9 and log.run.num_layers == 16


def test_nemo_resolved_arguments_table():
    run = read_log("\n".join([*NEMO, "Training epoch 0, iteration 5/19 | global_batch_size: 64 | "
                                     "train_step_timing in s: 0.45", "Training epoch 0, iteration 6/19 | "
                                     "global_batch_size: 64 | train_step_timing in s: 0.45"])).run
    assert run == RunConfig(num_layers=1, hidden_size=256, num_attention_heads=32, ffn_hidden_size=512,
                            precision="bf16", seq_length=128, micro_batch_size=1, global_batch_size=64,
                            tensor_parallel=2, pipeline_parallel=1, context_parallel=1, data_parallel=2,
                            world_size=4)


def test_world_size_lines_outside_a_dump():
    text = ["[Primus:Env] rank=0, world_size=16, local_rank=0, master=127.0.0.1:1",
            "  tensor_model_parallel_size ...... 4", *ITERATIONS]
    assert read_log("\n".join(text)).run.world_size == 16  # not a dump line: the Primus env line
    assert read_log("\n".join(["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8", *ITERATIONS])
                    ).run.world_size == 8


def _index() -> list[dict[str, str]]:
    with (LOGS / "index.csv").open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.skipif(not (LOGS / "index.csv").is_file(), reason="../shared/validation/logs absent")
@pytest.mark.parametrize("row", _index() if (LOGS / "index.csv").is_file() else [], ids=lambda r: r["file"])
def test_real_logs_against_the_hand_read_index(row):
    run = read_log(LOGS / row["file"]).run
    model = row["model"]  # "L16 h2048 ffn8192 heads32"
    import re

    def arch(key: str) -> int | None:
        m = re.search(rf"\b{key}(\d+)", model)
        return int(m.group(1)) if m else None

    assert run.num_layers == arch("L") and run.hidden_size == arch("h")
    assert run.num_attention_heads == arch("heads")
    if arch("ffn") is not None and "moe" not in model.lower() and "experts" not in model:
        assert run.ffn_hidden_size == arch("ffn")
    assert run.precision == ("fp8" if row["precision"].startswith("fp8") else "bf16")
    assert (run.seq_length, run.micro_batch_size, run.global_batch_size) == (
        int(row["seq_len"]), int(row["mbs"]), int(row["gbs"]))
    assert (run.tensor_parallel, run.pipeline_parallel, run.context_parallel) == (
        int(row["tp"]), int(row["pp"]), int(row["cp"]))
    if row["ep"].isdigit() and run.expert_parallel is not None:
        assert run.expert_parallel == int(row["ep"])
    assert run.world_size == int(row["num_gpus"])
    assert run.data_parallel == int(row["num_gpus"]) // (int(row["tp"]) * int(row["pp"]) * int(row["cp"]))
