"""Every known key is modelled, refused, warned as not modelled, or of no effect; never silently ignored."""

from __future__ import annotations

import pytest
from recipe_data import BASE, MOE

from primus_ext.hardware import load_system
from primus_ext.model.kinds.registry import kind_keys
from primus_ext.recipe.catalogue import catalogued_keys, did_you_mean, key_class, known_keys
from primus_ext.recipe.catalogue_data import NO_EFFECT
from primus_ext.recipe.key_effects import (
    ARCHITECTURE_KEYS,
    ARCHITECTURE_PARAMS,
    UNMODELLED,
    architecture_problems,
    unmodelled_keys,
)
from primus_ext.recipe.releases import RELEASE_KEYS
from primus_ext.recipe.resolve import READ_KEYS, resolve_all

NODE = load_system("mi300x", 1)


def test_every_catalogued_key_has_exactly_one_class():
    classes = [READ_KEYS | kind_keys(), ARCHITECTURE_KEYS, ARCHITECTURE_PARAMS, frozenset(UNMODELLED), NO_EFFECT,
               frozenset(RELEASE_KEYS)]
    for i, a in enumerate(classes):
        for b in classes[i + 1:]:
            assert not a & b, sorted(a & b)
    assert not [k for k in catalogued_keys() if key_class(k) is None]
    assert known_keys() == frozenset().union(*classes)


def test_primus_logging_and_removed_keys_are_known():
    for key in ("sink_level", "file_sink_level", "stderr_sink_level", "use_turbo_deepep", "recompute_layer_ids"):
        assert key in known_keys(), key
    assert did_you_mean("use_turbo_grouped_mlp") == "use_turbo_grouped_gemm"
    _, _, problems, warnings = resolve_all({**BASE, "use_turbo_grouped_mlp": True}, NODE)  # an earlier release's
    assert problems == [] and any("use_turbo_grouped_gemm" in w and "v26.3.1" in w for w in warnings)
    assert resolve_all({**BASE, "use_turbo_grouped_mlp": False}, NODE)[2] == []


def test_unmodelled_values_are_named_defaults_are_not():
    assert unmodelled_keys({**BASE, "hidden_dropout": 0.0, "attention_dropout": 0.0}) == {}
    found = unmodelled_keys({**BASE, "gradient_accumulation_fusion": False, "hidden_dropout": 0.0,
                             "attention_dropout": 0.0, "torch_compile": {"enable": False}})
    assert list(found) == ["gradient_accumulation_fusion"]
    assert "projected as True" in found["gradient_accumulation_fusion"]
    # a flat recipe that leaves dropout out trains with Megatron's 0.1: the projection does not price it
    assert {"hidden_dropout", "attention_dropout"} <= set(unmodelled_keys(BASE))
    _, _, _, warnings = resolve_all({**BASE, "decoder_pipeline_manual_split_list": [4, 4]}, NODE)
    assert any("not modelled" in w and "decoder_pipeline_manual_split_list" in w for w in warnings)


@pytest.mark.parametrize(("key", "value", "words"), [
    ("model_type", "t5", "not a GPT model"),
    ("model_type", "flux_schnell", "diffusion"),
    ("experimental_attention_variant", "dsa", "DeepSeek sparse attention"),
    ("linear_attention_freq", 4, "linear-attention"),
    ("heterogeneous_layers_config_path", "x.json", "heterogeneous"),
    ("perform_rl_step", True, "reinforcement"),
])
def test_architectures_the_projection_cannot_build_are_refused(key, value, words):
    problems = architecture_problems({key: value})
    assert len(problems) == 1 and words in problems[0].message and problems[0].path == key
    _, _, resolved, _ = resolve_all({**BASE, key: value}, NODE)
    assert [p.path for p in resolved] == [key]  # the family's refusal alone, not the noise it would cause


def test_defaults_of_architecture_keys_are_not_refused():
    assert architecture_problems({"model_type": "gpt", "is_hybrid_model": False, "hybrid_attention_ratio": 0.0,
                                  "hybrid_override_pattern": None, "linear_attention_freq": None}) == []


@pytest.mark.parametrize(("value", "period"), [
    ([1, 0] * 4, 2), ([1, 1, 1, 0] * 2, 4), ([0, 1] * 4, 2), ([1] * 8, 0), (3, 3), ("[1, 0, 1, 0, 1, 0, 1, 0]", 2),
])
def test_window_skip_freq_list_form(value, period):
    model, _, problems, _ = resolve_all({**BASE, "window_size": [128, 0], "window_attn_skip_freq": value}, NODE)
    assert problems == [] and model.window_attn_skip_freq == period


@pytest.mark.parametrize("value", [[1, 0, 1], [1, 1, 0, 0, 1, 1, 0, 0], [1, 0, 0, 1, 0, 1, 1, 0], ["a"]])
def test_window_skip_freq_lists_not_modelled_or_malformed_are_problems(value):
    assert [p.path for p in resolve_all({**BASE, "window_size": [128, 0], "window_attn_skip_freq": value},
                                        NODE)[2]] == ["window_attn_skip_freq"]


def test_dispatcher_from_deepep_switches():
    moe = {**MOE, "expert_model_parallel_size": 8, "moe_token_dispatcher_type": "alltoall"}
    assert resolve_all(moe, NODE)[1].moe_token_dispatcher_type == "alltoall"
    turbo = resolve_all({**moe, "enable_primus_turbo": True, "use_turbo_deepep": True}, NODE)[1]
    assert turbo.moe_token_dispatcher_type == "flex"  # Primus's turbo DeepEP patch sets flex itself
    assert resolve_all({**moe, "use_turbo_deepep": True}, NODE)[1].moe_token_dispatcher_type == "alltoall"
    assert resolve_all({**moe, "enable_primus_turbo": True, "turbo_sync_free_moe_stage": 2},
                       NODE)[1].moe_token_dispatcher_type == "flex"
    # megatron-core refuses DeepEP with another dispatcher
    assert [p.path for p in resolve_all({**moe, "moe_enable_deepep": True}, NODE)[2]] == ["moe_enable_deepep"]
    flex = {**moe, "moe_enable_deepep": True, "moe_token_dispatcher_type": "flex"}
    assert resolve_all(flex, NODE)[2] == []


def test_te_cross_entropy_needs_the_loss_fusion_switch():
    assert resolve_all({**BASE, "cross_entropy_fusion_impl": "te"}, NODE)[1].cross_entropy_fusion_impl == "native"
    fused = {**BASE, "cross_entropy_fusion_impl": "te", "cross_entropy_loss_fusion": True}
    assert resolve_all(fused, NODE)[1].cross_entropy_fusion_impl == "te"


def test_recompute_layer_ids_follow_primus_rules():
    args = {**BASE, "recompute_granularity": "full", "recompute_layer_ids": "7, 0,3,3"}
    _, execution, problems, _ = resolve_all(args, NODE)
    assert problems == [] and execution.recompute_layer_ids == (0, 3, 7)
    assert [p.path for p in resolve_all({**args, "recompute_layer_ids": [8]}, NODE)[2]] == ["recompute_layer_ids"]
    from primus_ext.recipe import check

    assert check(*resolve_all(args, NODE)[:2], NODE) == []  # no recompute_method needed, unlike Megatron's own
    with_method = resolve_all({**args, "recompute_method": "block", "recompute_num_layers": 2}, NODE)
    assert [p.path for p in check(*with_method[:2], NODE)] == ["recompute_method"]


def test_lora_only_under_primus_sft_trainer():
    """Primus applies LoRA in MegatronSFTTrainer (stage: sft) only; elsewhere every weight trains."""
    lora = {"enabled": True, "dim": 16, "target_modules": ["linear_qkv", "linear_proj"]}
    sft = resolve_all({**BASE, "lora": lora, "stage": "sft"}, NODE, primus=True)[1]
    assert (sft.lora_rank, sft.lora_targets) == (16, ("linear_qkv", "linear_proj"))
    for args, primus in (({**BASE, "lora": lora}, True), ({**BASE, "lora": lora, "stage": "sft"}, False)):
        _, execution, _, warnings = resolve_all(args, NODE, primus=primus)
        assert execution.lora_rank == 0 and any("only Primus's SFT trainer" in w for w in warnings)


def test_recompute_ids_of_mtp_depths_are_named_as_not_modelled():
    args = {**BASE, "mtp_num_layers": 1, "recompute_granularity": "full", "recompute_layer_ids": [0, 8]}
    _, execution, problems, warnings = resolve_all(args, NODE)
    assert problems == [] and execution.recompute_layer_ids == (0, 8)
    assert any("MTP depths" in w for w in warnings)
