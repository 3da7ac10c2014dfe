"""Megatron's precision-aware optimizer arguments: read into the spec, megatron-core's refusals as problems."""

from __future__ import annotations

import pytest
from recipe_data import BASE

from primus_ext.hardware import load_system
from primus_ext.recipe import resolve_specs
from primus_ext.recipe.checks import check

NODE = load_system("mi300x", 1)


def test_primus_defaults_keep_the_plain_optimizer_and_the_dtypes_are_read():
    _, plain, problems = resolve_specs(BASE, NODE, name="t")
    assert not problems and not plain.use_precision_aware_optimizer and plain.exp_avg_dtype == "fp32"
    args = {**BASE, "use_distributed_optimizer": True, "use_precision_aware_optimizer": True,
            "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "fp8", "main_params_dtype": "fp16",
            "store_param_remainders": False, "main_grads_dtype": "bf16"}
    model, e, problems = resolve_specs(args, NODE, name="t")
    assert not problems and not check(model, e, NODE)
    assert (e.exp_avg_dtype, e.exp_avg_sq_dtype, e.main_params_dtype, e.store_param_remainders) == (
        "bf16", "fp8", "fp16", False)


@pytest.mark.parametrize("key", ["exp_avg_dtype", "main_grads_dtype", "main_params_dtype"])
def test_low_precision_without_the_precision_aware_optimizer_is_refused(key):
    value = {"main_grads_dtype": "bf16", "main_params_dtype": "fp16"}.get(key, "bf16")
    _, _, problems = resolve_specs({**BASE, key: value}, NODE, name="t")
    assert [p.path for p in problems] == [key] and "use_precision_aware_optimizer" in problems[0].fix


def test_the_precision_aware_optimizer_needs_the_distributed_one():
    model, e, problems = resolve_specs({**BASE, "use_precision_aware_optimizer": True}, NODE, name="t")
    assert not problems
    assert [p.path for p in check(model, e, NODE)] == ["use_precision_aware_optimizer"]


def test_bf16_main_grads_leave_the_gradient_buffer_in_bf16_unless_fp32_accumulation_is_asked():
    aware = {**BASE, "use_distributed_optimizer": True, "use_precision_aware_optimizer": True}
    assert not resolve_specs(aware, NODE, name="t")[1].grad_reduce_in_bf16
    assert resolve_specs({**aware, "main_grads_dtype": "bf16"}, NODE, name="t")[1].grad_reduce_in_bf16
    forced = {**aware, "main_grads_dtype": "bf16", "accumulate_allreduce_grads_in_fp32": True}
    assert not resolve_specs(forced, NODE, name="t")[1].grad_reduce_in_bf16


def test_the_precision_aware_optimizer_is_adams():
    args = {**BASE, "use_distributed_optimizer": True, "use_precision_aware_optimizer": True, "optimizer": "sgd"}
    assert [p.path for p in resolve_specs(args, NODE, name="t")[2]] == ["use_precision_aware_optimizer"]
