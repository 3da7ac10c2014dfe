"""The memory table and its JSON (the result schema's memory block) carry the numbers of the ``Memory`` result
unchanged (in GiB)."""

from __future__ import annotations

import json

from primus_ext.hardware import load_system
from primus_ext.model.memory import estimate_memory
from primus_ext.report.memory_table import GIB, format_memory_table
from primus_ext.results.projection import memory_block
from primus_ext.specs import ExecutionSpec, ModelSpec

MODEL = ModelSpec(num_layers=8, hidden_size=2048, ffn_hidden_size=5632, num_attention_heads=16,
                  num_query_groups=4, kv_channels=128, vocab_size=32000)


def test_json_and_table_match_the_result():
    exe = ExecutionSpec(pipeline_model_parallel_size=2, data_parallel_size=4, global_batch_size=32,
                        seq_length=4096, use_distributed_optimizer=True)
    mem = estimate_memory(MODEL, exe, load_system("h100", 1))
    data = json.loads(json.dumps(memory_block(mem)))
    assert data["fits"] is mem.fits and len(data["stages"]) == 2
    for row, stage in zip(data["stages"], mem.stages, strict=True):
        assert abs(row["peak_memory_gib"] - stage.total_bytes / GIB) < 1e-3
        parts = row["params_gib"] + row["grads_gib"] + row["optimizer_gib"] + row["activations_gib"] + row["other_gib"]
        assert abs(parts - row["peak_memory_gib"]) < 5e-3
    text = format_memory_table(mem)
    assert f"{mem.peak_bytes / GIB:.2f} GiB on stage {mem.peak_stage.rank}" in text
    assert ("fits" if mem.fits else "DOES NOT FIT") in text
