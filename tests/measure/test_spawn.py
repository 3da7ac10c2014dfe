"""TP=2 over two spawned gloo ranks: megatron splits the weights itself, with real communication."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest
import torch.multiprocessing as mp
from archs import GQA

from primus_ext.measure.build import build_layer
from primus_ext.measure.runner import MeasureOptions, measure_many
from primus_ext.measure.shims import ParallelLayout, free_port, parallel_context
from primus_ext.model.rank_shape import RankShape

SPLIT = ("linear_qkv.weight", "linear_proj.weight", "linear_fc1.weight", "linear_fc2.weight")
DENSE = RankShape(kind="dense", arch=GQA, seq_length=64, micro_batch_size=1)
DENSE_TP2 = RankShape(kind="dense", arch=GQA, seq_length=64, micro_batch_size=1, tp=2, sequence_parallel=True)


def _names(rank: int, port: int, out: str) -> None:
    with parallel_context(ParallelLayout(tp=2, world=2), device="cpu", rank=rank, master_port=port):
        names = build_layer(DENSE_TP2, device="cpu", distributed=True).param_names
    with open(f"{out}.{rank}", "wb") as f:
        pickle.dump(names, f)


@pytest.mark.slow
def test_tp2_gloo_ranks_hold_half_of_the_split_weights(tmp_path, world1):
    one = build_layer(DENSE, device="cpu").param_names
    emulated = build_layer(DENSE_TP2, device="cpu").param_names  # one-rank world at per-rank sizes
    out = str(tmp_path / "names")
    mp.start_processes(_names, args=(free_port(), out), nprocs=2, join=True, start_method="spawn")
    for rank in (0, 1):
        with open(f"{out}.{rank}", "rb") as f:
            two = pickle.load(f)
        assert set(two) == set(one)
        for name, count in one.items():
            expected = count // 2 if name.endswith(SPLIT) else count
            assert two[name] == expected, name
        assert two == emulated  # the per-rank emulation builds exactly the rank's weights


@pytest.mark.slow
def test_measure_many_runs_tp2_on_real_ranks():
    (m,) = measure_many([DENSE_TP2], opts=MeasureOptions(warmup=1, reps=2))
    assert m.ok, m.error
    assert (m.mode, m.world) == ("distributed", 2)
    assert m.cost.fwd_ms > 0 and m.cost.bwd_ms > 0 and m.cost.saved_bytes > 0
    assert m.cost.source == "measured:cpu"


def test_one_rank_sequence_parallel_measurement_says_it_ran_unsplit(world1):
    """``--no-spawn`` (or TP beyond the node, or CP > 1) measures a TP=2 + SP shape in one rank: norms and
    residuals take the whole sequence, and the origin says so (its scale a number, not a tag to parse)."""

    from primus_ext.measure.runner import measure_one
    from primus_ext.model.costs import SP_UNSPLIT_TAG
    from primus_ext.model.memory import LOCAL, activation_bytes_per_layer

    shape = RankShape(kind="dense", arch=GQA, seq_length=128, micro_batch_size=1, tp=2, sequence_parallel=True)
    m = measure_one(shape, 0.5, world1, MeasureOptions(warmup=1, reps=2))  # as measure_many in a one-rank world
    assert m.ok, m.error
    assert m.mode == "per-rank" and m.cost.source == "measured:cpu@scale=0.5" + SP_UNSPLIT_TAG
    assert m.cost.origin.scale == 0.5 and m.cost.origin.sequence_unsplit and m.cost.origin.on_cpu
    unsplit = activation_bytes_per_layer(replace(m.shape, sequence_parallel=False), impl=LOCAL)
    assert m.cost.saved_bytes == pytest.approx(unsplit, rel=0.01)
