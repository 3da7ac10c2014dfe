"""``model_type: mamba`` recipes resolve to megatron-core's hybrid stack, or are refused with a sentence."""

from __future__ import annotations

import pytest
from recipe_data import BASE

from primus_ext.hardware import load_system
from primus_ext.projection.project import project
from primus_ext.recipe.resolve import resolve_all

NODE = load_system("h100", 1)
NEMOTRON_H_8B = dict(
    BASE, model_type="mamba", num_layers=52, hidden_size=4096, ffn_hidden_size=21504, num_attention_heads=32,
    group_query_attention=True, num_query_groups=8, kv_channels=128, squared_relu=True, swiglu=False,
    normalization="RMSNorm", position_embedding_type="none", add_bias_linear=False,
    hybrid_override_pattern="M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    mamba_head_dim=64, mamba_num_heads=128, mamba_num_groups=8, mamba_state_dim=128, seq_length=4096,
    micro_batch_size=1, global_batch_size=64, tensor_model_parallel_size=2)
"""Megatron-LM examples/post_training/modelopt/conf/nvidia/Nemotron-H-8B-Base-8K.sh @d98e8a64, as a flat recipe."""


def test_nemotron_h_resolves_and_projects():
    model, execution, problems, _ = resolve_all(NEMOTRON_H_8B, NODE)
    assert not problems, problems
    assert model.hybrid_layer_pattern.count("M") == 24 and model.hybrid_layer_pattern.count("*") == 4
    assert (model.mamba_num_heads, model.mamba_head_dim, model.mamba_num_groups) == (128, 64, 8)
    p = project(model, execution, NODE)
    assert p.tokens_per_s_per_gpu > 0 and 0 < p.mfu <= 1
    assert {"mamba", "hybrid_attention", "hybrid_mlp"} <= set(p.sources)


def test_ratios_allocate_like_megatron_core():
    args = {k: v for k, v in NEMOTRON_H_8B.items() if k != "hybrid_override_pattern"}
    model, _, problems, _ = resolve_all(dict(args, num_layers=10, hybrid_attention_ratio=0.2), NODE)
    assert not problems and model.hybrid_layer_pattern == "MMM*MM*MMM"  # = megatron-core (tests/model/test_hybrid.py)


def _legality(args):
    from primus_ext.recipe.checks import check

    model, execution, problems, _ = resolve_all(args, NODE)
    return problems + check(model, execution, NODE)


def test_what_megatron_core_asserts_is_refused():
    problems = _legality(dict(NEMOTRON_H_8B, tensor_model_parallel_size=16))
    assert any("tensor parallel 16" in p.message for p in problems)
    _, _, problems, _ = resolve_all(dict(NEMOTRON_H_8B, hybrid_override_pattern="M*"), NODE)
    assert [p.path for p in problems] == ["hybrid_override_pattern"]
    problems = _legality(dict(NEMOTRON_H_8B, pipeline_model_parallel_size=2, num_layers_per_virtual_pipeline_stage=13))
    assert any("virtual" in p.message for p in problems)
    assert not _legality(dict(NEMOTRON_H_8B, pipeline_model_parallel_size=4))
    _, _, problems, _ = resolve_all(dict(NEMOTRON_H_8B, spec=["x.hybrid_mamba_mla_layer_specs", "kda_stack"]), NODE)
    assert [p.path for p in problems] == ["spec"] and "Kimi delta attention" in problems[0].message


def test_recompute_is_projected_without_and_said_so():
    _, _, problems, warnings = resolve_all(dict(NEMOTRON_H_8B, recompute_granularity="full",
                                                        recompute_method="uniform", recompute_num_layers=1), NODE)
    assert not problems and any("MambaStack has no layer-checkpointing" in w for w in warnings)


SPECS = "primus.backends.megatron.core.models.hybrid.hybrid_mamba_mla_layer_specs"
ZEBRA_1B_GDN = dict(
    BASE, model_type="mamba", num_layers=32, hidden_size=2048, ffn_hidden_size=8192, num_attention_heads=32,
    swiglu=True, normalization="RMSNorm", position_embedding_type="none", is_hybrid_model=True,
    hybrid_attention_ratio=0.0, linear_conv_kernel_dim=4, linear_key_head_dim=64, linear_value_head_dim=64,
    linear_num_key_heads=8, linear_num_value_heads=16, spec=[SPECS, "gdn_hybrid_stack_spec"], seq_length=4096,
    micro_batch_size=1, global_batch_size=64)
"""Primus primus/configs/models/megatron/zebra_llama_1B_gdn.yaml + its MI300X experiment's spec (Primus HEAD)."""


def test_primus_gdn_hybrid_stack_resolves_with_its_own_allocation():
    """Zebra-Llama GDN (Primus ``gdn_hybrid_stack_spec``) was refused: 'gated delta net ... not modelled'."""
    model, execution, problems, _ = resolve_all(ZEBRA_1B_GDN, NODE)
    assert not problems, problems
    assert model.hybrid_layer_pattern == "G-" * 16  # HybridStack.allocate_layers: each mixer followed by an MLP
    p = project(model, execution, NODE)
    assert {"gated_delta", "hybrid_mlp"} <= set(p.sources) and "mamba" not in p.sources and 0 < p.mfu <= 1
    # a pattern as given (the ratio dropped, as Primus does); MLA attention layers projected, with a warning
    hybrid = dict(ZEBRA_1B_GDN, num_layers=8, hybrid_attention_ratio=0.25, hybrid_override_pattern="*-M-M-M-",
                  multi_latent_attention=True, spec=[SPECS, "gdn_hybrid_stack_spec_no_te"])
    model, _, problems, warnings = resolve_all(hybrid, NODE)
    assert not problems and model.hybrid_layer_pattern == "*-G-G-G-"
    assert any("extra q / kv RMSNorms" in w for w in warnings)
    # HybridStack's ratio allocation (hybrid_block.py): an attention block of "*-" + "M-" x (mixers / attention)
    model, _, problems, _ = resolve_all(dict(ZEBRA_1B_GDN, num_layers=16, hybrid_attention_ratio=0.25), NODE)
    assert not problems and model.hybrid_layer_pattern == "*-G-G-G-*-G-G-G-"
    # a HybridStack spec primus-ext does not know is refused, naming those it does
    _, _, problems, _ = resolve_all(dict(ZEBRA_1B_GDN, spec=[SPECS, "hybrid_inference_stack_spec"]), NODE)
    assert [p.path for p in problems] == ["spec"] and "hybrid_stack_spec" in problems[0].message


ZEBRA_1B = dict(
    BASE, model_type="mamba", num_layers=32, hidden_size=2048, ffn_hidden_size=8192, num_attention_heads=32,
    swiglu=True, normalization="RMSNorm", position_embedding_type="none", is_hybrid_model=True,
    hybrid_attention_ratio=0.25, mamba_state_dim=64, mamba_head_dim=64, mamba_num_groups=8,
    group_query_attention=False, multi_latent_attention=True, q_lora_rank=1344, kv_lora_rank=128, qk_head_dim=32,
    qk_pos_emb_head_dim=32, v_head_dim=64, spec=[SPECS, "hybrid_stack_spec"], seq_length=8192, micro_batch_size=1,
    global_batch_size=64)
"""Primus primus/configs/models/megatron/zebra_llama_1B.yaml + its MI300X experiment's spec (Primus HEAD)."""


def test_primus_mamba_hybrid_stack_projects_with_its_expand():
    """Zebra-Llama 1B / 3B / 8B (Primus ``hybrid_stack_spec``, a Mamba-2 mixer of expand 1) were refused:
    'HybridStack spec ... not modelled'."""
    model, execution, problems, warnings = resolve_all(ZEBRA_1B, NODE)
    assert not problems, problems
    assert model.hybrid_layer_pattern == ("*-" + "M-" * 3) * 4  # HybridStack.allocate_layers at ratio 0.25
    assert model.mamba_num_heads == 2048 // 64  # d_inner = 1 x hidden_size, not megatron-core's default 2 x
    assert any("extra q / kv RMSNorms" in w for w in warnings)
    p = project(model, execution, NODE)
    assert {"mamba", "hybrid_attention", "hybrid_mlp"} <= set(p.sources) and 0 < p.mfu <= 1
    # the 300M no-TE spec's mixer has expand 2 (mamba_hybrid_stack_spec_no_te), its pattern as given
    model, _, problems, _ = resolve_all(dict(ZEBRA_1B, num_layers=8, hybrid_override_pattern="*-M-M-M-",
                                             spec=[SPECS, "mamba_hybrid_stack_spec_no_te"]), NODE)
    assert not problems and model.hybrid_layer_pattern == "*-M-M-M-" and model.mamba_num_heads == 2 * 2048 // 64


NEMOTRON_3_SUPER = dict(
    BASE, model_type="mamba", num_layers=88, hidden_size=4096, ffn_hidden_size=2688, num_attention_heads=32,
    group_query_attention=True, num_query_groups=2, kv_channels=128, squared_relu=True, swiglu=False,
    normalization="RMSNorm", position_embedding_type="none", add_bias_linear=False, vocab_size=131072,
    untie_embeddings_and_output_weights=True, mamba_num_heads=128, mamba_head_dim=64,
    hybrid_override_pattern="MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME"
                            "/*E/*E",
    num_experts=512, moe_router_topk=22, moe_latent_size=1024, moe_shared_expert_intermediate_size=5376,
    moe_grouped_gemm=True, mtp_num_layers=2, mtp_use_repeated_layer=True, seq_length=8192,
    micro_batch_size=1, global_batch_size=512, tensor_model_parallel_size=2, sequence_parallel=True,
    expert_model_parallel_size=8, expert_tensor_parallel_size=1)
"""Megatron-LM tests/functional_tests/test_cases/nemotron/nemotron3_super_release_gb200/model_config.yaml @d98e8a64
(EP 8 of its 64 to fit one 8-GPU node here; ETP 1 as there) with issue 54's repeated MTP layer, as a flat recipe."""


def test_nemotron_3_super_recipe_is_the_validation_paths_model():
    from primus_ext.model.flops import model_flops_per_token
    from primus_ext.recipe.checks import check
    from primus_ext.validate.archs import CITED_ARCHS, read_archs

    node = load_system("b200", 1)
    model, execution, problems, _ = resolve_all(NEMOTRON_3_SUPER, node)
    assert not problems and check(model, execution, node) == [], problems
    cited = read_archs(CITED_ARCHS, cited=None)["Nemotron-3-Super"].model
    fields = ("hybrid_layer_pattern", "mtp_layer_pattern", "mtp_num_layers", "mtp_use_repeated_layer",
              "moe_latent_size", "moe_shared_expert_intermediate_size", "expert_ffn_hidden_size", "mamba_num_heads",
              "moe_layer_pattern", "activation", "vocab_size")
    assert {f: getattr(model, f) for f in fields} == {f: getattr(cited, f) for f in fields}
    assert model_flops_per_token(model, 8192) == pytest.approx(model_flops_per_token(cited, 8192))
    p = project(model, execution, node)
    assert 0 < p.mfu <= 1 and p.memory is not None
