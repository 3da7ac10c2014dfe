"""YAML read within bounds decided before the work (``files.safe_yaml``), values cut in messages."""

from __future__ import annotations

import time

import pytest
import yaml

from primus_ext.errors import Problem, RecipeError, shown
from primus_ext.files import safe_yaml
from primus_ext.model.stages import parse_layout
from primus_ext.recipe.loader import load_recipe


def _alias_chain(levels: int) -> str:
    lines = ["l0: &l0 [a, a, a, a, a, a, a, a, a, a]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + f"\ncontext_parallel_size: *l{levels}\n"


def test_alias_chain_refused_before_it_is_expanded() -> None:
    start = time.process_time()
    with pytest.raises(safe_yaml.YAMLTooLarge, match="expand to more than"):
        safe_yaml.load(_alias_chain(8))  # 10^9 leaves from 1.9 kB (was 35 s of CPU, then MemoryError)
    assert time.process_time() - start < 1.0


def test_a_long_list_is_refused_while_parsing() -> None:
    text = "data_path: [" + ",".join(["1"] * 300_000) + "]\n"
    start = time.process_time()
    with pytest.raises(safe_yaml.YAMLTooLarge, match="YAML nodes"):
        safe_yaml.load(text)
    assert time.process_time() - start < 2.0  # a 3.8 MB list took 38 s


def test_ordinary_documents_and_shared_aliases_still_load() -> None:
    assert safe_yaml.load(_alias_chain(3))["context_parallel_size"][0][0][0][0] == "a"  # 11 111 nodes
    dups: list[str] = []
    assert safe_yaml.load("a: 1\na: 2\n", dups) == {"a": 2} and dups and "line 2" in dups[0]
    with pytest.raises(yaml.YAMLError):
        safe_yaml.load("a: [1")


def test_recipe_with_an_alias_bomb_is_a_recipe_error(tmp_path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_chain(8))
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert "refused before reading it whole" in str(err.value)


def test_layout_repeats_bounded_before_expansion() -> None:
    start = time.process_time()
    for layout in ("(t*99999)*99999", "t*99999999999999999999999", "(" + "t*9" * 1000 + ")*9999"):
        with pytest.raises(ValueError, match="expands to more than"):
            parse_layout(layout)
    assert time.process_time() - start < 1.0
    assert len(parse_layout("Et*3|(tt|)*29,m|L")) == 32


def test_values_shown_in_messages_are_bounded() -> None:
    nested: list = ["x"] * 10
    for _ in range(8):
        nested = [nested] * 10
    start = time.process_time()
    text = str(Problem(path="k", message="bad", value=nested))
    assert len(text) < 400 and time.process_time() - start < 0.5
    assert "bits>" in shown(10**5000)  # Python refuses str() of such an int; shown() does not raise


def test_deep_nesting_refused_before_libyaml_recurses() -> None:
    with pytest.raises(yaml.YAMLError):  # ours, or libyaml >= 0.2.5's own flow-level bound: either way no crash
        safe_yaml.load("a: " + "[" * 30_000 + "]" * 30_000)  # 25 000 levels crashed the process (C recursion)
    with pytest.raises(safe_yaml.YAMLTooLarge, match="nested more than"):
        safe_yaml.load("".join(" " * i + "- \n" for i in range(0, 2 * 300, 2)))  # block style: 300 levels
    assert isinstance(safe_yaml.load("a: " + "[" * 50 + "]" * 50)["a"], list)


@pytest.mark.parametrize("text", ["a: &a [*a]", "&a [*a]", "a: &a {b: *a}", "a: &a {<<: *a}",
                                  "a: &a [1, [2, *a]]", "a: &a {b: [{c: *a}]}"])
def test_an_alias_inside_its_own_node_is_refused_at_once(text: str) -> None:
    # issue 47: `a: &a [*a]` (10 bytes) never returned, growing ~17 MB/s
    with pytest.raises(safe_yaml.YAMLTooLarge, match="refers to the node that contains it"):
        safe_yaml.load(text)


def test_merge_keys_and_shared_anchors_still_load() -> None:
    assert safe_yaml.load("base: &b {x: 1, y: 2}\nc: {<<: *b, y: 3}\nd: [*b, *b]") == {
        "base": {"x": 1, "y": 2}, "c": {"x": 1, "y": 3}, "d": [{"x": 1, "y": 2}, {"x": 1, "y": 2}]}


def test_aliases_that_nest_past_the_depth_bound_are_refused() -> None:
    text = "a0: &a0 " + "[" * 60 + "1" + "]" * 60 + "\n" + "a1: &a1 " + "[" * 60 + "*a0" + "]" * 60 + "\n"
    with pytest.raises(safe_yaml.YAMLTooLarge, match="once its aliases"):
        safe_yaml.load(text)


@pytest.mark.parametrize("text", ["x: !!timestamp 99999-01-01", "x: 2024-13-45", "x: !!float abc",
                                  "x: !!int 0xzz"])
def test_values_yaml_cannot_build_are_yaml_errors(text: str) -> None:
    # issue 47: `!!timestamp 99999-01-01` raised AttributeError ... groupdict
    with pytest.raises(yaml.YAMLError):
        safe_yaml.load(text)


def test_anchors_do_not_cross_documents() -> None:
    with pytest.raises(yaml.YAMLError):
        safe_yaml.load("a: &x 1\n---\nb: *x\n")
