"""Shipped recipes: load legal, and match model_archs.csv and the measured run they cite."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from recipe_data import REPO

from primus_ext.recipe import check, load_recipe

RECIPES = sorted((REPO / "recipes").glob("*-pretrain.yaml"))
VALIDATION = REPO.parent / "shared" / "validation"

# recipe -> (model_archs.csv name, measured gpu, num_gpus, tp, pp, vpp, cp, ep, mbs, gbs or None)
EXPECTED = {
    "llama3.1_8B": ("Llama3.1-8B", "MI325X", 64, 1, 1, 1, 1, 1, 2, None),
    "llama3.1_70B": ("Llama3.1-70B", "H100", 64, 4, 8, 5, 1, 1, 1, 256),
    "llama3.1_405B": ("Llama3.1-405B", "H100", 1024, 8, 8, 8, 2, 1, 1, 1536),
    "mixtral_8x7B": ("Mixtral-8x7B", "B200", 64, 1, 1, 1, 1, 8, 2, 256),
    "mixtral_8x22B": ("Mixtral-8x22B", "MI355X", 64, 1, 4, 2, 1, 8, 2, None),
    "deepseek_v3": ("DeepSeek-V3", "GB200", 256, 1, 8, 4, 1, 32, 1, 2048),
    "qwen3_30B_A3B": ("Qwen3-30B-A3B", "H100", 16, 1, 2, 12, 1, 8, 1, 1024),
    "qwen3_235B_A22B": ("Qwen3-235B-A22B", "H100", 256, 2, 8, 4, 1, 32, 1, 8192),
    "gpt_oss_120B": ("GPT-OSS-120B", "H100", 64, 1, 4, 1, 1, 8, 1, 1280),
}


def _archs() -> dict[str, dict[str, str]]:
    with (VALIDATION / "model_archs.csv").open() as fh:
        return {row["name"]: row for row in csv.DictReader(fh)}


def _leading_int(text: str) -> int:
    return int(text.split()[0]) if text.strip() else 0


def test_every_model_of_the_issue_is_shipped():
    assert {p.name.removesuffix("-pretrain.yaml") for p in RECIPES} == set(EXPECTED)
    assert (REPO / "recipes" / "llama3.1_8B-pretrain.yaml").is_file()  # the README's default


RECIPE_MBS = {"mixtral_8x22B": 1}
"""Recipes that deliberately differ from their row's MBS (explained in the recipe's header)."""


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_loads_legal_without_warnings(path: Path):
    recipe = load_recipe(path, env={})
    assert recipe.warnings == ()
    assert check(recipe.model, recipe.execution, recipe.system) == []


@pytest.mark.skipif(not VALIDATION.is_dir(), reason="shared/validation not found")
@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_matches_architecture_and_measured_run(path: Path):
    recipe = load_recipe(path, env={})
    name, gpu, gpus, tp, pp, vpp, cp, ep, mbs, gbs = EXPECTED[recipe.model.name]
    arch = _archs()[name]
    m, e = recipe.model, recipe.execution
    assert (m.num_layers, m.hidden_size, m.num_attention_heads) == (
        int(arch["num_layers"]), int(arch["hidden"]), int(arch["num_heads"]))
    assert m.ffn_hidden_size == int(arch["ffn_hidden"])
    # a Primus mock-data run builds NullTokenizer(vocab_size): one more id for end-of-document
    mock = recipe.megatron_args.get("mock_data") and "mock data" in m.vocab_source
    assert m.vocab_size == _leading_int(arch["vocab"]) + (1 if mock else 0)
    if arch["num_kv_heads"].isdigit():
        assert m.num_query_groups == int(arch["num_kv_heads"])
    else:
        assert m.multi_latent_attention and arch["mla(yes/no)"] == "yes"
    if arch["num_experts"]:
        assert (m.num_experts, m.moe_router_topk) == (int(arch["num_experts"]), int(arch["topk"]))
        assert m.moe_ffn_hidden_size == int(arch["moe_ffn_hidden"])
        assert m.num_dense_layers == _leading_int(arch["first_k_dense"] or "0")
        shared = _leading_int(arch["shared_experts"] or "0")
        assert bool(m.moe_shared_expert_intermediate_size) == bool(shared)
    else:
        assert not m.is_moe
    assert recipe.system.gpu.name.lower().startswith(gpu.lower()) or recipe.system.name == gpu.lower()
    assert (recipe.system.world_size, e.tp, e.pp, e.vpp, e.cp, e.ep, e.micro_batch_size) == (
        gpus, tp, pp, vpp, cp, ep, RECIPE_MBS.get(recipe.model.name, mbs))
    assert e.dp == gpus // (tp * pp * cp)
    if gbs is not None:
        assert e.global_batch_size == gbs
    with (VALIDATION / "measured_throughput.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["gpu"] == gpu and int(r["num_gpus"]) == gpus
                and (r["tp"], r["pp"], r["cp"], r["mbs"]) == (str(tp), str(pp), str(cp), str(mbs))]
    assert rows, "the cited measured row exists"
