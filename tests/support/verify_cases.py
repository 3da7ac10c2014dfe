"""Short-run variants of several tuned configurations and their Megatron-LM launch plans (shared by the tests of
``primus_ext.launcher.megatron_cli`` and of verify-top): dense BF16 Megatron-LM recipe, Primus Llama 8B in FP8,
with PP 4 x VPP 2 and full / selective recompute, the zero-bubble and V schedules, Primus Mixtral 8x7B (MoE, EP).
"""

from __future__ import annotations

from pathlib import Path

from primus_ext.launcher.verify_top import Candidate, write_variants
from primus_ext.recipe import load_recipe
from primus_ext.tune.axes import CP, EP, MBS, PP, RECOMPUTE, SCHEDULE, TP, TP_OVERLAP, VPP
from primus_ext.tune.space import build_space

REPO = Path(__file__).resolve().parents[2]
DENSE_BF16 = """\
num_layers: 8
hidden_size: 2048
ffn_hidden_size: 5632
num_attention_heads: 16
group_query_attention: true
num_query_groups: 4
vocab_size: 32000
normalization: RMSNorm
swiglu: true
position_embedding_type: rope
untie_embeddings_and_output_weights: true
disable_bias_linear: true
bf16: true
seq_length: 4096
max_position_embeddings: 4096
micro_batch_size: 1
global_batch_size: 64
tensor_model_parallel_size: 1
recompute_granularity: full
recompute_method: uniform
recompute_num_layers: 1
masked_softmax_fusion: false
tokenizer_type: HuggingFaceTokenizer
tokenizer_model: meta-llama/Llama-2-7b-hf
lr: 3.0e-4
"""
CASES = {
    # name: (recipe, cluster, nodes, [axis changes of each candidate])
    "dense-bf16-megatron": (None, "h100", 1, [{TP: 2}, {TP: 2, MBS: 2}, {PP: 2, VPP: 2, SCHEDULE: "interleaved"}]),
    "llama8b-fp8-primus": ("recipes/llama3.1_8B-pretrain.yaml", None, None,
                           [{MBS: 1}, {TP: 2, TP_OVERLAP: True, RECOMPUTE: "selective"},
                            {PP: 4, VPP: 2, SCHEDULE: "interleaved", RECOMPUTE: "full"}, {TP: 2, CP: 2}]),
    "llama8b-zero-bubble": ("recipes/llama3.1_8B-pretrain.yaml", None, None,
                            [{PP: 4, SCHEDULE: "zb-h1"}, {PP: 4, VPP: 2, SCHEDULE: "zb-v"}]),
    "mixtral-moe-primus": ("recipes/mixtral_8x7B-pretrain.yaml", None, None, [{EP: 8, MBS: 1}, {EP: 4, PP: 2}]),
}


def candidates(recipe, changes: list[dict]) -> list[Candidate]:
    space = build_space(recipe.model, recipe.execution, recipe.system, {})
    base = dict(space.config_of(recipe.execution))
    out = []
    for i, change in enumerate(changes, start=1):
        config = {**base, **change}
        out.append(Candidate(index=i, config=config, execution=space.to_execution(config), step_time_s=1.0 + i,
                             tokens_per_s_per_gpu=100.0 / i))
    return out


def verify_manifests(tmp: Path) -> dict[str, dict]:
    """Each case's verify-top manifest (written under ``tmp``; its entries carry ``launch.megatron_plan``)."""
    out = {}
    for name, (path, cluster, nodes, changes) in CASES.items():
        if path is None:
            path = tmp / f"{name}.yaml"
            path.write_text(DENSE_BF16)
        else:
            path = REPO / path
        recipe = load_recipe(path, cluster=cluster, nodes=nodes, validate=False)
        manifest, _ = write_variants(recipe, candidates(recipe, changes), tmp / name, iters=10, cluster=cluster,
                                     nodes=nodes)
        out[name] = manifest
    return out
