"""Mamba parameter counts equal megatron-core 0.16.1's own modules (``MambaLayer`` per TP rank, a whole
``MambaStack`` of a Nemotron-H-like pattern), built on CPU with only the CUDA kernels stood in
(``measure.mamba_stubs``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from primus_ext.model import hybrid as Hy  # noqa: E402
from primus_ext.model.layers import hybrid_symbol_params, layer_params  # noqa: E402
from primus_ext.model.rank_shape import LayerArch, RankShape  # noqa: E402
from primus_ext.specs import ExecutionSpec, ModelSpec  # noqa: E402

ARCH = LayerArch(hidden_size=128, num_attention_heads=4, num_query_groups=4, kv_channels=32, ffn_hidden_size=256,
                 mamba_num_heads=16, mamba_head_dim=16, mamba_num_groups=4, mamba_state_dim=16, mamba_d_conv=4,
                 mamba_chunk_size=32)
SMALL_H = ModelSpec(name="nemotron-h-like", num_layers=13, hidden_size=128, ffn_hidden_size=384,
                    num_attention_heads=4, num_query_groups=2, kv_channels=32, vocab_size=512,
                    activation="squared_relu", hybrid_layer_pattern="M-M*-M-M-M*E-", moe_layer_pattern=tuple(
                        c == "E" for c in "M-M*-M-M-M*E-"), num_experts=4, moe_router_topk=2,
                    moe_ffn_hidden_size=64, moe_shared_expert_intermediate_size=128,
                    mamba_num_heads=8, mamba_head_dim=32, mamba_num_groups=2, mamba_state_dim=16)
"""Every symbol of megatron-core's hybrid stack (Nemotron-H's ``M-``/``*-`` alternation, Nano's ``E``) at a
size that builds in a second."""


@pytest.fixture(scope="module")
def one_rank_world():
    from primus_ext.measure.shims import parallel_context

    with parallel_context(device="cpu"):
        yield


@pytest.mark.parametrize("shape", [RankShape(kind="mamba", arch=ARCH), RankShape(kind="mamba", arch=ARCH, tp=2),
                                   RankShape(kind="mamba", arch=ARCH, tp=4),
                                   RankShape(kind="mamba", arch=replace(ARCH, normalization="LayerNorm",
                                                                        mamba_d_conv=3))],
                         ids=["tp1", "tp2", "tp4", "layernorm-k3"])
def test_mamba_layer_params_equal_megatron(shape, one_rank_world):
    from primus_ext.measure.build import build_layer

    built = build_layer(shape, device="cpu")
    assert layer_params(shape) == built.param_count
    assert built.param_names["mixer.in_proj.weight"] == 128 * Hy.in_proj_width(shape)


def test_mamba_forward_refuses_without_kernels(one_rank_world):
    from primus_ext.measure.build import build_layer
    from primus_ext.measure.mamba_stubs import STUBBED

    built = build_layer(RankShape(kind="mamba", arch=ARCH, seq_length=64), device="cpu")
    if "mamba_ssm" not in STUBBED:
        pytest.skip("mamba_ssm is installed: the real kernels run")
    with pytest.raises(NotImplementedError, match="analytic"):
        built.module(**built.make_inputs())


def _stack_spec(config):
    """megatron-core's ``mamba_stack_spec`` (models/mamba/mamba_layer_specs.py) in its local form: norms as
    modules of their own instead of fused into the next linear (same parameters)."""
    from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
    from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec
    from megatron.core.ssm.mamba_block import MambaStack, MambaStackSubmodules
    from megatron.core.ssm.mlp_layer import MLPLayer
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.attention import SelfAttention, SelfAttentionSubmodules
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.mlp import MLP, MLPSubmodules
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    from megatron.core.transformer.transformer_layer import (
        MoETransformerLayer,
        TransformerLayer,
        TransformerLayerSubmodules,
    )

    from primus_ext.measure.kind_builders import mamba_layer_spec

    attention = ModuleSpec(module=TransformerLayer, submodules=TransformerLayerSubmodules(
        input_layernorm=WrappedTorchNorm,
        self_attention=ModuleSpec(module=SelfAttention, params={"attn_mask_type": AttnMaskType.causal},
                                  submodules=SelfAttentionSubmodules(linear_qkv=ColumnParallelLinear,
                                                                     core_attention=DotProductAttention,
                                                                     linear_proj=RowParallelLinear)),
        self_attn_bda=get_bias_dropout_add))
    mlp = ModuleSpec(module=MLPLayer, submodules=TransformerLayerSubmodules(
        pre_mlp_layernorm=WrappedTorchNorm,
        mlp=ModuleSpec(module=MLP, submodules=MLPSubmodules(linear_fc1=ColumnParallelLinear,
                                                            linear_fc2=RowParallelLinear)),
        mlp_bda=get_bias_dropout_add))
    moe = ModuleSpec(module=MoETransformerLayer, submodules=TransformerLayerSubmodules(
        pre_mlp_layernorm=WrappedTorchNorm, mlp=get_moe_module_spec(use_te=False, num_experts=4),
        mlp_bda=get_bias_dropout_add))
    return ModuleSpec(module=MambaStack, submodules=MambaStackSubmodules(
        mamba_layer=mamba_layer_spec(config, use_te=False), attention_layer=attention, mlp_layer=mlp,
        moe_layer=moe))


def test_mamba_stack_params_equal_megatron(one_rank_world):
    """A whole ``MambaStack`` of ``SMALL_H``'s pattern (no final norm: TENorm needs TE) against the per-symbol
    formulas summed over the pattern."""
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.spec_utils import build_module

    from primus_ext.measure.mamba_stubs import mamba_modules
    from primus_ext.measure.shims import apply_no_te_shims

    apply_no_te_shims()
    mamba_modules()
    m = SMALL_H
    config = TransformerConfig(
        num_layers=m.num_layers, hidden_size=m.hidden_size, ffn_hidden_size=m.ffn_hidden_size,
        num_attention_heads=m.num_attention_heads, num_query_groups=m.num_query_groups, kv_channels=m.kv_channels,
        normalization="RMSNorm", add_bias_linear=False, gated_linear_unit=False, activation_func=torch.relu,
        num_moe_experts=m.num_experts, moe_router_topk=m.moe_router_topk, moe_ffn_hidden_size=m.moe_ffn_hidden_size,
        moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
        moe_token_dispatcher_type="allgather", mamba_num_heads=m.mamba_num_heads, mamba_head_dim=m.mamba_head_dim,
        mamba_num_groups=m.mamba_num_groups, mamba_state_dim=m.mamba_state_dim, use_cpu_initialization=True,
        is_hybrid_model=True)
    stack = build_module(_stack_spec(config), config=config, hybrid_override_pattern=m.hybrid_layer_pattern,
                         post_process=False, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
    assert "".join(stack.layer_type_list) == m.hybrid_layer_pattern
    per = hybrid_symbol_params(m, ExecutionSpec())
    for symbol, layer in zip(m.hybrid_layer_pattern, stack.layers, strict=True):
        assert sum(p.numel() for p in layer.parameters()) == per[symbol], symbol
    assert sum(p.numel() for p in stack.parameters()) == sum(per[s] for s in m.hybrid_layer_pattern)


HALVES = {
    "hybrid_attention": RankShape(kind="hybrid_attention", arch=ARCH, tp=2, seq_length=64),
    "hybrid_mlp": RankShape(kind="hybrid_mlp", arch=ARCH, seq_length=64),
    "hybrid_moe": RankShape(kind="hybrid_moe", arch=replace(ARCH, ffn_hidden_size=0, num_experts=4, moe_router_topk=2,
                                                            moe_ffn_hidden_size=64,
                                                            moe_shared_expert_intermediate_size=128), seq_length=64),
}


@pytest.mark.parametrize("name", sorted(HALVES))
def test_hybrid_half_layers_equal_megatron_and_run(name, one_rank_world):
    """The ``*`` / ``-`` / ``E`` layers as ``measure`` builds them: megatron-core's count, and a forward + backward
    that runs on CPU (these are timed for real, unlike the Mamba mixer)."""
    from primus_ext.measure.build import build_layer

    shape = HALVES[name]
    built = build_layer(shape, device="cpu")
    assert layer_params(shape) == built.param_count
    out = built.module(**built.make_inputs())
    out = out[0] if isinstance(out, tuple) else out
    out.float().sum().backward()


def _saved(fn, params) -> int:
    """Unique-storage bytes autograd keeps from ``fn()`` (parameters excluded), as ``measure.saved`` counts."""
    excluded = {p.untyped_storage()._cdata for p in params}
    kept: dict[int, torch.Tensor] = {}

    def pack(t):
        key = t.untyped_storage()._cdata
        if key not in excluded:
            kept[key] = t
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(t.untyped_storage().nbytes() for t in kept.values())


def test_mamba_saved_bytes_of_the_parts_that_run_on_cpu(one_rank_world):
    """The mixer's input side (norm + in_proj) and out_proj, measured with ``saved_tensors_hooks`` on the real
    modules (local spec), equal the kind's ``input_norm`` + ``input_norm_out`` and ``mamba_out_proj`` parts; the
    scan's own parts (``mamba_zxbcdt``, ``mamba_out_x``, ``mamba_gated_norm``) follow mamba_ssm's
    ``ctx.save_for_backward`` (cited in ``model.hybrid.mamba_saved``), which cannot run here."""
    from primus_ext.measure.build import build_layer
    from primus_ext.model.kinds import get_kind
    from primus_ext.model.memory.activations import LOCAL

    shape = RankShape(kind="mamba", arch=ARCH, seq_length=64, micro_batch_size=2, tp=2)
    built = build_layer(shape, device="cpu")
    layer, params = built.module, list(built.module.parameters())
    x = built.make_inputs()["hidden_states"]
    parts = get_kind("mamba").saved(shape, LOCAL)
    front = _saved(lambda: layer.mixer.in_proj(layer.norm(x)), params)
    assert front == parts["input_norm"] + parts["input_norm_out"]
    d_inner = ARCH.mamba_num_heads * ARCH.mamba_head_dim // shape.tp
    y = torch.randn(64, 2, d_inner, dtype=x.dtype, requires_grad=True)
    assert _saved(lambda: layer.mixer.out_proj(y), params) == parts["mamba_out_proj"]


@pytest.mark.parametrize("spec", ["hybrid_stack_spec", "mamba_hybrid_stack_spec_no_te"])
def test_primus_hybrid_stack_mamba_layer_equals_megatron(spec, one_rank_world):
    """Primus's Mamba ``HybridStack`` specs build megatron-core's ``MambaLayer`` with ``MambaMixer(expand=E)``
    (hybrid_mamba_mla_layer_specs.py at Primus HEAD); no ``mamba_num_heads``: the heads are ``E x hidden /
    head_dim``. The recipe's resolved heads and the kind's parameters equal that module's."""
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.spec_utils import build_module

    from primus_ext.hardware import load_system
    from primus_ext.measure.kind_builders import mamba_layer_spec
    from primus_ext.measure.mamba_stubs import mamba_modules
    from primus_ext.recipe.hybrid import HYBRID_STACK_MAMBA_EXPAND
    from primus_ext.recipe.resolve import resolve_all

    mamba_modules()
    recipe = dict(model_type="mamba", num_layers=8, hidden_size=128, ffn_hidden_size=256, num_attention_heads=4,
                  vocab_size=512, swiglu=True, normalization="RMSNorm", position_embedding_type="none",
                  add_bias_linear=False, is_hybrid_model=True, hybrid_attention_ratio=0.25, mamba_head_dim=16,
                  mamba_num_groups=4, mamba_state_dim=16, seq_length=256, micro_batch_size=1, global_batch_size=8,
                  spec=["primus.backends.megatron.core.models.hybrid.hybrid_mamba_mla_layer_specs", spec])
    model, _, problems, _ = resolve_all(recipe, load_system("mi300x", 1))
    assert not problems, problems
    config = TransformerConfig(num_layers=1, hidden_size=128, num_attention_heads=4, normalization="RMSNorm",
                               add_bias_linear=False, mamba_head_dim=16, mamba_num_groups=4, mamba_state_dim=16,
                               use_cpu_initialization=True, is_hybrid_model=True)
    layer_spec = mamba_layer_spec(config, use_te=False)
    layer_spec.submodules.mixer.params["expand"] = HYBRID_STACK_MAMBA_EXPAND[spec]
    layer = build_module(layer_spec, config=config, layer_number=1,
                         pg_collection=ProcessGroupCollection.use_mpu_process_groups())
    assert model.mamba_num_heads == layer.mixer.nheads == HYBRID_STACK_MAMBA_EXPAND[spec] * 128 // 16
    arch = replace(ARCH, mamba_num_heads=model.mamba_num_heads, mamba_head_dim=16, mamba_num_groups=4,
                   mamba_state_dim=16)
    assert layer_params(RankShape(kind="mamba", arch=arch)) == sum(p.numel() for p in layer.parameters())
