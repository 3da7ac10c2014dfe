"""Issue 56, part 4: numbers at their bound cost seconds, not minutes, and past it are refused before any work.
``tune --budget 10000000`` ran unbounded; ``--nodes 100000`` with 100 000 layers spent 68 CPU-s in the layout of each
candidate split (one layer at a time to the least loaded chunk) before refusing the pins."""

from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path

import pytest

from primus_ext.argtypes import MAX_BUDGET, MAX_NODE_FLAG
from primus_ext.cli import main
from primus_ext.recipe.node_count import MAX_NODES
from primus_ext.tune.splits import _least_loaded_fill, balanced_layout

BIG = ("tensor_model_parallel_size: 1\npipeline_model_parallel_size: 1\nnum_layers: 100000\nhidden_size: 1024\n"
       "ffn_hidden_size: 4096\nnum_attention_heads: 16\nvocab_size: 32000\nseq_length: 2048\nmicro_batch_size: 1\n"
       "global_batch_size: 64\n")


def _one_by_one(load: list[float], layers: int) -> list[int]:
    """The fill as it was written: each layer to the least loaded chunk, lowest index on ties."""
    counts = [0] * len(load)
    for _ in range(layers):
        i = min(range(len(load)), key=lambda c: (load[c], c))
        load[i] += 1
        counts[i] += 1
    return counts


def test_the_fill_in_rounds_gives_each_chunk_what_one_by_one_gave() -> None:
    rng = random.Random(56)
    for _ in range(3000):
        chunks, layers = rng.randint(1, 12), rng.randint(0, 80)
        head = rng.choice([0.0, 0.5, 1.0, 2.37, 3.0, 5.0, 7.25])
        load = [0.0] * (chunks - 1) + [head]
        assert _least_loaded_fill(list(load), layers) == _one_by_one(list(load), layers), (chunks, layers, head)


def test_a_layout_of_100000_layers_takes_milliseconds(tiny) -> None:
    model = dataclasses.replace(tiny[0], num_layers=100_000)
    start = time.process_time()
    layout = balanced_layout(model, 50, 2, head=1.7)
    assert time.process_time() - start < 0.5  # 100 000 x 100 chunks one by one: ~7 CPU-s
    assert layout is not None and layout.count("|") == 99


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--budget", "10000000", f"--budget: must be a whole number from 1 to {MAX_BUDGET:,}"),
    ("--nodes", "100001", f"--nodes: must be a whole number from 1 to {MAX_NODES:,}"),
    ("--seed", "-1", "--seed: must be a whole number from 0 to"),
    ("--top", "1e9", "--top: must be a whole number from 0 to"),
])
def test_a_flag_past_its_bound_is_refused_before_any_work(capsys: pytest.CaptureFixture[str], flag: str, value: str,
                                                         said: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["tune", "no-such-recipe.yaml", flag, value])
    assert exit_.value.code == 2 and said in capsys.readouterr().err


def test_the_node_flag_bound_is_the_recipes() -> None:
    assert MAX_NODE_FLAG == MAX_NODES


def test_pins_no_configuration_meets_at_100000_nodes_and_layers_are_refused_in_seconds(tmp_path: Path) -> None:
    recipe = tmp_path / "big.yaml"
    recipe.write_text(BIG)
    start = time.process_time()
    code = main(["tune", str(recipe), "--cluster", "h100", "--nodes", "100000", "--pin", "tp=8", "--budget", "5",
                 "--no-regret"])
    assert code == 2 and time.process_time() - start < 5.0  # 12 CPU-s before (mbs=3: 67)
