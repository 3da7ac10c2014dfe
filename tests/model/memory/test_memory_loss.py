"""The loss's saved bytes under megatron-core's two cross-entropy implementations.

``native`` is checked against the real megatron-core output layer + loss in
tests/measure/test_memory_vs_megatron.py (fp32 exp(logits) saved, to the byte). ``te`` (Transformer Engine's
parallel cross entropy: the gradient is written into the bf16 logits in forward and those are saved) cannot
be built on CPU; its bytes are hand-derived here: 2 instead of 4 bytes per logit saved, and no separate bf16
logits gradient in backward.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.layers import rank_shapes
from primus_ext.model.memory import estimate_memory, peak_bytes
from primus_ext.model.memory.activations import loss_saved_bytes
from primus_ext.specs import ExecutionSpec, ModelSpec

GQA = ModelSpec(name="gqa", num_layers=8, hidden_size=1024, ffn_hidden_size=2816, num_attention_heads=16,
                num_query_groups=4, kv_channels=64, vocab_size=32000, activation="swiglu")
H100 = load_system("h100", 4)


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 2), (4, 4)])
def test_te_loss_keeps_bf16_logits_instead_of_fp32_and_no_gradient_copy(tp, pp):
    base = ExecutionSpec(tensor_model_parallel_size=tp, sequence_parallel=tp > 1, pipeline_model_parallel_size=pp,
                         data_parallel_size=32 // (tp * pp), micro_batch_size=2, global_batch_size=64,
                         seq_length=2048)
    te = ExecutionSpec(**{**base.__dict__, "cross_entropy_fusion_impl": "te"})
    native_mem, te_mem = estimate_memory(GQA, base, H100), estimate_memory(GQA, te, H100)
    tokens, vocab = 2 * 2048, GQA.padded_vocab_size(tp) / tp  # RankShape carries the padded vocabulary
    assert loss_saved_bytes(rank_shapes(GQA, base)["output"], "native") == 4 * tokens * vocab
    assert loss_saved_bytes(rank_shapes(GQA, base)["output"], "te") == 2 * tokens * vocab
    last_native, last_te = native_mem.stages[-1], te_mem.stages[-1]
    # one micro-batch in flight on the last stage: 2 bytes per logit less saved ...
    assert last_native.activations_bytes - last_te.activations_bytes == pytest.approx(2 * tokens * vocab)
    # ... and no bf16 gradient of the (padded) logits beside them
    padded = GQA.padded_vocab_size(tp) / tp
    assert last_native.detail["other.loss_logits"] == 2 * tokens * padded
    assert last_te.detail["other.loss_logits"] == 0
    for a, b in zip(native_mem.stages[:-1], te_mem.stages[:-1], strict=True):  # only the loss's stage changes
        assert a.total_bytes == b.total_bytes
    assert peak_bytes(GQA, te) == te_mem.peak_bytes


def test_recipe_reads_cross_entropy_fusion_impl():
    from primus_ext.recipe import load_recipe

    recipe = Path(__file__).resolve().parents[3] / "recipes" / "llama3.1_8B-pretrain.yaml"
    te = ["cross_entropy_loss_fusion=true", "cross_entropy_fusion_impl=te"]
    assert load_recipe(recipe, te).execution.cross_entropy_fusion_impl == "te"
    assert load_recipe(recipe).execution.cross_entropy_fusion_impl == "native"  # megatron-core's default
    # without the loss fusion switch megatron-core runs the unfused loss, whatever the impl says
    assert load_recipe(recipe, te[1:]).execution.cross_entropy_fusion_impl == "native"
