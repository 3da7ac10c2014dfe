"""Issue 47: values from the environment are used, never shown, whatever the variable is called."""

from __future__ import annotations

import json

import pytest
from recipe_data import REPO

from primus_ext.cli import main
from primus_ext.errors import PrimusExtError, RecipeError
from primus_ext.recipe import load_recipe
from primus_ext.recipe.secrets import hide_text

SECRETS = {"PGPASSWORD": "pgS3cret-one", "MYSQL_PWD": "myS3cret-two", "DATABASE_URL": "postgres://u:dbS3cret@h/db"}


@pytest.fixture
def recipe(tmp_path, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    text = (REPO / "recipes" / "llama3.1_8B-pretrain.yaml").read_text()
    text = text.replace("exp_name: ${PRIMUS_EXP_NAME:llama3.1_8B-pretrain}", "exp_name: ${PGPASSWORD}")
    text = text.replace("      train_iters: 50\n", "      train_iters: 50\n      data_path: ${DATABASE_URL}\n"
                        "      wandb_api: x-${MYSQL_PWD}\n")
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


def _no_secret(text: str) -> None:
    for value in SECRETS.values():
        assert value not in text
    assert "S3cret" not in text


def test_recipe_show_and_its_json_show_templates(recipe, capsys):
    assert main(["recipe", "show", str(recipe)]) == 0
    out = capsys.readouterr()
    _no_secret(out.out + out.err)
    assert main(["recipe", "show", str(recipe), "--json"]) == 0
    out = capsys.readouterr()
    _no_secret(out.out + out.err)
    doc = json.loads(out.out)
    assert doc["exp_name"] == "${PGPASSWORD}" and doc["unknown_keys"]["wandb_api"] == "x-${MYSQL_PWD}"


def test_the_values_are_still_used(recipe):
    loaded = load_recipe(recipe)
    assert loaded.megatron_args["data_path"] == SECRETS["DATABASE_URL"]  # passed to Megatron as it is
    assert hide_text(f"--data-path {loaded.megatron_args['data_path']}", loaded.hidden) == "--data-path ${DATABASE_URL}"


def test_a_secret_in_a_validated_key_is_not_shown_in_the_error(recipe):
    text = recipe.read_text().replace("micro_batch_size: 2", "micro_batch_size: ${MYSQL_PWD}")
    recipe.write_text(text)
    with pytest.raises(RecipeError) as err:
        load_recipe(recipe)
    _no_secret(str(err.value))
    assert "${MYSQL_PWD}" in str(err.value)


def test_a_url_from_the_environment_does_not_name_a_folder(recipe):
    from primus_ext.launcher.projection_only import experiment_dir

    recipe.write_text(recipe.read_text().replace("workspace: ${PRIMUS_WORKSPACE:./output}",
                                                 "workspace: ${DATABASE_URL}"))
    with pytest.raises(PrimusExtError) as err:
        experiment_dir(recipe)
    _no_secret(str(err.value))
    assert "${DATABASE_URL}" in str(err.value)


def test_numbers_from_the_environment_are_parameters(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIMUS_TP", "2")
    recipe = load_recipe(REPO / "recipes" / "llama3.1_8B-pretrain.yaml")
    assert recipe.execution.tp == 2 and not recipe.hidden
