"""torchtitan's keys in a recipe (``recipe.torchtitan_keys``): op-level selective AC, FSDP2's fp32 reduce, SDPA
attention, and torchao's rowwise FP8 recipe, each changing the spec field it names and only where it applies."""

from __future__ import annotations

from primus_ext.hardware import load_system
from primus_ext.recipe.catalogue import key_class
from primus_ext.recipe.resolve import resolve_all

NODE = load_system("h100", 1)
MODEL = dict(num_layers=4, hidden_size=1024, num_attention_heads=16, vocab_size=32000, seq_length=4096,
             micro_batch_size=1, bf16=True)


def _resolve(**keys):
    _, execution, problems, warnings = resolve_all({**MODEL, **keys}, NODE, environ={})
    return execution, problems, warnings


def test_torchtitan_keys_set_their_fields_under_fsdp2_and_selective_ac():
    execution, problems, _ = _resolve(use_torch_fsdp2=True, mixed_precision_reduce="float32", attn_type="sdpa",
                                      recompute_granularity="selective", selective_ac_option="op")
    assert not problems
    assert (execution.fsdp_reduce_dtype, execution.attention_kernel, execution.selective_ac_option) == (
        "fp32", "flash2", "op")


def test_without_them_a_recipe_keeps_megatron_semantics():
    execution, problems, _ = _resolve(use_torch_fsdp2=True, recompute_granularity="selective")
    assert not problems
    assert (execution.fsdp_reduce_dtype, execution.attention_kernel, execution.selective_ac_option) == (
        "param", "fused", "modules")


def test_the_keys_apply_only_where_they_mean_something():
    execution, problems, warnings = _resolve(mixed_precision_reduce="float32", selective_ac_option="op")
    assert not problems
    assert execution.fsdp_reduce_dtype == "param" and execution.selective_ac_option == "modules"  # no FSDP2, no AC
    assert any("mixed_precision_reduce" in w for w in warnings)


def test_a_wrong_value_is_a_problem_on_its_key():
    _, problems, _ = _resolve(attn_type="flex", selective_ac_option="2")
    assert {p.path for p in problems} == {"attn_type", "selective_ac_option"}


def test_rowwise_fp8_is_torchaos_recipe_and_the_keys_are_known():
    execution, problems, _ = _resolve(fp8="hybrid", fp8_recipe="rowwise")
    assert not problems and execution.fp8_recipe == "rowwise"
    assert all(key_class(k) for k in ("selective_ac_option", "mixed_precision_reduce", "attn_type"))
