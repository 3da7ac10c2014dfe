"""Hostile or broken recipes: every problem listed, bounded work, no traceback."""

from __future__ import annotations

import pytest
from recipe_data import BASE

from primus_ext.errors import Problem, RecipeError
from primus_ext.recipe import load_recipe
from primus_ext.recipe.moe_pattern import PatternError, parse_pattern_expression


def _flat(path, extra: str = "") -> None:
    path.write_text("".join(f"{k}: {v}\n" for k, v in BASE.items()) + extra)


def test_alias_bomb_is_expanded_once_per_node(tmp_path, monkeypatch):
    """Aliased nodes are expanded once: four levels of ten aliases over two templated strings make 2 * 10^4
    string expansions if every alias is walked again (nine levels, 2 * 10^9, hung ``recipe show``); shared, 2."""
    from primus_ext.recipe import templates

    calls = []
    real = templates.expand_string
    monkeypatch.setattr(templates, "expand_string", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    lines = ['a0: &a0 ["${X:1}", "${X:1}"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 5)]
    path = tmp_path / "bomb.yaml"
    _flat(path, "\n".join(lines) + "\n")
    recipe = load_recipe(path)
    assert "a4" in recipe.unknown_keys and calls.count("${X:1}") == 2


def test_deeply_nested_layer_pattern_is_a_problem_not_a_crash(tmp_path):
    with pytest.raises(PatternError, match="nested too deeply"):
        parse_pattern_expression("(" * 2000 + "1" + ")" * 2000)
    path = tmp_path / "deep.yaml"
    _flat(path, f"num_experts: 8\nmoe_layer_freq: '{'(' * 2000}1{')' * 2000}'\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert "nested too deeply" in str(err.value) and "characters)" in str(err.value)  # the long value is cut


def test_bad_cluster_still_lists_the_argument_problems(tmp_path):
    path = tmp_path / "types.yaml"
    _flat(path, "swiglu: maybe\n")
    path.write_text(path.read_text().replace("tensor_model_parallel_size: 1", "tensor_model_parallel_size: two"))
    with pytest.raises(RecipeError) as err:
        load_recipe(path, cluster="no_such_gpu")
    paths = {p.path for p in err.value.problems}
    assert {"--cluster", "swiglu"} <= paths


def test_long_values_are_cut_in_messages():
    text = str(Problem(path="k", message="bad", value="x" * 5000))
    assert len(text) < 300 and "5,000 characters" in text


@pytest.mark.parametrize("experts", [-2, "abc", 0, 2.5])
def test_an_invalid_num_experts_does_not_hide_the_other_moe_problems(tmp_path, experts):
    path = tmp_path / "moe.yaml"
    _flat(path, f"num_experts: {experts!r}\nmoe_ffn_hidden_size: 1024\nmoe_shared_expert_intermediate_size: -5\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    paths = [p.path for p in err.value.problems]
    assert "num_experts" in paths and "moe_shared_expert_intermediate_size" in paths
    assert "is set but num_experts is not" not in str(err.value)  # it is set, and wrong: said once


def test_a_world_size_problem_does_not_hide_the_pipeline_split(tmp_path):
    path = tmp_path / "split.yaml"
    _flat(path)
    text = path.read_text()
    for key, value in (("num_layers", 30), ("hidden_size", 1536), ("num_attention_heads", 24),
                       ("num_query_groups", 6)):
        text = text.replace(f"{key}: {BASE[key]}\n", f"{key}: {value}\n")
    path.write_text(text + "tensor_model_parallel_size: 3\npipeline_model_parallel_size: 4\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    messages = " ".join(f"{p.path}: {p.message}" for p in err.value.problems)
    assert "not divisible by TP*PP*CP" in messages and "num_layers: 30 layers" in messages


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "1.0e+400"])
def test_non_finite_numbers_are_refused(tmp_path, value):
    path = tmp_path / "nan.yaml"
    _flat(path, f"num_experts: 8\nmoe_ffn_hidden_size: 1024\nmoe_expert_capacity_factor: {value}\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert any(p.path == "moe_expert_capacity_factor" and "finite" in p.message for p in err.value.problems)


def test_a_refused_size_does_not_add_a_false_second_problem(tmp_path):
    path = tmp_path / "neg.yaml"
    _flat(path)
    path.write_text(path.read_text().replace(f"hidden_size: {BASE['hidden_size']}\n", "hidden_size: -1\n"))
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert [p.path for p in err.value.problems] == ["hidden_size"]  # no "kv_channels: 1 not divisible by 16"
