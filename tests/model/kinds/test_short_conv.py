"""The LFM2 short-convolution kind (``kinds.short_conv``): parameters equal Primus's ``Lfm2ShortConv`` (read from the
Primus mirror at test time, built on CPU), its FLOPs by hand, and Primus's LFM2 recipe projects as a hybrid stack of
its halves (it was refused: 'LFM2 short-convolution layers (lfm_layer_types) are not modelled')."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.kinds import get_kind
from primus_ext.model.kinds.short_conv import ShortConvDims
from primus_ext.model.rank_shape import LayerArch, RankShape
from primus_ext.projection.project import project
from primus_ext.recipe.resolve import resolve_all

PRIMUS_GIT = Path("/work/.mirror/AMD-AGI+Primus/repo")
LFM_FILE = "primus/backends/megatron/core/transformer/attention.py"
NODE = load_system("mi355x", 1)
TYPES = ["conv", "conv", "full_attention", "conv", "conv", "conv", "full_attention", "conv", "conv", "conv",
         "full_attention", "conv", "conv", "conv", "full_attention", "conv", "conv", "conv", "full_attention", "conv",
         "conv", "full_attention", "conv", "conv"]
LFM2_8B_A1B = dict(
    num_layers=24, hidden_size=2048, ffn_hidden_size=7168, num_attention_heads=32, group_query_attention=True,
    num_query_groups=8, qk_layernorm=True, kv_channels=128, swiglu=True, add_bias_linear=False,
    normalization="RMSNorm", position_embedding_type="rope", untie_embeddings_and_output_weights=True,
    vocab_size=65536, lfm_layer_types=TYPES, conv_L_cache=3, conv_bias=False, moe_layer_freq="([0]*2+[1]*22)",
    num_experts=32, moe_router_topk=4, moe_ffn_hidden_size=1792, moe_grouped_gemm=True,
    expert_model_parallel_size=8, seq_length=4096, micro_batch_size=8, global_batch_size=256, bf16=True)
"""Primus primus/configs/models/megatron/lfm2_8B_A1B.yaml + its MI355X BF16 experiment (Primus HEAD), flat."""


class _Linear:
    """TE ``TELinear``'s constructor (``parallel_mode=None``) over a torch ``nn.Linear``: the parameters it holds."""

    def __new__(cls, in_features, out_features, *, bias, **_kwargs):
        import torch

        class Linear(torch.nn.Linear):
            def forward(self, x):
                return super().forward(x), None

        return Linear(in_features, out_features, bias=bias)


def _primus_short_conv(dims: ShortConvDims):
    """Primus's ``Lfm2ShortConv`` class from the mirror; ``megatron.training.get_args`` (its sizes) and
    ``transformers``' import probes stood in while it imports (neither is installed)."""
    if not PRIMUS_GIT.is_dir():
        pytest.skip("Primus mirror not found")
    source = subprocess.run(["git", "-C", str(PRIMUS_GIT), "show", f"HEAD:{LFM_FILE}"], capture_output=True, text=True)
    if source.returncode:
        pytest.skip(f"{LFM_FILE} not in the Primus mirror")
    args = types.SimpleNamespace(conv_L_cache=dims.conv_L_cache, conv_bias=dims.conv_bias)
    stubs = {"megatron.training": types.ModuleType("megatron.training"),
             "transformers": types.ModuleType("transformers"),
             "transformers.utils": types.ModuleType("transformers.utils"),
             "transformers.utils.import_utils": types.ModuleType("transformers.utils.import_utils")}
    stubs["megatron.training"].get_args = lambda: args
    stubs["transformers.utils.import_utils"].is_causal_conv1d_available = lambda: False
    stubs["transformers.utils.import_utils"].is_torchdynamo_compiling = lambda: False
    module = stubs["primus_lfm_attention"] = types.ModuleType("primus_lfm_attention")  # its dataclasses look it up
    added = [name for name, stub in stubs.items() if sys.modules.setdefault(name, stub) is stub]
    try:
        exec(compile(source.stdout, LFM_FILE, "exec"), module.__dict__)  # Primus's source, read-only
    finally:
        for name in added:
            del sys.modules[name]  # the stand-ins live only while the module imports (its sizes: get_args, bound)
    return module


@pytest.mark.parametrize("dims", [ShortConvDims(), ShortConvDims(conv_L_cache=4, conv_bias=True)],
                         ids=["L3", "L4-bias"])
def test_params_equal_primus_lfm2_short_conv(dims, one_rank_world):
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.spec_utils import ModuleSpec, build_module

    lfm = _primus_short_conv(dims)
    config = TransformerConfig(num_layers=1, hidden_size=128, num_attention_heads=4, add_bias_linear=False,
                               use_cpu_initialization=True)
    spec = ModuleSpec(module=lfm.Lfm2ShortConv, params={"attn_mask_type": AttnMaskType.causal},
                      submodules=lfm.Lfm2ShortConvSubmodules(in_proj=_Linear, out_proj=_Linear))
    module = build_module(spec, config=config, layer_number=1)
    arch = LayerArch(hidden_size=128, num_attention_heads=4, num_query_groups=4, kv_channels=32, ffn_hidden_size=256,
                     dims=dims)
    assert get_kind("short_conv").params(RankShape(kind="short_conv", arch=arch)) == sum(
        p.numel() for p in module.parameters())
    assert module.conv.weight.shape[-1] == dims.conv_L_cache


def test_macs_by_hand():
    model, _, problems, _ = resolve_all(LFM2_8B_A1B, NODE)
    assert not problems, problems
    macs = get_kind("short_conv").model_macs(model, 4096, True)
    assert macs == {"attention_linear": 4 * 2048 * 2048, "attention_core": 3 * 2048}


def test_lfm2_recipe_projects_as_its_halves():
    model, execution, problems, warnings = resolve_all(LFM2_8B_A1B, NODE)
    assert not problems, problems
    mixers = "".join("C" if t == "conv" else "*" for t in TYPES)
    assert model.hybrid_layer_pattern == "".join(m + ("-" if i < 2 else "E") for i, m in enumerate(mixers))
    assert model.num_layers == 48 and any("LFM2" in w for w in warnings)
    # its recipe's block recompute of 0 layers recomputes nothing: no word of MambaStack's missing checkpointing
    _, _, _, warnings = resolve_all(dict(LFM2_8B_A1B, recompute_granularity="full", recompute_method="block",
                                         recompute_num_layers=0), NODE)
    assert not any("MambaStack" in w for w in warnings)
    p = project(model, execution, NODE)
    assert {"short_conv", "hybrid_attention", "hybrid_mlp", "hybrid_moe"} <= set(p.sources) and 0 < p.mfu <= 1


def test_what_primus_cannot_run_is_refused():
    from primus_ext.recipe.checks import check

    model, execution, _, _ = resolve_all(dict(LFM2_8B_A1B, tensor_model_parallel_size=2), NODE)
    assert any(p.path == "tensor_model_parallel_size" and "parallel_mode=None" in p.message
               for p in check(model, execution, NODE))
    _, _, problems, _ = resolve_all(dict(LFM2_8B_A1B, lfm_layer_types=["conv"] * 23 + ["mamba"]), NODE)
    assert [p.path for p in problems] == ["lfm_layer_types"]
    _, _, problems, _ = resolve_all(dict(LFM2_8B_A1B, conv_L_cache=0), NODE)
    assert "conv_L_cache" in [p.path for p in problems]


def test_its_keys_are_modelled_keys():
    from primus_ext.recipe.catalogue import key_class

    for key in (*ShortConvDims.__dataclass_fields__, "lfm_layer_types"):
        assert key_class(key) == "modelled", key


def test_measuring_it_without_primus_falls_back_to_analytic(one_rank_world):
    from primus_ext.measure.build import UnsupportedLayer, build_layer

    try:
        import primus  # noqa: F401
        pytest.skip("Primus is importable")
    except ImportError:
        pass
    arch = LayerArch(hidden_size=128, num_attention_heads=4, num_query_groups=4, kv_channels=32, ffn_hidden_size=256,
                     dims=ShortConvDims())
    with pytest.raises(UnsupportedLayer, match="analytic"):
        build_layer(RankShape(kind="short_conv", arch=arch, seq_length=64), device="cpu")
