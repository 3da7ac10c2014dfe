"""torchtitan's op-level selective activation checkpointing (``selective_ac_option = "op"``) on a real torch
Llama block: the ops torch dispatches, filtered by torchtitan's policy, give the bytes the formula counts.

torchtitan (parallelize_llama ``_apply_ac_to_transformer_block``) saves the outputs of the ops in its save
list (``aten.mm``, the flash / efficient SDPA kernels, ``reduce_scatter_tensor``, ``aten.max``) except every
second ``aten.mm``; everything else in the block is recomputed, and the checkpoint keeps its input. Here the
block is torchtitan's Llama layer in plain torch (attention wq/wk/wv/wo with GQA and SDPA, feed-forward
w2(silu(w1 x) * w3 x), RMSNorm), run under a dispatch-logging mode on CPU (where SDPA dispatches the CPU
flash kernel, the stand-in for the CUDA one in the save list).
"""

from __future__ import annotations

import pytest

from primus_ext.model.layers import rank_shapes
from primus_ext.model.memory.activations import op_sac_saved_bytes
from primus_ext.model.memory.saved import activation_bytes_per_layer
from primus_ext.specs import ExecutionSpec, ModelSpec

torch = pytest.importorskip("torch")


def _block_saved_bytes(h: int, heads: int, groups: int, ffn: int, b: int, s: int) -> int:
    from torch import nn
    from torch.utils._python_dispatch import TorchDispatchMode

    d = h // heads
    dt = torch.bfloat16
    wq, wk, wv, wo = (nn.Linear(h, heads * d, bias=False), nn.Linear(h, groups * d, bias=False),
                      nn.Linear(h, groups * d, bias=False), nn.Linear(heads * d, h, bias=False))
    w1, w2, w3 = nn.Linear(h, ffn, bias=False), nn.Linear(ffn, h, bias=False), nn.Linear(h, ffn, bias=False)
    for m in (wq, wk, wv, wo, w1, w2, w3):
        m.to(dt)
    norm1, norm2 = nn.RMSNorm(h).to(dt), nn.RMSNorm(h).to(dt)

    def block(x):
        y = norm1(x)
        q = wq(y).view(b, s, heads, d).transpose(1, 2)
        k = wk(y).view(b, s, groups, d).transpose(1, 2).repeat_interleave(heads // groups, dim=1)
        v = wv(y).view(b, s, groups, d).transpose(1, 2).repeat_interleave(heads // groups, dim=1)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + wo(o.transpose(1, 2).reshape(b, s, heads * d))
        y = norm2(x)
        return x + w2(torch.nn.functional.silu(w1(y)) * w3(y))

    log = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            log.append((func, out))
            return out

    x = torch.randn(b, s, h, dtype=dt, requires_grad=True)
    with Log():
        block(x)
    aten = torch.ops.aten
    save_list = {aten.mm.default, aten._scaled_dot_product_flash_attention_for_cpu.default,
                 aten._scaled_dot_product_flash_attention.default, aten._scaled_dot_product_efficient_attention.default,
                 aten.max.default}
    saved, mm_count = x.numel() * x.element_size(), 0  # the checkpoint's input
    for func, out in log:
        if func == aten.mm.default:
            mm_count += 1
        if func in save_list and not (func == aten.mm.default and mm_count % 2 == 0):
            outs = out if isinstance(out, (tuple, list)) else (out,)
            saved += sum(t.numel() * t.element_size() for t in outs if isinstance(t, torch.Tensor))
    assert mm_count == 7
    return saved


@pytest.mark.parametrize(("h", "heads", "groups", "ffn", "b", "s"), [(256, 8, 2, 704, 2, 64), (128, 4, 4, 384, 1, 96)])
def test_op_sac_formula_matches_the_policy_on_a_torch_block(h, heads, groups, ffn, b, s):
    model = ModelSpec(name="m", num_layers=2, hidden_size=h, ffn_hidden_size=ffn, num_attention_heads=heads,
                      num_query_groups=groups, kv_channels=h // heads, vocab_size=1024, activation="swiglu")
    e = ExecutionSpec(micro_batch_size=b, seq_length=s, recompute_granularity="selective", selective_ac_option="op")
    assert op_sac_saved_bytes(rank_shapes(model, e)["dense"]) == _block_saved_bytes(h, heads, groups, ffn, b, s)


def test_memory_model_keeps_op_sac_bytes_per_dense_layer():
    from primus_ext.hardware import load_system
    from primus_ext.model.memory import estimate_memory, peak_bytes

    model = ModelSpec(name="m", num_layers=4, hidden_size=1024, ffn_hidden_size=2816, num_attention_heads=16,
                      num_query_groups=4, kv_channels=64, vocab_size=32000, activation="swiglu")
    system = load_system("h100", 1)
    base = dict(micro_batch_size=2, seq_length=2048, data_parallel_size=8, global_batch_size=16,
                recompute_granularity="selective", fsdp="torch_fsdp2")
    op, modules = ExecutionSpec(**base, selective_ac_option="op"), ExecutionSpec(**base)
    layer_op = op_sac_saved_bytes(rank_shapes(model, op)["dense"])
    layer_modules = activation_bytes_per_layer(rank_shapes(model, modules)["dense"])
    a, b = estimate_memory(model, op, system).stages[0], estimate_memory(model, modules, system).stages[0]
    assert b.activations_bytes - a.activations_bytes == pytest.approx(4 * (layer_modules - layer_op))
    assert peak_bytes(model, op) == estimate_memory(model, op, system).peak_bytes
