"""``projection_only`` pieces: OOM reasons, and the full-size memory gate behind --scale (``session``'s rule)."""

from __future__ import annotations

from dataclasses import replace

from primus_ext.hardware import load_system
from primus_ext.launcher.projection_only import experiment_dir, oom_reasons
from primus_ext.model.memory import estimate_memory
from primus_ext.projection import project
from primus_ext.session import full_scale_memory
from primus_ext.specs import ExecutionSpec, ModelSpec

MODEL = ModelSpec(name="m", num_layers=8, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                  num_query_groups=8, kv_channels=128, vocab_size=128256)
EXE = ExecutionSpec(micro_batch_size=4, global_batch_size=32, data_parallel_size=8, seq_length=8192)


def test_scaled_saved_bytes_do_not_hide_an_oom():
    system = load_system("h100", 1)
    full = project(MODEL, EXE, system, None)
    assert not full.memory.fits and oom_reasons(full)  # 4 x 8k tokens of 8 layers, no recompute, 80 GB
    # what a projection over down-scaled measurements would carry: tiny activation bytes
    tiny = replace(full, memory=estimate_memory(MODEL, EXE, system,
                                                activation_bytes={"dense": 1, "embedding": 1, "output": 1}))
    assert tiny.memory.peak_bytes < full.memory.peak_bytes
    gated = full_scale_memory(tiny)
    assert gated.memory.peak_bytes == full.memory.peak_bytes and not gated.memory.fits
    assert oom_reasons(gated)[0].startswith("pipeline stage 0: projected peak")


def test_experiment_dir_follows_primus(tmp_path):
    exp = tmp_path / "e.yaml"
    exp.write_text("work_group: g\nuser_name: ${USER_X:u}\nexp_name: x\nworkspace: /w\nmodules: {}\n")
    assert str(experiment_dir(exp, env={})) == "/w/g/u/x"
    assert str(experiment_dir(exp, env={"USER_X": "v"})) == "/w/g/v/x"
    flat = tmp_path / "flat.yaml"
    flat.write_text("num_layers: 2\n")
    assert str(experiment_dir(flat, env={})) == "output/flat"
