"""Adam's bytes per parameter under megatron-core's default and precision-aware optimizers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.memory import estimate_memory
from primus_ext.model.memory.optimizer_state import adam_state_bytes, adam_step_bytes, master_bytes
from primus_ext.specs import ExecutionSpec, ModelSpec

TINY = ModelSpec(name="tiny", num_layers=8, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
                 num_query_groups=16, kv_channels=64, vocab_size=32000, activation="gelu")
AWARE = ExecutionSpec(use_distributed_optimizer=True, use_precision_aware_optimizer=True)


@pytest.mark.parametrize(("changes", "state"), [
    ({"use_precision_aware_optimizer": False}, 12),  # fp32 master + m + v
    ({"use_precision_aware_optimizer": False, "precision": "fp32"}, 8),  # the parameters are the masters
    ({}, 2 + 8),  # distrib_optimizer.py: an int16 master remainder shard beside bf16 parameters
    ({"store_param_remainders": False}, 12),
    ({"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}, 2 + 4),
    ({"exp_avg_dtype": "fp8", "exp_avg_sq_dtype": "fp16", "main_params_dtype": "fp16"}, 2 + 3),
    # fp8 with a current-scaling recipe and fp32 masters: megatron-core keeps the fp32 master itself
    ({"precision": "fp8", "fp8_recipe": "mxfp8", "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}, 4 + 4),
    ({"precision": "fp8", "fp8_recipe": "delayed", "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}, 2 + 4),
    ({"precision": "fp16", "store_param_remainders": True}, 4 + 8),  # remainders need bf16 parameters
    # Megatron-FSDP keeps its own fp32 main weights; the moments still take their dtypes
    ({"fsdp": "megatron_fsdp", "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}, 4 + 4),
])
def test_state_bytes_follow_megatron_cores_optimizer(changes, state):
    assert adam_state_bytes(replace(AWARE, **changes)) == state


def test_step_traffic_is_thirty_bytes_by_default_and_shrinks_with_the_state():
    plain = replace(AWARE, use_precision_aware_optimizer=False)
    assert adam_step_bytes(plain) == 30  # read master, grad, m, v; write master, m, v; write bf16 copy
    assert adam_step_bytes(replace(plain, grad_reduce_in_bf16=True)) == 30  # upcast to fp32 main grads first
    low = replace(AWARE, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    # + the bf16 parameter read to rebuild the fp32 master from its remainder
    assert adam_step_bytes(low) == 2 * master_bytes(low) + 4 + 2 * 4 + 2 + 2 == 20
    assert adam_step_bytes(replace(low, grad_reduce_in_bf16=True)) == 18  # FusedAdam reads the bf16 buffer


def test_memory_optimizer_share_scales_with_the_state_bytes():
    system = load_system("h100", 1)
    base = ExecutionSpec(data_parallel_size=8, use_distributed_optimizer=True, global_batch_size=64, seq_length=2048)
    low = replace(base, use_precision_aware_optimizer=True, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    system = replace(system, num_nodes=1)
    plain, aware = (estimate_memory(TINY, e, system).stages[0] for e in (base, low))
    assert aware.optimizer_bytes == pytest.approx(plain.optimizer_bytes * 6 / 12)
    assert (aware.params_bytes, aware.grads_bytes) == (plain.params_bytes, plain.grads_bytes)
