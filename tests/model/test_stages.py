"""Pipeline split: checked against megatron-core's own layer-count / offset functions."""

from dataclasses import replace

import pytest
import torch

from primus_ext.errors import RecipeError
from primus_ext.model.stages import layout_problems, parse_layout, pipeline_plan
from primus_ext.specs import ExecutionSpec, ModelSpec


def model(n=8, mtp=0, moe=()):
    return ModelSpec(num_layers=n, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4,
                     num_query_groups=4, kv_channels=16, vocab_size=256, mtp_num_layers=mtp,
                     moe_layer_pattern=moe, num_experts=4 if moe else None)


def test_interleaved_assignment_matches_megatron_docstring():
    # megatron transformer_block.py: 8 layers, 2 stages, 4 chunks -> stage 0: [0] [2] [4] [6]
    plan = pipeline_plan(model(8), ExecutionSpec(pipeline_model_parallel_size=2,
                                                 virtual_pipeline_model_parallel_size=4))
    assert [c.layers for c in plan[0].chunks] == [(0,), (2,), (4,), (6,)]
    assert [c.layers for c in plan[1].chunks] == [(1,), (3,), (5,), (7,)]
    plan = pipeline_plan(model(8), ExecutionSpec(pipeline_model_parallel_size=2,
                                                 virtual_pipeline_model_parallel_size=2))
    assert [c.layers for c in plan[0].chunks] == [(0, 1), (4, 5)]
    assert plan[0].embedding and not plan[0].output and plan[1].output


def test_uneven_first_last_and_accounting():
    plan = pipeline_plan(model(10), ExecutionSpec(pipeline_model_parallel_size=4,
                                                  decoder_first_pipeline_num_layers=1,
                                                  decoder_last_pipeline_num_layers=3))
    assert [len(s.layers) for s in plan] == [1, 3, 3, 3]
    plan = pipeline_plan(model(6), ExecutionSpec(pipeline_model_parallel_size=4,
                                                 account_for_embedding_in_pipeline_split=True,
                                                 account_for_loss_in_pipeline_split=True))
    assert [len(s.layers) for s in plan] == [1, 2, 2, 1]


def test_layout_string_and_mtp():
    assert parse_layout("Et*2|(tt|)*2,m|L") == [["embedding", "decoder", "decoder"], ["decoder"] * 2,
                                               ["decoder"] * 2, ["mtp"], ["loss"]]
    m = model(6, mtp=1)
    plan = pipeline_plan(m, ExecutionSpec(pipeline_model_parallel_size=2,
                                          pipeline_model_parallel_layout="Ett|tt|ttm|L"))
    assert [c.layers for c in plan[0].chunks] == [(0, 1), (4, 5)]
    assert plan[1].chunks[1].output and plan[1].chunks[0].layers == (2, 3)
    assert plan[0].mtp_layers == 1  # flat stage 2 = rank 0, chunk 1


def test_moe_counts_per_stage():
    m = model(4, moe=(False, True, True, True))
    plan = pipeline_plan(m, ExecutionSpec(pipeline_model_parallel_size=2))
    assert plan[0].moe_layers(m) == 1 and plan[0].dense_layers(m) == 1 and plan[1].moe_layers(m) == 2


@pytest.mark.parametrize(
    "execution, fragment",
    [
        (ExecutionSpec(pipeline_model_parallel_size=3), "not divisible by PP*VPP"),
        (ExecutionSpec(pipeline_model_parallel_size=4, decoder_first_pipeline_num_layers=3), "cannot be split"),
        (ExecutionSpec(pipeline_model_parallel_size=2, pipeline_model_parallel_layout="Et|tX|L"), "unknown"),
        (ExecutionSpec(pipeline_model_parallel_size=2, pipeline_model_parallel_layout="Ettt|tL"), "decoder layers"),
        (ExecutionSpec(pipeline_model_parallel_size=2, pipeline_model_parallel_layout="Ettt|t|tttL"),
         "multiple of PP"),
    ],
)
def test_illegal_splits_are_reported(execution, fragment):
    problems = layout_problems(model(8), execution)
    assert problems and any(fragment in p.message for p in problems), problems
    with pytest.raises(RecipeError):
        pipeline_plan(model(8), execution)


def test_matches_megatron_functions():
    """Layer counts and offsets equal megatron-core's for several splits (no process group needed)."""
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    cases = [dict(pp=4, vpp=None, first=None, last=None, n=16), dict(pp=4, vpp=2, first=None, last=None, n=16),
             dict(pp=4, vpp=None, first=2, last=6, n=16), dict(pp=3, vpp=2, first=2, last=2, n=8)]
    for c in cases:
        cfg = TransformerConfig(num_layers=c["n"], hidden_size=64, num_attention_heads=4,
                                pipeline_model_parallel_size=c["pp"], pipeline_dtype=torch.float32,
                                virtual_pipeline_model_parallel_size=c["vpp"],
                                num_layers_in_first_pipeline_stage=c["first"],
                                num_layers_in_last_pipeline_stage=c["last"], use_cpu_initialization=True)
        plan = pipeline_plan(model(c["n"]), ExecutionSpec(
            pipeline_model_parallel_size=c["pp"], virtual_pipeline_model_parallel_size=c["vpp"],
            decoder_first_pipeline_num_layers=c["first"], decoder_last_pipeline_num_layers=c["last"]))
        for stage in plan:
            for chunk in stage.chunks:
                vp = chunk.chunk if c["vpp"] else None
                assert get_num_layers_to_build(cfg, vp_stage=vp, pp_rank=stage.rank) == len(chunk.layers), c
                if chunk.layers:
                    assert get_transformer_layer_offset(cfg, vp_stage=vp, pp_rank=stage.rank) == chunk.layers[0], c


def test_layout_sets_vpp_when_unset_like_megatron():
    # megatron-core transformer_config.py: VPP unset -> the layout's stages per rank
    from primus_ext.model.stages import virtual_stages

    layout = "Et*2|t*2|t*2|t*2L"
    unset = ExecutionSpec(pipeline_model_parallel_size=2, pipeline_model_parallel_layout=layout)
    assert virtual_stages(unset) == 2 == len(pipeline_plan(model(8), unset)[0].chunks)
    assert virtual_stages(replace(unset, virtual_pipeline_model_parallel_size=2)) == 2
    assert virtual_stages(replace(unset, pipeline_model_parallel_layout="Et*4|t*4L")) == 1
    assert virtual_stages(replace(unset, pipeline_model_parallel_layout="Et*8|L?")) == 1  # layout_problems says why
    assert virtual_stages(ExecutionSpec(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=4)) == 4
