"""Resolution of raw Megatron arguments: defaults, aliases, derived values, normalisations."""

from __future__ import annotations

import pytest
from recipe_data import BASE, MOE

from primus_ext.hardware import load_system
from primus_ext.recipe import resolve_specs
from primus_ext.recipe.moe_pattern import PatternError, moe_pattern, parse_pattern_expression
from primus_ext.recipe.resolve import resolve_all
from primus_ext.recipe.tokenizers import ASSUMED_VOCAB

NODE = load_system("mi300x", 1)


def resolve(args, system=NODE):
    model, execution, problems = resolve_specs(args, system, name="t")
    return model, execution, problems


def test_base_resolves_cleanly_and_dp_comes_from_the_world():
    model, execution, problems = resolve({**BASE, "tensor_model_parallel_size": 2})
    assert not problems
    assert execution.dp == 8 // 2 and execution.world_size == 8
    assert (model.num_query_groups, model.kv_channels) == (4, 1024 // 16)


def test_ffn_default_follows_megatron_formula():
    # Megatron-LM arguments.py: 4h, or int(4h*2/3 / 64) * 64 with SwiGLU; by hand for h = 4096:
    args = {k: v for k, v in BASE.items() if k != "ffn_hidden_size"} | {"hidden_size": 4096, "num_attention_heads": 32}
    assert resolve(args)[0].ffn_hidden_size == 10880  # 4*4096*2/3 = 10922.7 -> 170 * 64
    assert resolve({**args, "swiglu": False})[0].ffn_hidden_size == 16384


def test_query_groups_semantics():
    mha = {**BASE, "group_query_attention": False, "num_query_groups": None}
    assert resolve(mha)[0].num_query_groups == 16
    ignored = {**BASE, "group_query_attention": False, "num_query_groups": 4}
    model, _, _, warnings = resolve_all(ignored, NODE)
    assert model.num_query_groups == 16 and any("ignored" in w for w in warnings)
    implicit = {k: v for k, v in BASE.items() if k != "group_query_attention"}
    model, _, _, warnings = resolve_all(implicit, NODE)
    assert model.num_query_groups == 4 and any("group_query_attention is not set" in w for w in warnings)


def test_vocab_from_tokenizer_table_or_problem():
    args = {k: v for k, v in BASE.items() if k != "vocab_size"}
    assert resolve({**args, "tokenizer_model": "meta-llama/Llama-3.1-8B"})[0].vocab_size == 128256
    assert resolve({**args, "tokenizer_model": "deepseek-ai/DeepSeek-V3"})[0].vocab_size == 129280
    assert resolve({**args, "tokenizer_model": "Qwen/Qwen3-30B-A3B"})[0].vocab_size == 151936
    assert resolve({**args, "tokenizer_model": "mistralai/Mixtral-8x7B-v0.1"})[0].vocab_size == 32000
    # Qwen2.5's sizes differ by model (3B and smaller 151936, 7B and up 152064): the longest prefix wins
    assert resolve({**args, "tokenizer_model": "Qwen/Qwen2.5-3B"})[0].vocab_size == 151936
    assert resolve({**args, "tokenizer_model": "Qwen/Qwen2.5-72B"})[0].vocab_size == 152064
    assert resolve({**args, "tokenizer_type": "Llama2Tokenizer"})[0].vocab_size == 32000
    # an unknown tokenizer is projected at a stated assumption, not refused
    model, _, problems, warnings = resolve_all({**args, "tokenizer_model": "acme/secret"}, NODE)
    assert problems == [] and model.vocab_size == ASSUMED_VOCAB and model.vocab_source == "assumed"
    assert any("acme/secret" in w and "assumed vocabulary" in w for w in warnings)
    # Megatron's NullTokenizer needs vocab_size and adds an end-of-document id
    assert [p.path for p in resolve({**args, "tokenizer_type": "NullTokenizer"})[2]] == ["vocab_size"]
    assert resolve({**args, "tokenizer_type": "NullTokenizer", "vocab_size": 1000})[0].vocab_size == 1001


def test_primus_mock_data_trains_with_the_null_tokenizer():
    """Primus patches/args/mock_data_patches.py: mock data -> NullTokenizer, vocab_size 131072 when unset."""
    args = {k: v for k, v in BASE.items() if k != "vocab_size"} | {"tokenizer_model": "meta-llama/Llama-3.1-8B",
                                                                   "mock_data": True}
    model, _, _, warnings = resolve_all(args, NODE, primus=True)
    assert model.vocab_size == 131073 and any("NullTokenizer" in w for w in warnings)
    assert resolve_all({**args, "vocab_size": 128256}, NODE, primus=True)[0].vocab_size == 128257
    assert resolve_all(args, NODE)[0].vocab_size == 128256  # stock Megatron: --mock-data keeps the tokenizer


@pytest.mark.parametrize(("args", "vpp"), [
    ({"num_virtual_stages_per_pipeline_rank": 2}, 2),
    ({"virtual_pipeline_model_parallel_size": 2}, 2),
    ({"num_layers_per_virtual_pipeline_stage": 2}, 2),  # 8 layers / PP 2 = 4 per rank / 2 = 2 chunks
    ({"num_virtual_stages_per_pipeline_rank": 1}, None),
])
def test_vpp_aliases(args, vpp):
    _, execution, problems = resolve({**BASE, "pipeline_model_parallel_size": 2, **args})
    assert not problems
    assert execution.virtual_pipeline_model_parallel_size == vpp
    assert execution.pipeline_schedule == ("interleaved" if vpp else "1f1b")


def test_vpp_alias_conflict_is_a_problem():
    problems = resolve({**BASE, "pipeline_model_parallel_size": 2, "num_virtual_stages_per_pipeline_rank": 2,
                        "virtual_pipeline_model_parallel_size": 4})[2]
    assert [p.path for p in problems] == ["num_virtual_stages_per_pipeline_rank"]


def test_vpp_derived_from_layout():
    layout = {"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "Et|tt|ttt|ttL"}
    _, execution, _ = resolve({**BASE, **layout})
    assert execution.vpp == 2 and execution.pipeline_schedule == "interleaved"


def test_zero_bubble_and_precision_and_fsdp():
    zero_bubble = {"pipeline_model_parallel_size": 2, "patch_zero_bubble": True, "enable_zero_bubble": True}
    _, e, _ = resolve({**BASE, **zero_bubble})
    assert e.pipeline_schedule == "zb-h1"
    primus_pipeline = {"pipeline_model_parallel_size": 2, "patch_primus_pipeline": True}
    assert resolve({**BASE, **primus_pipeline, "pp_algorithm": "zero-bubble"})[1].pipeline_schedule == "zb-h1"
    assert resolve({**BASE, **primus_pipeline, "pp_algorithm": "1f1b"})[1].pipeline_schedule == "1f1b"
    for algorithm, name in (("v-half", "v-half"), ("v-min", "v-min"), ("zbv-formatted", "zb-v"),
                            ("zero-bubble-heuristic", "zb-h1"), ("1f1b-interleaved", "1f1b")):
        assert resolve({**BASE, **primus_pipeline, "pp_algorithm": algorithm})[1].pipeline_schedule == name
    _, _, problems, _ = resolve_all({**BASE, **primus_pipeline, "pp_algorithm": "zbv-fast"}, NODE)
    assert [p.path for p in problems] == ["pp_algorithm"]
    # zero_bubble.yaml: the V family by its memory setup, zb2p by 2*PP pending backwards
    v = {**zero_bubble, "zero_bubble_v_schedule": True, "num_virtual_stages_per_pipeline_rank": 2}
    for setup, name in (("zb", "zb-v"), ("half", "v-half"), ("min", "v-min")):
        assert resolve({**BASE, **v, "zero_bubble_v_schedule_mem_setup": setup})[1].pipeline_schedule == name
    assert resolve({**BASE, **zero_bubble, "zero_bubble_max_pending_backward": 4})[1].pipeline_schedule == "zb-h2"
    assert resolve({**BASE, **zero_bubble, "zero_bubble_max_pending_backward": 2})[1].pipeline_schedule == "zb-h1"
    _, _, _, warnings = resolve_all({**BASE, **zero_bubble, "zero_bubble_max_pending_backward": "auto"}, NODE)
    assert any("adaptive" in w for w in warnings)
    assert resolve({**BASE, "fp8": "hybrid"})[1].precision == "fp8"
    assert resolve({**BASE, "fp8": "e4m3"})[1].precision == "fp8"
    assert resolve({**BASE, "bf16": False, "fp16": True})[1].precision == "fp16"
    assert resolve({**BASE, "bf16": False})[1].precision == "fp32"
    assert resolve({**BASE, "use_torch_fsdp2": True})[1].fsdp == "torch_fsdp2"
    assert resolve({**BASE, "use_custom_fsdp": True})[1].fsdp == "megatron_fsdp"
    assert resolve({**BASE, "use_megatron_fsdp": 1})[1].fsdp == "megatron_fsdp"


def test_fp8_recipe_choices_and_custom():
    fp8 = {**BASE, "fp8": "hybrid"}
    assert resolve(fp8)[1].fp8_recipe == "delayed"  # megatron-core's default
    assert resolve({**fp8, "fp8_recipe": "tensorwise"})[1].fp8_recipe == "tensorwise"
    _, execution, problems, warnings = resolve_all({**fp8, "fp8_recipe": "custom"}, NODE)
    assert execution.fp8_recipe == "delayed" and not problems and any("custom" in w for w in warnings)
    _, _, _, warnings = resolve_all({**fp8, "fp8_recipe": "mxfp8"}, load_system("h100", 1))
    assert any("MX" in w and "hopper" in w for w in warnings)
    _, _, _, warnings = resolve_all({**fp8, "fp8_recipe": "mxfp8"}, load_system("b200", 1))
    assert not any("mxfp8" in w for w in warnings)
    problems = resolve({**fp8, "fp8_recipe": "nvfp4"})[2]
    assert [p.path for p in problems] == ["fp8_recipe"] and "mxfp8" in problems[0].fix


def test_sequence_parallel_as_int_and_dropped_at_tp1():
    assert resolve({**BASE, "sequence_parallel": 1, "tensor_model_parallel_size": 2})[1].sequence_parallel is True
    assert resolve({**BASE, "sequence_parallel": 1})[1].sequence_parallel is False  # Megatron: off at TP=1
    assert resolve({**BASE, "tp_comm_overlap": True})[1].tp_comm_overlap is False


def test_recompute_activations_alias_and_moe_layout():
    _, e, _ = resolve({**BASE, "recompute_activations": True})
    assert e.recompute_granularity == "selective"
    model, _, _ = resolve({**MOE, "moe_layer_freq": "([0]*2+[1]*6)", "moe_shared_expert_intermediate_size": 1024})
    assert model.moe_layer_pattern == (False, False) + (True,) * 6
    assert (model.num_moe_layers, model.num_dense_layers, model.moe_shared_expert_intermediate_size) == (6, 2, 1024)
    assert resolve(BASE)[0].moe_layer_pattern == ()
    # first-k-dense (Hugging Face DeepSeek name) on top of an every-layer frequency
    first3 = resolve({**MOE, "moe_layer_freq": 1, "first_k_dense_replace": 3})[0]
    assert first3.moe_layer_pattern == (False,) * 3 + (True,) * 5


@pytest.mark.parametrize(("key", "value"), [
    ("tensor_model_parallel_size", "two"), ("sequence_parallel", "yes"), ("recompute_granularity", "partial"),
    ("num_layers", 0), ("moe_layer_freq", "__import__('os')"), ("fp8", "e5m2"), ("normalization", "BatchNorm"),
    ("recompute_modules", ["core_attn", "everything"]), ("window_size", "wide"), ("num_layers", 10**9),
])
def test_malformed_values_name_their_key(key, value):
    args = {**MOE, key: value}
    problems = resolve(args)[2]
    assert key in [p.path for p in problems], problems


def test_a_key_read_twice_is_reported_once():
    problems = resolve({**BASE, "seq_length": "long"})[2]
    assert [p.path for p in problems] == ["seq_length"]


def test_missing_required_keys_all_reported():
    problems = resolve({"vocab_size": 10})[2]
    assert {"num_layers", "hidden_size", "num_attention_heads", "seq_length"} <= {p.path for p in problems}


def test_moe_pattern_matches_python_and_megatron_int_rule():
    for text in ("([0]*3+[1]*58)", "[1,0,1,0]", "([1]*3+[0])*22+[1]*3+[0]*2", "[0]+[1]*60"):
        assert list(parse_pattern_expression(text)) == eval(text)  # trusted literals in a test only
    # megatron-core gpt_layer_specs: an int N marks layers with i % N == 0
    assert moe_pattern(2, 5) == (True, False, True, False, True)
    assert moe_pattern("1", 3) == (True, True, True)
    for bad in ("[0]*10**9", "[0]*99999999", "[2]*4", "[0]*3", "open('x')", "", "[]"):
        with pytest.raises(PatternError):
            moe_pattern(bad, 4)



def test_shared_expert_gate_is_read_and_counted():
    """``moe_shared_expert_gate`` adds megatron-core's ``1 x hidden`` gate weight to every MoE layer, whole on each
    TP rank (the real modules' counts, megatron splitting over a 2-rank gloo group too:
    tests/model/test_params_megatron.py)."""
    from primus_ext.model.layers import layer_params, rank_shapes

    shared = {**MOE, "moe_shared_expert_intermediate_size": 1024}
    plain, gated = resolve(shared), resolve({**shared, "moe_shared_expert_gate": True})
    assert gated[0].moe_shared_expert_gate and not plain[0].moe_shared_expert_gate
    assert not resolve({**BASE, "moe_shared_expert_gate": True})[0].moe_shared_expert_gate  # dense: no experts
    assert not resolve({**MOE, "moe_shared_expert_gate": True})[0].moe_shared_expert_gate  # no shared experts
    with_gate, without = rank_shapes(gated[0], gated[1])["moe"], rank_shapes(plain[0], plain[1])["moe"]
    assert layer_params(with_gate) - layer_params(without) == gated[0].hidden_size
    assert with_gate.key() != without.key()


def test_zero_bubble_keys_as_primus_reads_them():
    """zbpp_utils.py validate_arguments: zero_bubble_v_schedule turns enable_zero_bubble on; a pending-backward
    count given as text (a key=value override) is a number; pp_algorithm takes primus_pipeline.yaml's values only."""
    zb = {**BASE, "pipeline_model_parallel_size": 2, "patch_zero_bubble": True}
    v = {**zb, "enable_zero_bubble": False, "zero_bubble_v_schedule": True, "zero_bubble_v_schedule_mem_setup": "zb"}
    assert resolve(v)[1].pipeline_schedule == "zb-v"
    assert resolve({**zb, "zero_bubble_max_pending_backward": "4"})[1].pipeline_schedule == "zb-h2"
    _, _, problems, _ = resolve_all({**BASE, "pipeline_model_parallel_size": 2, "patch_primus_pipeline": True,
                                     "pp_algorithm": "DualPipeV"}, NODE)
    assert [p.path for p in problems] == ["pp_algorithm"]
