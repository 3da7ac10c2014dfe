"""FP4 keys as megatron-core 0.16 and Primus read them: ``fp4: e2m1``, ``fp4_recipe`` (nvfp4 / Primus's mxfp4),
``fp4_param``; refused beside fp8 and on GPUs without FP4 tensor cores, as the frameworks refuse them."""

from __future__ import annotations

import pytest
from recipe_data import BASE

from primus_ext.hardware import load_system
from primus_ext.recipe import resolve_specs
from primus_ext.recipe.key_effects import unmodelled_keys

FP4 = {**BASE, "fp4": "e2m1"}


def _resolve(args, cluster):
    return resolve_specs(args, load_system(cluster, 1), name="t")


def test_nvfp4_on_blackwell_resolves_with_its_recipe_and_fp4_param():
    _, e, problems = _resolve({**FP4, "fp4_param": True}, "b200")
    assert not problems
    assert (e.precision, e.fp4_recipe, e.fp4_param) == ("fp4", "nvfp4", True)


def test_primus_mxfp4_on_mi355x_resolves():
    # Primus examples/megatron/configs/MI355X/llama3.1_8B-MXFP4-pretrain.yaml: fp4: e2m1, fp4_recipe: mxfp4
    _, e, problems = _resolve({**FP4, "fp4_recipe": "mxfp4", "grad_reduce_in_bf16": True}, "mi355x")
    assert not problems
    assert (e.precision, e.fp4_recipe, e.fp4_param) == ("fp4", "mxfp4", False)


@pytest.mark.parametrize("cluster", ["h100", "h200", "mi300x"])
def test_fp4_on_a_gpu_without_fp4_is_refused_with_a_sentence(cluster):
    _, _, problems = _resolve(FP4, cluster)
    assert [p.path for p in problems] == ["fp4"]
    assert "has no FP4 tensor cores" in problems[0].message and "fp8" in problems[0].fix


def test_the_other_vendors_recipe_is_refused():
    _, _, problems = _resolve(FP4, "mi355x")  # nvfp4 is the default
    assert "use fp4_recipe: mxfp4" in problems[0].message
    _, _, problems = _resolve({**FP4, "fp4_recipe": "mxfp4"}, "b200")
    assert "use fp4_recipe: nvfp4" in problems[0].message


def test_fp4_beside_fp8_and_fp4_param_alone_are_refused_as_megatron_core_refuses_them():
    _, _, problems = _resolve({**FP4, "fp8": "hybrid"}, "b200")
    assert [p.path for p in problems] == ["fp4"] and "cannot be used simultaneously" in problems[0].message
    _, _, problems = _resolve({**BASE, "fp4_param": True}, "b200")
    assert [p.path for p in problems] == ["fp4_param"]
    _, _, problems = _resolve({**BASE, "fp4": "e3m2"}, "b200")
    assert "must be e2m1" in problems[0].message


def test_megatron_core_refuses_the_same_combinations():
    pytest.importorskip("megatron.core")
    from megatron.core.transformer.transformer_config import TransformerConfig

    kw = dict(num_layers=2, hidden_size=64, num_attention_heads=4)
    with pytest.raises(ValueError, match="fp4 and fp8 cannot be used simultaneously"):
        TransformerConfig(**kw, fp4="e2m1", fp8="hybrid")
    with pytest.raises(ValueError, match="fp4_param must be used together with fp4"):
        TransformerConfig(**kw, fp4_param=True)
    config = TransformerConfig(**kw, fp4="e2m1")
    assert config.fp4_recipe == "nvfp4" and not config.first_last_layers_bf16  # the defaults the projection prices


def test_edge_layers_in_bf16_are_named_as_not_modelled():
    warned = unmodelled_keys({"first_last_layers_bf16": True, "mxfp4_gradient_stochastic_rounding": True})
    assert {"first_last_layers_bf16", "mxfp4_gradient_stochastic_rounding"} <= set(warned)
