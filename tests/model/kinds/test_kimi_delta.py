"""The Kimi delta attention kind (``kinds.kimi_delta``): parameters equal Primus's ``KimiDeltaAttention`` (read from
the Primus mirror at test time and built on CPU), its FLOPs are the delta rule's plus its gate projections, and
Zebra-Llama's KDA HybridStack recipes project (they were refused: 'Kimi delta attention ... not modelled')."""

from __future__ import annotations

import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.kinds import get_kind
from primus_ext.model.kinds.gated_delta import rule_macs_per_token
from primus_ext.model.kinds.kimi_delta import KimiDeltaDims
from primus_ext.model.rank_shape import LayerArch, RankShape
from primus_ext.projection.project import project
from primus_ext.recipe.resolve import resolve_all

PRIMUS_GIT = Path("/work/.mirror/AMD-AGI+Primus/repo")
KDA_FILE = "primus/backends/megatron/core/models/hybrid/kimi_delta_attention.py"
DIMS = KimiDeltaDims(linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=48,
                     linear_num_key_heads=4, linear_num_value_heads=8)
ARCH = LayerArch(hidden_size=128, num_attention_heads=4, num_query_groups=4, kv_channels=32, ffn_hidden_size=256,
                 dims=DIMS)
NODE = load_system("mi300x", 1)
SPECS = "primus.backends.megatron.core.models.hybrid.hybrid_mamba_mla_layer_specs"
ZEBRA_300M_KDA = dict(
    model_type="mamba", num_layers=24, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8,
    vocab_size=128256, swiglu=True, normalization="RMSNorm", position_embedding_type="none", add_bias_linear=False,
    is_hybrid_model=True, hybrid_attention_ratio=0.0, linear_conv_kernel_dim=4, linear_key_head_dim=32,
    linear_value_head_dim=64, linear_num_key_heads=8, linear_num_value_heads=8, seq_length=2048,
    micro_batch_size=8, global_batch_size=64, bf16=True, spec=[SPECS, "kda_hybrid_stack_spec_no_te"],
    use_fla_triton_kda=True)
"""Primus primus/configs/models/megatron/zebra_llama_300M_kda_pure.yaml + its MI300X experiment (Primus HEAD)."""


def _primus_kda():
    """Primus's ``kimi_delta_attention`` module from the mirror (``megatron.training`` stood in: not installed)."""
    if not PRIMUS_GIT.is_dir():
        pytest.skip("Primus mirror not found")
    source = subprocess.run(["git", "-C", str(PRIMUS_GIT), "show", f"HEAD:{KDA_FILE}"], capture_output=True,
                            text=True)
    if source.returncode:
        pytest.skip(f"{KDA_FILE} not in the Primus mirror")
    name = "primus_kimi_delta_attention"
    module = sys.modules.get(name)
    if module is None:
        module = types.ModuleType(name)
        stub = types.ModuleType("megatron.training")
        stub.get_args = lambda: types.SimpleNamespace()
        added = sys.modules.setdefault("megatron.training", stub) is stub
        sys.modules[name] = module
        try:
            exec(compile(source.stdout, KDA_FILE, "exec"), module.__dict__)  # Primus's source, read-only
        finally:
            if added:
                del sys.modules["megatron.training"]  # the stand-in lives only while the module imports
    return module


@pytest.mark.parametrize("impl", ["te", "local"])
@pytest.mark.parametrize("dims", [DIMS, replace(DIMS, linear_conv_kernel_dim=3, linear_num_value_heads=4),
                                  replace(DIMS, linear_key_head_dim=16, linear_value_head_dim=64)],
                         ids=["base", "k3-v4", "dk16-dv64"])
def test_params_equal_primus_kimi_delta_attention(dims, impl, one_rank_world):
    """``kda_hybrid_stack_spec``'s layer (norm fused into in_proj: counted here as the layer's norm, same
    parameters; ``gate_norm`` a norm over hidden_size) and ``_no_te``'s (``gate_norm`` an ``IdentityOp``)."""
    import torch
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.identity_op import IdentityOp
    from megatron.core.transformer.spec_utils import ModuleSpec, build_module
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    kda = _primus_kda()
    config = TransformerConfig(num_layers=1, hidden_size=128, num_attention_heads=4, normalization="RMSNorm",
                               add_bias_linear=False, use_cpu_initialization=True,
                               activation_func=torch.nn.functional.silu,
                               **{k: getattr(dims, k) for k in KimiDeltaDims.__dataclass_fields__})
    spec = ModuleSpec(module=kda.KimiDeltaAttention, submodules=kda.KimiDeltaAttentionSubmodules(
        in_proj=ColumnParallelLinear, gate_norm=WrappedTorchNorm if impl == "te" else IdentityOp,
        out_norm=WrappedTorchNorm, out_proj=RowParallelLinear))
    mixer = build_module(spec, config=config, layer_number=1,
                         pg_collection=ProcessGroupCollection.use_mpu_process_groups())
    pre_norm = WrappedTorchNorm(config=config, hidden_size=128, eps=1e-6)
    real = sum(p.numel() for p in mixer.parameters()) + sum(p.numel() for p in pre_norm.parameters())
    shape = RankShape(kind="kimi_delta", arch=replace(ARCH, dims=dims))
    assert get_kind("kimi_delta").params(shape, impl=impl) == real
    assert mixer.in_proj.weight.shape[0] == dims.in_proj_dim and mixer.dt_bias.numel() == dims.gate_dim


def test_macs_by_hand():
    # in_proj, f_b, g_b, out_proj per token; conv and the delta rule (on the value heads) as the core
    macs = get_kind("kimi_delta").model_macs(resolve_all(ZEBRA_300M_KDA, NODE)[0], 2048, True)
    d = KimiDeltaDims(linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=64,
                      linear_num_key_heads=8, linear_num_value_heads=8)
    in_proj = 2 * 256 + 512 + 2 * 64 + 8
    assert macs["attention_linear"] == 1024 * in_proj + 64 * 256 + 64 * 512 + 512 * 1024
    assert macs["attention_core"] == pytest.approx(1024 * 4 + rule_macs_per_token(d))


def test_zebra_kda_stack_resolves_and_projects():
    model, execution, problems, _ = resolve_all(ZEBRA_300M_KDA, NODE)
    assert not problems, problems
    assert model.hybrid_layer_pattern == "K-" * 12 and get_kind("kimi_delta").dims(model).linear_num_key_heads == 8
    p = project(model, execution, NODE)
    assert "kimi_delta" in p.sources and "gated_delta" not in p.sources and 0 < p.mfu <= 1
    # its saved bytes hold the per-channel fp32 decay: more than a GDN layer of the same sizes saves
    kda, gdn = RankShape(kind="kimi_delta", arch=ARCH), RankShape(kind="gated_delta", arch=ARCH)
    from primus_ext.model.memory.activations import TE

    assert (get_kind("kimi_delta").saved(kda, TE)["kda_rule_gates"]
            > get_kind("gated_delta").saved(gdn, TE)["gdn_rule_gates"])


def test_tensor_parallel_is_refused_as_primus_asserts():
    from primus_ext.recipe.checks import check

    model, execution, _, _ = resolve_all(dict(ZEBRA_300M_KDA, tensor_model_parallel_size=2), NODE)
    assert any(p.path == "tensor_model_parallel_size" and "tp_size=1" in p.message
               for p in check(model, execution, NODE))


def test_measuring_it_without_primus_falls_back_to_analytic(one_rank_world):
    from primus_ext.measure.build import UnsupportedLayer, build_layer
    from primus_ext.measure.kimi_delta_builder import KERNEL_NOTE

    try:
        import primus  # noqa: F401
        pytest.skip("Primus is importable: its module builds")
    except ImportError:
        pass
    with pytest.raises(UnsupportedLayer, match="analytic") as info:
        build_layer(RankShape(kind="kimi_delta", arch=ARCH, seq_length=64), device="cpu")
    assert KERNEL_NOTE in str(info.value)


def test_a_stack_that_sets_none_of_its_sizes_says_so():
    """Zebra-Llama 1B KDA reads zebra_llama_1B.yaml, which sets no ``linear_*`` key: megatron-core's defaults are
    what Primus builds, and the projection now says it uses them."""
    sizes = {k: v for k, v in ZEBRA_300M_KDA.items() if not k.startswith("linear_")}
    model, _, problems, warnings = resolve_all(sizes, NODE)
    assert not problems and get_kind("kimi_delta").dims(model) == KimiDeltaDims()
    assert any("kimi_delta" in w and "defaults" in w for w in warnings)
    _, _, _, warnings = resolve_all(ZEBRA_300M_KDA, NODE)
    assert not any("kimi_delta" in w and "defaults" in w for w in warnings)


def test_the_pure_pytorch_rule_is_named_not_priced():
    """Without ``use_fla_triton_kda`` Primus runs its Python-loop chunked rule; the projection (fla's kernel cost)
    says so rather than passing it off as that path's time."""
    _, _, problems, warnings = resolve_all(dict(ZEBRA_300M_KDA, use_fla_triton_kda=False), NODE)
    assert not problems and any("pure-PyTorch" in w for w in warnings)
    assert not any("pure-PyTorch" in w for w in resolve_all(ZEBRA_300M_KDA, NODE)[3])
