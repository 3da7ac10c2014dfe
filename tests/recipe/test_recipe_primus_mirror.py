"""The Primus checkout's MI300X example experiments load unchanged through --config-root.

Located via $PRIMUS_CONFIG_ROOT or ../shared/primus_configs next to the repo; skipped when absent.
Expected values come from the Primus model presets themselves (read here with plain PyYAML).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from recipe_data import primus_root

from primus_ext.recipe import load_recipe

ROOT = primus_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="Primus config mirror not found (set PRIMUS_CONFIG_ROOT)")
EXAMPLES = sorted((ROOT / "examples" / "megatron" / "configs" / "MI300X").glob("*.yaml")) if ROOT else []

# Nodes that make each example's own parallel layout legal (TP*PP*EP fit the world size).
NODES = {"llama3.1_405B-BF16-pretrain.yaml": 8, "mixtral_8x22B_v0.1-BF16-pretrain.yaml": 4}


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_loads_unchanged(example: Path):
    recipe = load_recipe(example, config_roots=[ROOT], env={}, nodes=NODES.get(example.name, 1), validate=False)
    assert recipe.model.num_layers > 0 and recipe.model.vocab_size > 1
    # Primus's module preset extends ../module_base.yaml, absent from the mirror: a named warning
    assert any("module_base.yaml" in w and "not found" in w for w in recipe.warnings)
    # the example's own overrides win over the presets
    assert recipe.origins["micro_batch_size"] == "modules.pre_trainer.overrides.micro_batch_size"
    assert recipe.execution.precision == "bf16"  # trainer_base.yaml: bf16 true


def test_examples_are_legal_except_the_405B_layer_split():
    for example in EXAMPLES:
        recipe = load_recipe(example, config_roots=[ROOT], env={}, nodes=NODES.get(example.name, 1), validate=False)
        paths = [p.path.rsplit(":", 1)[-1] for p in recipe.problems]
        # 126 layers over PP=8: Megatron needs an uneven split; Primus pads layers (allow_padding_num_layers)
        assert paths == (["num_layers"] if "405B" in example.name else []), (example.name, recipe.problems)


def test_deepseek_v3_preset_resolves_like_its_file(tmp_path: Path):
    import yaml

    preset = yaml.safe_load((ROOT / "primus/configs/models/megatron/deepseek_v3.yaml").read_text())
    exp = tmp_path / "dsv3.yaml"
    exp.write_text(
        "modules:\n  pre_trainer:\n    framework: megatron\n    config: pre_trainer.yaml\n"
        "    model: deepseek_v3.yaml\n    overrides: {seq_length: 4096, expert_model_parallel_size: 8}\n"
    )
    recipe = load_recipe(exp, config_roots=[ROOT], env={}, validate=False)
    model = recipe.model
    assert model.num_layers == preset["num_layers"] == 61
    assert model.num_moe_layers == 58 and model.moe_layer_pattern[:3] == (False,) * 3
    assert model.multi_latent_attention and model.q_lora_rank == preset["q_lora_rank"]
    assert model.vocab_size == 129280  # DeepSeekV3 tokenizer, shared/validation/model_archs.csv
    assert model.mtp_num_layers == preset["mtp_num_layers"] == 1
