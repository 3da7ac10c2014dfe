"""The gated DeltaNet kind (``kinds.gated_delta``): parameters equal megatron-core 0.16.1's ``GatedDeltaNet`` (built on
CPU, fla stood in), its keys are its own, its FLOPs follow the chunked delta rule, and a model that places it projects.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.flops import flops_breakdown
from primus_ext.model.kinds import get_kind
from primus_ext.model.kinds.gated_delta import CHUNK, GatedDeltaDims, rule_macs_per_token
from primus_ext.model.layers import layer_params
from primus_ext.model.rank_shape import LayerArch, RankShape
from primus_ext.projection.project import project
from primus_ext.recipe.resolve import resolve_all

DIMS = GatedDeltaDims(linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=48,
                      linear_num_key_heads=4, linear_num_value_heads=8)
ARCH = LayerArch(hidden_size=128, num_attention_heads=4, num_query_groups=4, kv_channels=32, ffn_hidden_size=256,
                 dims=DIMS)
NODE = load_system("mi300x", 1)
PATTERN = "G-G-G-*-"
RECIPE = dict(model_type="mamba", num_layers=len(PATTERN), hidden_size=1024, ffn_hidden_size=4096,
              num_attention_heads=16, group_query_attention=True, num_query_groups=4, kv_channels=64,
              vocab_size=32000, swiglu=True, normalization="RMSNorm", position_embedding_type="none",
              add_bias_linear=False, hybrid_override_pattern=PATTERN, linear_conv_kernel_dim=4,
              linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=8, linear_num_value_heads=16,
              seq_length=2048, micro_batch_size=1, global_batch_size=32, bf16=True, tensor_model_parallel_size=2)


@pytest.mark.parametrize("shape", [RankShape(kind="gated_delta", arch=ARCH),
                                   RankShape(kind="gated_delta", arch=ARCH, tp=2),
                                   RankShape(kind="gated_delta", arch=ARCH, tp=4),
                                   RankShape(kind="gated_delta", arch=replace(ARCH, dims=replace(
                                       DIMS, linear_conv_kernel_dim=3, linear_num_value_heads=4)))],
                         ids=["tp1", "tp2", "tp4", "k3-v4"])
def test_params_equal_megatron_gated_delta_net(shape, one_rank_world):
    from primus_ext.measure.build import build_layer

    built = build_layer(shape, device="cpu")
    assert layer_params(shape) == built.param_count > 0
    d = shape.arch.dims
    assert built.param_names["mixer.in_proj.weight"] == 128 * d.in_proj_dim // shape.tp


def test_forward_refuses_without_fla(one_rank_world):
    from primus_ext.measure.build import build_layer
    from primus_ext.measure.gated_delta_builder import KERNEL_NOTE

    try:
        import fla  # noqa: F401
        pytest.skip("flash-linear-attention is installed: the real kernels run")
    except ImportError:
        pass
    built = build_layer(RankShape(kind="gated_delta", arch=ARCH, seq_length=64), device="cpu")
    with pytest.raises(NotImplementedError, match="analytic") as info:
        built.module(**built.make_inputs())
    assert KERNEL_NOTE in str(info.value)


def test_rule_macs_by_hand():
    # per head: C (3 dk + 2 dv) + 3 dk dv + C^2 / 3, times the value heads
    per_head = CHUNK * (3 * 32 + 2 * 48) + 3 * 32 * 48 + CHUNK * CHUNK / 3
    assert rule_macs_per_token(DIMS) == pytest.approx(8 * per_head)


def test_a_recipe_with_gated_delta_layers_resolves_and_projects():
    model, execution, problems, _ = resolve_all(RECIPE, NODE)
    assert not problems, problems
    dims = get_kind("gated_delta").dims(model)
    assert dims == GatedDeltaDims(linear_conv_kernel_dim=4, linear_key_head_dim=64, linear_value_head_dim=64,
                                  linear_num_key_heads=8, linear_num_value_heads=16)
    p = project(model, execution, NODE)
    assert "gated_delta" in p.sources and p.tokens_per_s_per_gpu > 0 and 0 < p.mfu <= 1
    # the model FLOPs hold three G layers' projections and rule: each per token, three passes, 2 FLOPs / MAC
    without, _, _, _ = resolve_all(dict(RECIPE, hybrid_override_pattern=PATTERN.replace("G", "-")), NODE)
    added = flops_breakdown(model, 2048).total - flops_breakdown(without, 2048).total
    per_layer = get_kind("gated_delta").model_macs(model, 2048, True)
    mlp = get_kind("hybrid_mlp").model_macs(without, 2048, True)
    assert added == pytest.approx(3 * 6 * (sum(per_layer.values()) - sum(mlp.values())), rel=1e-9)


def test_its_keys_are_checked_with_their_path():
    _, _, problems, _ = resolve_all(dict(RECIPE, linear_num_value_heads=12), NODE)
    assert [p.path for p in problems] == ["linear_num_value_heads"] and "multiple" in problems[0].message
    _, _, problems, _ = resolve_all(dict(RECIPE, linear_key_head_dim="wide"), NODE)
    assert [p.path for p in problems] == ["linear_key_head_dim"]
    from primus_ext.recipe.checks import check

    model, execution, _, _ = resolve_all(dict(RECIPE, tensor_model_parallel_size=8, linear_num_key_heads=4), NODE)
    assert any(p.path == "tensor_model_parallel_size" and "gated DeltaNet" in p.message
               for p in check(model, execution, NODE))


def test_its_keys_are_modelled_keys():
    from primus_ext.recipe.catalogue import key_class

    for key in GatedDeltaDims.__dataclass_fields__:
        assert key_class(key) == "modelled", key
