"""Primus's own MI300X / MI325X experiment recipes, read as they are from a Primus-shaped tree.

Located via $PRIMUS_CONFIG_ROOT or ../shared/primus_configs next to the repo (Primus fd1eeab, data only);
skipped when absent. Each recipe either loads legally (and projects to finite, possible figures) or is
refused with a reason a Primus user would agree with: an architecture the projection cannot build, a
layout that needs more nodes than given (with the count), or what Megatron itself refuses.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from recipe_data import primus_root

from primus_ext.errors import RecipeError
from primus_ext.projection import project
from primus_ext.recipe import load_recipe
from primus_ext.recipe.presets import SHIPPED_RECIPES

ROOT = primus_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="Primus config mirror not found (set PRIMUS_CONFIG_ROOT)")
CONFIGS = ROOT / "examples" / "megatron" / "configs" if ROOT else Path()
EXAMPLES = sorted([*(CONFIGS / "MI300X").rglob("*.yaml"), *(CONFIGS / "MI325X").rglob("*.yaml")]) if ROOT else []
CLUSTER = {"MI300X": "mi300x", "MI325X": "mi325x"}

REFUSED_FAMILIES = ("flux_",)
"""Diffusion recipes. Primus's own hybrid stacks (Zebra-Llama's HybridStack of Mamba-2, gated DeltaNet or Kimi delta
attention mixers) project (``model.kinds.mamba`` / ``gated_delta`` / ``kimi_delta``)."""


def _refused_family(name: str) -> bool:
    return name.startswith(REFUSED_FAMILIES)


PROJECTED_FAMILIES = ("mamba_", "llama2_", "llama3", "qwen2.5_", "qwen3_14B", "qwen3_8B", "qwen3_4B", "qwen3_32B",
                      "qwen3_30B", "mixtral_8x7B", "deepseek_v2_lite", "gpt_oss_20B", "llama4_")


def _cluster(path: Path) -> str:
    return CLUSTER[path.relative_to(CONFIGS).parts[0]]


def _outcome(path: Path, nodes: int | None = None):
    try:
        return load_recipe(path, cluster=_cluster(path), nodes=nodes, env={})
    except RecipeError as err:
        return err


@pytest.mark.parametrize("example", EXAMPLES, ids=[str(p.relative_to(CONFIGS)) for p in EXAMPLES])
def test_every_recipe_projects_or_is_refused_for_a_stated_reason(example: Path):
    outcome = _outcome(example)
    if isinstance(outcome, RecipeError):
        messages = [p.message for p in outcome.problems]
        nodes = next((p for p in outcome.problems if p.path == "nodes"), None)
        if nodes is not None:  # the recipe needs more nodes than the one assumed: at that count it loads
            assert "needs a multiple of" in nodes.message and "--nodes" in nodes.fix
            need = int(nodes.fix.split("--nodes ")[1].split()[0])
            outcome = _outcome(example, need)
            if isinstance(outcome, RecipeError):  # Megatron's own check: 126 layers over PP 8 with no uneven split
                assert "405B" in example.name
                assert [p.path.rsplit(":", 1)[-1] for p in outcome.problems] == ["num_layers"]
                return
        else:
            assert all("not modelled: primus-ext projects GPT-style" in m for m in messages), messages
            assert _refused_family(example.name), (example.name, messages)
            return
    assert not _refused_family(example.name), example.name
    recipe = outcome
    assert recipe.config_root is not None  # found by walking up from the recipe: no --config-root given
    assert not any(Path(f).resolve().is_relative_to(SHIPPED_RECIPES) for f in recipe.preset_files)
    assert not any("bundled" in w or "unknown key" in w for w in recipe.warnings), recipe.warnings
    p = project(recipe.model, recipe.execution, recipe.system, None)
    assert p.tokens_per_s_per_gpu > 0 and math.isfinite(p.step_time_ms) and 0 < p.mfu <= 1


def _at_needed_nodes(path: Path):
    outcome = _outcome(path)
    nodes = next((p for p in outcome.problems if p.path == "nodes"), None) if isinstance(outcome, RecipeError) \
        else None
    return _outcome(path, int(nodes.fix.split("--nodes ")[1].split()[0])) if nodes else outcome


def test_the_families_that_must_project_do():
    loaded = {p.name for p in EXAMPLES if not isinstance(_at_needed_nodes(p), RecipeError)}
    for family in PROJECTED_FAMILIES:
        assert any(name.startswith(family) for name in loaded), family


def test_presets_come_from_the_checkout_and_are_listed():
    recipe = load_recipe(CONFIGS / "MI300X" / "llama3.1_8B-BF16-pretrain.yaml", env={})
    names = [Path(f).name for f in recipe.preset_files]
    # model chain first (lowest precedence), then the module chain, then the experiment itself
    assert names[:2] == ["primus_megatron_model.yaml", "language_model.yaml"]
    assert names.index("llama3.1_8B.yaml") < names.index("pre_trainer.yaml") < names.index(
        "llama3.1_8B-BF16-pretrain.yaml") == len(names) - 1
    assert Path(recipe.config_root).resolve() == ROOT.resolve()
    # Primus's mock-data patch: NullTokenizer, vocabulary 131072 (+ its end-of-document id)
    assert recipe.model.vocab_size == 131073 and "mock data" in recipe.model.vocab_source
    assert any("mock_data" in w for w in recipe.warnings)


def test_a_recipe_outside_any_checkout_says_it_used_the_bundled_presets(tmp_path: Path):
    copy = tmp_path / "llama3.1_8B.yaml"
    shutil.copy(CONFIGS / "MI300X" / "llama3.1_8B-BF16-pretrain.yaml", copy)
    recipe = load_recipe(copy, env={}, cluster="mi300x")  # outside configs/<GPU>/: no target of its own
    assert recipe.config_root is None
    assert any("bundled" in w and "--config-root" in w for w in recipe.warnings)
    assert any(Path(f).resolve().is_relative_to(SHIPPED_RECIPES) for f in recipe.preset_files)
    # with --config-root the checkout's presets are used and the bundled ones never mixed in
    rooted = load_recipe(copy, config_roots=[ROOT], env={}, cluster="mi300x")
    assert not any(Path(f).resolve().is_relative_to(SHIPPED_RECIPES) for f in rooted.preset_files)


def test_architecture_refusals_name_the_family():
    # Zebra-Llama's Mamba-2 HybridStack (expand 1) projects: 4 MLA + 12 Mamba mixers, each followed by an MLP
    zebra = load_recipe(CONFIGS / "MI300X" / "zebra_llama_1B-pretrain.yaml", env={}, validate=False)
    assert zebra.model.hybrid_layer_pattern == ("*-" + "M-" * 3) * 4 and zebra.model.mamba_num_heads == 32
    # and its Kimi delta attention stack: the same allocation, K (kimi_delta) mixers
    kda = load_recipe(CONFIGS / "MI300X" / "zebra_llama_1B_kda-pretrain.yaml", env={}, validate=False)
    assert kda.model.hybrid_layer_pattern == ("*-" + "K-" * 3) * 4
    # its gated DeltaNet stack and Qwen3.5's gated DeltaNet layers project (model.kinds.gated_delta)
    gdn = load_recipe(CONFIGS / "MI300X" / "zebra_llama_1B_gdn-pretrain.yaml", env={}, validate=False)
    assert gdn.model.hybrid_layer_pattern == "G-" * 16
    # megatron-core's MambaModel (Primus's copy of mamba_stack_spec): 48 Mamba-2 layers
    assert load_recipe(CONFIGS / "MI300X" / "mamba_370M-pretrain.yaml", env={}).model.hybrid_layer_pattern == "M" * 48
    qwen = load_recipe(CONFIGS / "MI300X" / "qwen3_5_35B_A3B-BF16-pretrain.yaml", env={}, validate=False)
    assert qwen.model.hybrid_layer_pattern == "GEGEGE*E" * 10
    with pytest.raises(RecipeError) as err:
        load_recipe(CONFIGS / "MI300X" / "diffusion" / "flux_535m_pretrain.yaml", env={})
    assert "diffusion" in str(err.value)


def test_deepseek_v3_preset_resolves_like_its_file(tmp_path: Path):
    import yaml

    preset = yaml.safe_load((ROOT / "primus/configs/models/megatron/deepseek_v3.yaml").read_text())
    exp = tmp_path / "dsv3.yaml"
    exp.write_text(
        "modules:\n  pre_trainer:\n    framework: megatron\n    config: pre_trainer.yaml\n"
        "    model: deepseek_v3.yaml\n    overrides: {seq_length: 4096, expert_model_parallel_size: 8}\n"
    )
    recipe = load_recipe(exp, config_roots=[ROOT], env={}, validate=False, cluster="mi300x")
    model = recipe.model
    assert model.num_layers == preset["num_layers"] == 61
    assert model.num_moe_layers == 58 and model.moe_layer_pattern[:3] == (False,) * 3
    assert model.multi_latent_attention and model.q_lora_rank == preset["q_lora_rank"]
    assert model.vocab_size == 129280  # DeepSeekV3 tokenizer, shared/validation/model_archs.csv
    assert model.mtp_num_layers == preset["mtp_num_layers"] == 1


def test_a_yaml_that_is_no_recipe_is_refused_as_such(tmp_path: Path):
    """Primus keeps other YAMLs beside its recipes (e.g. Transformer Engine precision configs)."""
    other = tmp_path / "te-precision.yaml"
    other.write_text("configs: {bf16: {training_recipe: {}}}\nmatchers: {qkv: {pattern: '*.linear_qkv'}}\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(other, env={})
    assert len(err.value.problems) == 1 and "neither a Primus experiment" in err.value.problems[0].message
