"""DeepSeek-V4 (``kinds.deepseek_v4``, ``recipe.deepseek_v4``): the compressor, indexer and hyper-connection mixer
parameters equal Primus's modules (read from the Primus mirror at test time and built on CPU), the Flash model's
parameter count matches its published size (the recipes: ``tests/recipe/test_deepseek_v4_recipe.py``)."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.kinds.deepseek_v4 import compressor_params, hc_params
from primus_ext.model.layers import hybrid_symbol_params, rank_shapes
from primus_ext.recipe.resolve import resolve_all

PRIMUS_GIT = Path("/work/.mirror/AMD-AGI+Primus/repo")
TRANSFORMER = "primus/backends/megatron/core/transformer"
FLASH_RATIOS = [0, 0] + [4, 128] * 20 + [4, 0]
FLASH = dict(
    model_type="deepseek_v4", num_layers=43, hidden_size=4096, num_attention_heads=64, num_query_groups=1,
    kv_channels=512, qk_pos_emb_head_dim=64, ffn_hidden_size=18432, moe_ffn_hidden_size=2048,
    moe_shared_expert_intermediate_size=2048, q_lora_rank=1024, o_lora_rank=1024, o_groups=8, num_experts=256,
    moe_router_topk=6, index_topk=512, index_head_dim=128, index_n_heads=64, attn_sliding_window=128, hc_mult=4,
    num_hash_layers=3, mtp_num_layers=1, compress_ratios=str(FLASH_RATIOS), vocab_size=129280,
    make_vocab_size_divisible_by=64, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
    untie_embeddings_and_output_weights=True, seq_length=4096, micro_batch_size=1, global_batch_size=256,
    bf16=True, expert_model_parallel_size=8, moe_grouped_gemm=True)
"""Primus primus/configs/models/megatron/deepseek_v4_flash.yaml (+ deepseek_v4_base.yaml) at Primus HEAD: its
``compress_ratios`` (44 entries, the MTP layer's last), with the MI355X recipe's batch and EP."""
FLASH_PUBLISHED = 284e9
"""DeepSeek-V4-Flash: 284B total parameters (13B activated), DeepSeek's model card (huggingface.co/deepseek-ai/
DeepSeek-V4-Flash); the main model without its MTP module, as DeepSeek-V3's 671B was. Not stated in the Primus
mirror (its yamls cite config.json only)."""


def _primus(name: str) -> types.ModuleType:
    """Primus's ``transformer/NAME.py`` from the mirror, its ``primus.*`` imports stood in: ``LocalRMSNorm`` by a
    ``dim``-wide weight (its only parameter: local_rmsnorm.py), the fp32 pin a no-op, every Triton kernel absent."""
    import torch

    if not PRIMUS_GIT.is_dir():
        pytest.skip("Primus mirror not found")
    source = subprocess.run(["git", "-C", str(PRIMUS_GIT), "show", f"HEAD:{TRANSFORMER}/{name}.py"],
                            capture_output=True, text=True)
    if source.returncode:
        pytest.skip(f"{name}.py not in the Primus mirror")

    class Norm(torch.nn.Module):
        def __init__(self, dim, eps=1e-6, **_):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(int(dim)))

    class Mixin:
        pass

    real = {"LocalRMSNorm": Norm, "KeepInFp32Mixin": Mixin, **_REAL}

    class Stub(types.ModuleType):
        def __getattr__(self, attr):
            return real.get(attr, lambda *a, **k: None)

    saved = dict(sys.modules)
    for dotted in ("primus", "primus.backends", "primus.backends.megatron", "primus.backends.megatron.core"):
        sys.modules.setdefault(dotted, Stub(dotted))

    class Finder:
        @staticmethod
        def find_spec(fullname, path=None, target=None):
            if fullname.startswith("primus.") or fullname.startswith("primus_turbo"):
                import importlib.machinery
                return importlib.machinery.ModuleSpec(fullname, Loader())
            return None

    class Loader:
        def create_module(self, spec):
            module = Stub(spec.name)
            module.__path__ = []
            return module

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, Finder)
    module = types.ModuleType(f"primus_v4_{name}")
    try:
        exec(compile(source.stdout, name, "exec"), module.__dict__)  # Primus's source, read-only
    finally:
        sys.meta_path.remove(Finder)
        for key in set(sys.modules) - set(saved):
            del sys.modules[key]
    return module


_REAL: dict[str, type] = {}
"""Primus classes already read that a later module imports (the indexer's ``Compressor``)."""


def _numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("ratio", [4, 128])
@pytest.mark.parametrize("hidden,width", [(64, 32), (96, 16)])
def test_compressor_params_equal_primus(ratio, hidden, width):
    compressor = _primus("compressor").Compressor(hidden_size=hidden, head_dim=width, ratio=ratio)
    assert compressor_params(hidden, width, ratio) == _numel(compressor)


@pytest.mark.parametrize("k", [2, 4])
def test_hyper_mixer_params_equal_primus(k):
    mixer = _primus("hyper_connection").HyperMixer(hidden_size=48, hc_mult=k)
    assert hc_params(48, k) == _numel(mixer)


def test_indexer_params_equal_primus():
    """The CSA layer's indexer part of ``dsv4_csa``'s parameters (the CSA kind minus the HCA kind, less the two
    compressors' difference) equals Primus's ``Indexer`` (its mini-compressor included)."""
    _REAL["Compressor"] = _primus("compressor").Compressor
    indexer = _primus("indexer").Indexer(hidden_size=64, index_head_dim=16, index_n_heads=4, index_topk=8,
                                         compress_ratio=4)
    h, ihd, heads = 64, 16, 4
    expected = h * (ihd + heads) + ihd * ihd * heads + compressor_params(h, ihd, 4)
    assert expected == _numel(indexer)


def _flash(**over):
    args = dict(FLASH, **over)
    model, execution, problems, warnings = resolve_all(args, load_system("mi355x", 1))
    assert not problems, problems
    return model, execution, warnings


def test_flash_parameter_count_matches_published_size():
    model, execution, _ = _flash(expert_model_parallel_size=1)
    per_symbol = hybrid_symbol_params(model, execution)
    shapes = rank_shapes(model, execution)
    edges = sum(layer_params_of(shapes, kind) for kind in ("embedding", "output"))
    total = sum(per_symbol[c] for c in model.hybrid_layer_pattern) + edges
    assert model.hybrid_layer_pattern.count("S") == 21 and model.hybrid_layer_pattern.count("H") == 20
    assert model.hybrid_layer_pattern[:6] == "WUWUSU" and model.mtp_layer_pattern == "WV"
    assert abs(total - FLASH_PUBLISHED) / FLASH_PUBLISHED < 0.01, total


def layer_params_of(shapes, kind) -> int:
    from primus_ext.model.layers import layer_params

    return layer_params(shapes[kind])


FLASH_ACTIVATED = 13e9
"""DeepSeek-V4-Flash: 13B activated parameters per token (the same model card as ``FLASH_PUBLISHED``)."""


def test_flash_activated_parameters_match_published():
    """Every layer's attention and shared expert, ``moe_router_topk`` of its routed experts, the embedding and the
    output layer: within 6 % of the card's 13B (the card rounds; whether it counts the output layer is not said)."""
    model, execution, _ = _flash(expert_model_parallel_size=1)
    per_symbol, shapes = hybrid_symbol_params(model, execution), rank_shapes(model, execution)
    a = shapes["dsv4_moe"].arch
    idle = (a.num_experts - a.moe_router_topk) * 3 * a.hidden_size * a.moe_ffn_hidden_size  # SwiGLU: fc1 x 2, fc2
    active = sum(per_symbol[c] - (idle if c in "UV" else 0) for c in model.hybrid_layer_pattern)
    active += sum(layer_params_of(shapes, kind) for kind in ("embedding", "output"))
    assert abs(active - FLASH_ACTIVATED) / FLASH_ACTIVATED < 0.06, active


@pytest.mark.parametrize(("ratio", "topk", "s"), [(4, 512, 4096), (4, 512, 1024), (128, 0, 4096), (4, 64, 8192)])
def test_compressed_keys_are_the_mean_over_causal_positions(ratio, topk, s):
    """The closed forms against a walk over every query position: the compressed positions before it (all of them
    on HCA, at most ``topk`` on CSA) and its sliding window."""
    from primus_ext.model.kinds.deepseek_v4 import compressed_keys, window_keys

    walked = sum(min(topk, p / ratio) if topk else p / ratio for p in range(s)) / s
    assert compressed_keys(ratio, topk, s) == pytest.approx(walked, rel=0.01)
    assert window_keys(128, s) == pytest.approx(sum(min(p + 1, 128) for p in range(s)) / s, rel=0.01)
