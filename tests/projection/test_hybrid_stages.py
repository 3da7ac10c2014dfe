"""A hybrid pattern splits over pipeline stages in the projection as megatron-core's ``MambaStack`` splits it, and a
hybrid model's stage sums hold each stage's own M / * / - / E layers."""

from __future__ import annotations

import pytest

from primus_ext.model.hybrid import stage_patterns
from primus_ext.model.kinds.registry import pattern_kinds
from primus_ext.model.stages import pipeline_plan
from primus_ext.projection.table import chunk_counts as _chunk_counts
from primus_ext.specs import ExecutionSpec, ModelSpec

NANO = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
MODEL = ModelSpec(name="nano-like", num_layers=52, hidden_size=256, ffn_hidden_size=512, num_attention_heads=4,
                  num_query_groups=2, kv_channels=64, vocab_size=1024, num_experts=8, moe_router_topk=2,
                  moe_ffn_hidden_size=128, hybrid_layer_pattern=NANO, moe_layer_pattern=tuple(c == "E" for c in NANO),
                  mamba_num_heads=8, mamba_head_dim=64, mamba_num_groups=2, mamba_state_dim=16)


@pytest.mark.parametrize("pp,first,last", [(1, None, None), (2, None, None), (4, None, None), (4, 10, None),
                                           (4, None, 16), (3, 16, 16)])
def test_projection_splits_the_pattern_as_mambastack(pp, first, last):
    ex = ExecutionSpec(pipeline_model_parallel_size=pp, decoder_first_pipeline_num_layers=first,
                       decoder_last_pipeline_num_layers=last)
    expected = stage_patterns(NANO, pp, first=first, last=last)  # = MambaStack's (tests/model/test_hybrid.py)
    plan = pipeline_plan(MODEL, ex)
    assert tuple("".join(NANO[i] for c in stage.chunks for i in c.layers) for stage in plan) == expected
    counts = _chunk_counts(MODEL, ex)
    for stage, rank in zip(expected, counts, strict=True):
        (chunk,) = rank
        assert chunk[:4] == (0, 0, 0, 0)  # no GPT layers
        kinds = len(pattern_kinds(NANO))
        assert dict(zip(pattern_kinds(NANO).values(), chunk[7:7 + kinds], strict=True)) == {  # the kinds NANO has
            "mamba": stage.count("M"), "hybrid_attention": stage.count("*"), "hybrid_moe": stage.count("E")}
        assert chunk[7 + kinds:] == (0,) * (1 + kinds)  # no MTP depths sharing weights


def test_stage_parameters_in_the_projection_and_the_memory_model_agree_with_the_split():
    from primus_ext.hardware import load_system
    from primus_ext.model.layers import hybrid_stage_params as stage_params
    from primus_ext.model.memory.stage import rank_profile, stage_context
    from primus_ext.projection.evaluate import evaluate

    system = load_system("h100", 1)
    ex = ExecutionSpec(pipeline_model_parallel_size=4, tensor_model_parallel_size=2, data_parallel_size=1)
    stages = evaluate(MODEL, ex, system).stages
    per_rank = tuple(s.dense_params + s.expert_params for s in stages)
    assert per_rank == stage_params(MODEL, ex)
    ctx = stage_context(MODEL, ex, None)
    assert tuple(int(rank_profile(ctx, r).total_params) for r in range(4)) == stage_params(MODEL, ex)


def test_the_batch_evaluator_prices_hybrid_layers_as_evaluate_does():
    from primus_ext.hardware import load_system
    from primus_ext.projection.evaluate import evaluate
    from primus_ext.projection.evaluate_batch import evaluate_many

    system = load_system("h100", 1)
    base = dict(seq_length=2048, global_batch_size=64)
    executions = [ExecutionSpec(**base, data_parallel_size=8, expert_model_parallel_size=8),
                  ExecutionSpec(**base, data_parallel_size=2, tensor_model_parallel_size=2,
                                pipeline_model_parallel_size=2)]
    batch = evaluate_many(MODEL, executions, system)
    for i, ex in enumerate(executions):
        assert batch.problems[i] is None
        assert batch.tokens_per_s_per_gpu[i] == pytest.approx(evaluate(MODEL, ex, system).tokens_per_s_per_gpu)


def test_selective_recompute_applies_inside_the_hybrid_layers():
    """core_attn / moe / layernorm recompute run inside ``TransformerLayer`` / ``MoELayer``, which a ``MambaStack``
    holds too: less activation memory, more backward time; full recompute is not a MambaStack path (no change)."""
    from primus_ext.hardware import load_system
    from primus_ext.model.memory import estimate_memory
    from primus_ext.projection.evaluate import evaluate

    system = load_system("h100", 1)
    base = ExecutionSpec(seq_length=4096, global_batch_size=64, data_parallel_size=8, expert_model_parallel_size=8)
    selective = ExecutionSpec(**{**base.__dict__, "recompute_granularity": "selective",
                                 "recompute_modules": ("moe", "core_attn", "layernorm")})
    full = ExecutionSpec(**{**base.__dict__, "recompute_granularity": "full", "recompute_method": "uniform",
                            "recompute_num_layers": 1})
    act = {name: estimate_memory(MODEL, ex, system).stages[0].activations_bytes
           for name, ex in (("none", base), ("selective", selective), ("full", full))}
    assert act["selective"] < act["none"] == act["full"]
    step = {name: evaluate(MODEL, ex, system).step_time_s for name, ex in (("none", base), ("selective", selective))}
    assert step["selective"] > step["none"]


def test_a_hybrid_model_in_nvfp4_prices_its_mamba_gemms_in_fp4():
    """The Mamba mixer's GEMMs read the FP4 recipe under FP4 precision (they read the FP8 recipe, ``delayed``, and a
    held-out NVFP4 row of a hybrid model stopped ``validate`` with a KeyError: issue 56)."""
    from primus_ext.hardware import load_system
    from primus_ext.model.analytic import device_seconds
    from primus_ext.model.layers import rank_shapes
    from primus_ext.projection.evaluate import evaluate

    system = load_system("b200", 1)
    times = {}
    for precision in ("bf16", "fp8", "fp4"):
        ex = ExecutionSpec(data_parallel_size=8, expert_model_parallel_size=8, precision=precision,
                           seq_length=4096, global_batch_size=64)
        shape = rank_shapes(MODEL, ex)["mamba"]
        assert shape.fp4_recipe == "nvfp4" or precision != "fp4"
        times[precision] = sum(device_seconds(shape, system.gpu)[:2])
        assert evaluate(MODEL, ex, system).step_time_s > 0
    assert times["fp4"] < times["fp8"] < times["bf16"]
