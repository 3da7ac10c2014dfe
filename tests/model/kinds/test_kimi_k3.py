"""The Kimi-K3 kinds (``kinds.kimi_k3``): KDA parameters equal Primus's K3 ``KimiDeltaAttention`` (read from the
Primus mirror at test time and built on CPU), the attention-residual schedule is Primus's, and the two MI355X Kimi-K3
recipes resolve and project (they were refused: 'linear_attention_freq: ... not modelled')."""

from __future__ import annotations

import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest

from primus_ext.model.kinds import get_kind
from primus_ext.model.kinds.kimi_k3 import KimiK3DeltaDims, blocks_before, mean_candidates
from primus_ext.model.rank_shape import LayerArch, RankShape

PRIMUS_GIT = Path("/work/.mirror/AMD-AGI+Primus/repo")
KDA_FILE = "primus/backends/megatron/core/transformer/kimi_k3/kimi_delta_attention.py"
DIMS = KimiK3DeltaDims(linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=32,
                       linear_num_key_heads=4, linear_num_value_heads=4)
ARCH = LayerArch(hidden_size=128, num_attention_heads=4, num_query_groups=4, kv_channels=32, ffn_hidden_size=256,
                 dims=DIMS)


def _git_show(path: str) -> str:
    if not PRIMUS_GIT.is_dir():
        pytest.skip("Primus mirror not found")
    found = subprocess.run(["git", "-C", str(PRIMUS_GIT), "show", f"HEAD:{path}"], capture_output=True, text=True)
    if found.returncode:
        pytest.skip(f"{path} not in the Primus mirror")
    return found.stdout


def _primus_k3_kda():
    """Primus's K3 ``kimi_delta_attention`` module from the mirror; its kernel package (Triton / FlyDSL, not
    importable here) stood in while it imports: construction reads only ``KDA_BACKENDS`` / ``resolve_kda_backend``."""
    name = "primus_k3_kimi_delta_attention"
    if name in sys.modules:
        return sys.modules[name]
    source = _git_show(KDA_FILE)
    kernels = types.ModuleType("primus.backends.megatron.core.transformer.kimi_k3.kda_kernels")
    kernels.KDA_BACKENDS = ("eager",)
    kernels.resolve_kda_backend = lambda name: None
    kernels.kda_gate = kernels.kda_l2norm = None
    module = types.ModuleType(name)
    added = sys.modules.setdefault(kernels.__name__, kernels) is kernels
    sys.modules[name] = module  # its dataclasses look their module up while the source runs
    try:
        exec(compile(source, KDA_FILE, "exec"), module.__dict__)  # Primus's source, read-only
    finally:
        if added:
            del sys.modules[kernels.__name__]
    return module


@pytest.mark.parametrize("dims", [DIMS, replace(DIMS, linear_conv_kernel_dim=3, linear_num_key_heads=8,
                                                linear_num_value_heads=8),
                                  replace(DIMS, linear_key_head_dim=16, linear_value_head_dim=16)],
                         ids=["base", "k3-h8", "d16"])
def test_params_equal_primus_k3_kimi_delta_attention(dims, one_rank_world):
    """The layer's input norm (a module of its own: ``k3_norm_module``) + ``KimiDeltaAttention``; the first layer
    (``J``) has no residual mixer, a later one (``X``) one of ``2 * hidden``."""
    import torch
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.spec_utils import ModuleSpec, build_module
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    kda = _primus_k3_kda()
    config = TransformerConfig(num_layers=1, hidden_size=128, num_attention_heads=4, normalization="RMSNorm",
                               add_bias_linear=False, use_cpu_initialization=True,
                               activation_func=torch.nn.functional.silu,
                               **{k: getattr(dims, k) for k in ("linear_conv_kernel_dim", "linear_key_head_dim",
                                                                "linear_value_head_dim", "linear_num_key_heads",
                                                                "linear_num_value_heads")})
    spec = ModuleSpec(module=kda.KimiDeltaAttention, submodules=kda.KimiDeltaAttentionSubmodules(
        q_proj=ColumnParallelLinear, k_proj=ColumnParallelLinear, v_proj=ColumnParallelLinear,
        f_a_proj=ColumnParallelLinear, f_b_proj=ColumnParallelLinear, b_proj=ColumnParallelLinear,
        g_proj=ColumnParallelLinear, o_proj=RowParallelLinear))
    mixer = build_module(spec, config=config, layer_number=1,
                         pg_collection=ProcessGroupCollection.use_mpu_process_groups())
    pre_norm = WrappedTorchNorm(config=config, hidden_size=128, eps=1e-6)
    real = sum(p.numel() for p in mixer.parameters()) + sum(p.numel() for p in pre_norm.parameters())
    first = RankShape(kind="kimi_k3_delta_first", arch=replace(ARCH, dims=replace(dims, attn_res_block_size=4)))
    assert get_kind("kimi_k3_delta_first").params(first) == real
    later = replace(first, kind="kimi_k3_delta")
    assert get_kind("kimi_k3_delta").params(later) == real + 2 * 128  # AttentionResidualMixer: norm + proj weights


def test_attention_residual_schedule_is_primus_block_trace():
    """Primus's docstring: block size 4 over 8 layers enters layers with [0, 1, 1, 1, 1, 2, 2, 2] checkpoints."""
    assert [blocks_before(i, 4) for i in range(8)] == [0, 1, 1, 1, 1, 2, 2, 2]
    attn, mlp = mean_candidates(8, 4)
    assert attn == pytest.approx(sum([1, 1, 1, 1, 2, 2, 2]) / 7 + 1)
    assert mlp == pytest.approx(sum([1, 1, 1, 1, 2, 2, 2, 2]) / 8 + 1)
    assert mean_candidates(8, 0) == (0.0, 0.0)


def test_residual_mixer_params_equal_primus_attention_residual_mixer():
    """``AttentionResidualMixer`` (transformer/kimi_k3/attention_residual.py) built on CPU from the mirror: its
    parameters are what each Kimi-K3 half adds for its mixer (its kernel package stood in: construction resolves a
    backend name only)."""
    import torch
    from megatron.core.transformer import TransformerConfig

    path = "primus/backends/megatron/core/transformer/kimi_k3/attention_residual.py"
    source = _git_show(path)
    kernels = types.ModuleType("primus.backends.megatron.core.transformer.kimi_k3.attn_res_kernels")
    kernels.ATTN_RES_BACKENDS = ("eager",)
    kernels.resolve_attn_res_backend = lambda name: None
    kernels.accum_dtype = kernels.fused_score_weight = None
    module = types.ModuleType("primus_k3_attention_residual")
    added = sys.modules.setdefault(kernels.__name__, kernels) is kernels
    try:
        exec(compile(source, path, "exec"), module.__dict__)  # Primus's source, read-only
    finally:
        if added:
            del sys.modules[kernels.__name__]
    config = TransformerConfig(num_layers=1, hidden_size=128, num_attention_heads=4, use_cpu_initialization=True,
                               activation_func=torch.nn.functional.silu)
    real = sum(p.numel() for p in module.AttentionResidualMixer(config).parameters())
    dims = replace(DIMS, attn_res_block_size=4)
    with_mixer = RankShape(kind="kimi_k3_delta", arch=replace(ARCH, dims=dims))
    without = replace(with_mixer, arch=replace(ARCH, dims=replace(dims, attn_res_block_size=0)))
    assert get_kind("kimi_k3_delta").params(with_mixer) - get_kind("kimi_k3_delta").params(without) == real


def test_kda_macs_by_hand():
    """Per token: q, k, v, beta, g_proj (hidden -> 2 qk + 2 v + heads), f_a (hidden -> dk), f_b (dk -> qk), o_proj
    (v -> hidden), the mixer's 3 x hidden per candidate; the three convs and the delta rule as the core."""
    from primus_ext.model.kinds.gated_delta import rule_macs_per_token
    from primus_ext.recipe.resolve import resolve_all
    from tests.recipe.test_kimi_k3_recipe import NODE, SMALL

    model = resolve_all(SMALL, NODE)[0]
    d = get_kind("kimi_k3_delta").dims(model)
    macs = get_kind("kimi_k3_delta").model_macs(model, 512, True)
    h, qk, n = 256, 4 * 64, d.attn_res_candidates
    assert n == pytest.approx(sum(blocks_before(i, 4) + 1 for i in range(1, 8)) / 7)
    assert macs["attention_linear"] == pytest.approx(h * (4 * qk + 4) + h * 64 + 64 * qk + qk * h + 3 * n * h)
    assert macs["attention_core"] == pytest.approx(3 * qk * 4 + rule_macs_per_token(d))
