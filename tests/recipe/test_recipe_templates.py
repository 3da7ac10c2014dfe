"""${VAR} / ${VAR:default} templates: set, unset, default, re-parse of a whole-template value."""

from __future__ import annotations

import pytest

from primus_ext.errors import Problem, RecipeError
from primus_ext.recipe import load_recipe
from primus_ext.recipe.templates import expand_templates


def expand(data, env):
    problems: list[Problem] = []
    return expand_templates(data, env, problems, path="f.yaml:"), problems


def test_env_set_wins_over_default_and_is_reparsed_as_yaml():
    out, problems = expand({"n": "${K3_NUM_LAYERS:93}", "f": "${LR:1.0e-5}", "z": "${D:null}"}, {"K3_NUM_LAYERS": "24"})
    assert out == {"n": 24, "f": 1.0e-5, "z": None}
    assert not problems


def test_unset_uses_default_typed():
    out, _ = expand({"n": "${K3_NUM_LAYERS:93}", "b": "${FLAG:true}", "s": "${NAME:llama}"}, {})
    assert out == {"n": 93, "b": True, "s": "llama"}
    assert isinstance(out["n"], int)


def test_template_inside_a_string_stays_a_string():
    out, _ = expand({"model": "${PRIMUS_MODEL:qwen3_30B_A3B}.yaml", "x": "a-${N:8}-b"}, {})
    assert out == {"model": "qwen3_30B_A3B.yaml", "x": "a-8-b"}


def test_nested_lists_and_non_strings_untouched():
    out, _ = expand({"l": ["${A:1}", 2, {"k": "${B:x}"}], "i": 7, "n": None}, {"A": "5"})
    assert out == {"l": [5, 2, {"k": "x"}], "i": 7, "n": None}


def test_empty_default_and_colon_in_default():
    out, _ = expand({"a": "${E:}", "u": "${URL:http://host:80}"}, {})
    assert out == {"a": None, "u": "http://host:80"}


def test_undefined_without_default_is_a_problem_with_its_path():
    _, problems = expand({"modules": {"x": "${NOPE}", "y": "${ALSO_NOPE}"}}, {})
    assert [p.path for p in problems] == ["f.yaml:modules.x", "f.yaml:modules.y"]
    assert "NOPE" in problems[0].message and problems[0].fix


def test_loader_reports_every_undefined_variable(write):
    path = write("r.yaml", "num_layers: ${L}\nhidden_size: ${H}\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(path, env={}, cluster="mi300x")
    assert len(err.value.problems) == 2
    assert {p.path.split(":")[-1] for p in err.value.problems} == {"num_layers", "hidden_size"}


def test_credential_variables_are_never_read_into_a_recipe():
    env = {"OPENAI_API_KEY": "sk-live-123", "HF_TOKEN": "hf_abc", "PRIMUS_TOKENIZED_DATA_PATH": "/data/tok"}
    out, problems = expand({"exp_name": "${OPENAI_API_KEY}", "tp": "${HF_TOKEN:1}", "note": "x-${OPENAI_API_KEY}",
                            "data": "${PRIMUS_TOKENIZED_DATA_PATH}"}, env)
    assert out == {"exp_name": "${OPENAI_API_KEY}", "tp": "${HF_TOKEN:1}", "note": "x-${OPENAI_API_KEY}",
                   "data": "/data/tok"}  # a data path is not a credential
    assert not problems and "sk-live" not in repr(out) and "hf_abc" not in repr(out)


def test_a_credential_in_a_validated_key_is_not_shown_in_the_error(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nseq_length: 128\n"
                    "max_position_embeddings: 128\nglobal_batch_size: 8\nmicro_batch_size: 1\n"
                    "tensor_model_parallel_size: ${DB_PASSWORD}\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(path, env={"DB_PASSWORD": "hunter2"})
    assert "hunter2" not in str(err.value) and "tensor_model_parallel_size" in str(err.value)
