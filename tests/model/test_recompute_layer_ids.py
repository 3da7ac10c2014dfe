"""Primus's ``recompute_layer_ids``: full recompute of exactly the listed global layers, in time and memory.

Primus ``patches/recompute_layer_patches.py`` checkpoints the layers whose global index is listed (and nothing
else), with ``recompute_method`` unset; where the ids coincide with Megatron's block method (the first N
layers of every stage) the two must price the same.
"""

from __future__ import annotations

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.memory import estimate_memory, peak_bytes
from primus_ext.projection import evaluate
from primus_ext.specs import ExecutionSpec, ModelSpec

MODEL = ModelSpec(name="t", num_layers=8, hidden_size=2048, ffn_hidden_size=8192, num_attention_heads=16,
                  num_query_groups=4, kv_channels=128, vocab_size=32000)
SYSTEM = load_system("h100", 1)


def _ex(pp: int = 1, **kw) -> ExecutionSpec:
    return ExecutionSpec(pipeline_model_parallel_size=pp, data_parallel_size=8 // pp, micro_batch_size=1,
                         global_batch_size=64, seq_length=4096, use_distributed_optimizer=True, **kw)


def _stages(ex: ExecutionSpec) -> list[float]:
    return [s.total_bytes for s in estimate_memory(MODEL, ex, SYSTEM).stages]


@pytest.mark.parametrize("pp", [1, 2])
def test_ids_of_every_stages_first_layers_price_like_the_block_method(pp):
    per_stage = MODEL.num_layers // pp
    ids = tuple(s * per_stage + i for s in range(pp) for i in range(2))  # first two layers of every stage
    by_ids = _ex(pp, recompute_granularity="full", recompute_layer_ids=ids)
    block = _ex(pp, recompute_granularity="full", recompute_method="block", recompute_num_layers=2)
    assert _stages(by_ids) == pytest.approx(_stages(block))
    assert evaluate(MODEL, by_ids, SYSTEM).step_time_s == pytest.approx(evaluate(MODEL, block, SYSTEM).step_time_s)
    assert peak_bytes(MODEL, by_ids, SYSTEM) == pytest.approx(max(_stages(by_ids)))  # the pre-filter agrees


def test_ids_place_recompute_on_the_stages_that_hold_them():
    none = _ex(2)
    first_stage_only = _ex(2, recompute_granularity="full", recompute_layer_ids=(0, 1, 2, 3))
    stage0, stage1 = _stages(first_stage_only)
    assert stage0 < _stages(none)[0]  # its four layers keep only their inputs
    assert stage1 == pytest.approx(_stages(none)[1])  # nothing of stage 1 is listed
    t = evaluate(MODEL, first_stage_only, SYSTEM).stages
    plain = evaluate(MODEL, none, SYSTEM).stages
    assert t[0].bwd_s[0] > plain[0].bwd_s[0] and t[1].bwd_s[0] == pytest.approx(plain[1].bwd_s[0])


def test_more_ids_mean_less_memory_and_more_time():
    ids = [(), (0,), (0, 1, 2, 3), tuple(range(8))]
    runs = [_ex(recompute_granularity="full" if i else None, recompute_layer_ids=i) for i in ids]
    mem = [_stages(e)[0] for e in runs]
    time = [evaluate(MODEL, e, SYSTEM).step_time_s for e in runs]
    assert mem == sorted(mem, reverse=True) and len(set(mem)) == len(mem)
    assert time == sorted(time) and len(set(time)) == len(time)
