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
