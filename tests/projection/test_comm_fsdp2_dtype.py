"""torch FSDP2's gradient reduce-scatter: one dtype rule for time and memory (``memory.state.reduce_bytes``).

megatron-core's and Primus's FSDP2 wrappers set no MixedPrecisionPolicy, so gradients are reduced and kept in the
parameter dtype whatever ``grad_reduce_in_bf16`` says; torchtitan's and NeMo AutoModel's policy reduces in fp32.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.memory import estimate_memory
from primus_ext.projection import evaluate
from primus_ext.specs import ExecutionSpec, ModelSpec

MODEL = ModelSpec(name="t", num_layers=8, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                  num_query_groups=8, kv_channels=128, vocab_size=32000)
SYSTEM = load_system("h100", 2)
FSDP2 = ExecutionSpec(data_parallel_size=16, micro_batch_size=1, global_batch_size=64, seq_length=4096,
                      fsdp="torch_fsdp2", data_parallel_sharding_strategy="optim_grads_params")


def _fsdp_comm(e: ExecutionSpec) -> float:
    return evaluate(MODEL, e, SYSTEM).breakdown.comm("fsdp").total_s


def test_megatron_fsdp2_reduces_in_the_parameter_dtype_whatever_grad_reduce_in_bf16_says():
    plain, flagged = FSDP2, replace(FSDP2, grad_reduce_in_bf16=True)
    assert _fsdp_comm(plain) == pytest.approx(_fsdp_comm(flagged))
    grads = [estimate_memory(MODEL, e, SYSTEM).stages[0].grads_bytes for e in (plain, flagged)]
    assert grads[0] == pytest.approx(grads[1])


def test_an_fp32_reduce_policy_moves_twice_the_gradient_bytes():
    fp32 = replace(FSDP2, fsdp_reduce_dtype="fp32")
    assert _fsdp_comm(fp32) > _fsdp_comm(FSDP2)
