"""``recompute_method: block`` with ``recompute_num_layers: 0``: megatron-core checkpoints no layer, and the step time
and the memory both price it so (``model.recompute``, issue 53 part 2).

The reference is a real megatron-core ``TransformerBlock`` (local spec, CPU): the bytes it saves for backward under
block 0 equal those without recompute, and block 1 saves less. The projection's per-chunk layer counts
(``projection.table.chunk_counts``, the step time) and the memory plan's (``memory.plan``) then say the same: no
layer recomputed, no recompute time, the same activations as without recompute.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from primus_ext.model.memory import estimate_memory
from primus_ext.model.memory.stage import rank_profile, stage_context
from primus_ext.model.recompute import block_layers
from primus_ext.projection.table import chunk_counts
from primus_ext.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]


def _block(execution, n):
    return replace(execution, recompute_granularity="full", recompute_method="block", recompute_num_layers=n)


@pytest.fixture(scope="module")
def mixtral():
    recipe = load_recipe(REPO / "recipes" / "mixtral_8x7B-pretrain.yaml")
    return recipe.model, recipe.execution, recipe.system


def test_block_zero_recomputes_no_layer_for_time_and_memory(mixtral):
    model, e, system = mixtral
    none = replace(e, recompute_granularity=None, recompute_method=None, recompute_num_layers=None)
    zero, one = _block(e, 0), _block(e, 1)
    assert block_layers(zero) == 0 and block_layers(one) == 1 and block_layers(none) is None
    # chunk_counts: (dense kept, dense recomputed, moe kept, moe recomputed, ...) per rank, per chunk
    recomputed = [c[1] + c[3] for rank in chunk_counts(model, zero) for c in rank]
    assert recomputed and not any(recomputed)
    assert all(c[1] + c[3] == 1 for rank in chunk_counts(model, one) for c in rank)
    ctx0, ctxn = stage_context(model, zero, None), stage_context(model, none, None)
    for rank in range(e.pp):
        p0, pn = rank_profile(ctx0, rank), rank_profile(ctxn, rank)
        assert p0.per_mb == pytest.approx(pn.per_mb) and p0.working == 0.0
    assert estimate_memory(model, zero, system).peak_bytes > estimate_memory(model, one, system).peak_bytes


def test_block_zero_is_priced_without_recompute_time(mixtral):
    from primus_ext.projection import project

    model, e, system = mixtral
    none = replace(e, recompute_granularity=None, recompute_method=None, recompute_num_layers=None)
    step = {n: project(model, ex, system).step_time_s for n, ex in
            (("zero", _block(e, 0)), ("one", _block(e, 1)), ("none", none))}
    assert step["zero"] == pytest.approx(step["none"], rel=1e-9)
    assert step["one"] > step["zero"]


def _block_saved_bytes(method: str | None, layers: int | None) -> int:
    torch = pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_block import TransformerBlock
    from megatron.core.transformer.transformer_config import TransformerConfig

    from primus_ext.measure.shims import parallel_context

    with parallel_context(device="cpu"):
        config = TransformerConfig(num_layers=3, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128,
                                   params_dtype=torch.float32, recompute_granularity="full" if method else None,
                                   recompute_method=method, recompute_num_layers=layers)
        block = TransformerBlock(config, get_gpt_layer_local_spec())
        block.train()
        x = torch.randn(32, 2, 64, requires_grad=True)
        mask = torch.triu(torch.ones(32, 32, dtype=torch.bool), diagonal=1)[None, None]  # causal, True = masked
        params = {t.untyped_storage()._cdata for t in (*block.parameters(), mask)}
        seen: dict[int, torch.UntypedStorage] = {}

        def pack(t):
            key = t.untyped_storage()._cdata
            if key not in params:
                seen.setdefault(key, t.untyped_storage())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = block(x, attention_mask=mask)
        total = sum(s.nbytes() for s in seen.values())
        out.sum().backward()
        return total


def test_megatron_block_zero_checkpoints_no_layer():
    none = _block_saved_bytes(None, None)
    assert _block_saved_bytes("block", 0) == none
    assert _block_saved_bytes("block", 1) < none
