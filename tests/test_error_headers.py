"""Error headers name what was wrong (issue 53): a flag is not a recipe, a missing file is not an invalid one."""

from __future__ import annotations

from pathlib import Path

from primus_ext.cli import main
from primus_ext.errors import Problem, RecipeError

RECIPE = "recipes/llama3.1_8B-pretrain.yaml"


def test_the_header_follows_the_problems_paths():
    flag, env = Problem(path="--nodes", message="m"), Problem(path="$NNODES", message="m")
    key = Problem(path="tensor_model_parallel_size", message="m")
    assert str(RecipeError(problems=[flag], source="r.yaml")).startswith("invalid arguments: 1 problem(s)")
    assert str(RecipeError(problems=[env], source="r.yaml")).startswith("invalid environment:")
    assert str(RecipeError(problems=[flag, env])).startswith("invalid arguments and environment:")
    assert str(RecipeError(problems=[key, flag], source="r.yaml")).startswith("invalid recipe r.yaml:")
    assert str(RecipeError(problems=[key])).startswith("invalid configuration:")
    assert str(RecipeError(problems=[key], source="s.yaml", what="invalid CI suite")).startswith(
        "invalid CI suite s.yaml:")


def test_the_cli_headers(capsys, tmp_path, monkeypatch):
    assert main(["project", str(tmp_path / "missing.yaml")]) == 2
    assert "error: cannot read recipe" in capsys.readouterr().err
    assert main(["project", RECIPE, "--nodes", "100000000", "--analytic"]) == 2  # past MAX_NODES (0: argparse's)
    assert "error: invalid arguments: 1 problem(s)\n  - --nodes" in capsys.readouterr().err
    monkeypatch.setenv("NNODES", "two")
    recipe = tmp_path / "r.yaml"
    text = Path(RECIPE).read_text().splitlines()  # the shipped recipe less its comment's node count
    recipe.write_text("\n".join(line for line in text if not line.startswith("# primus-ext:")) + "\n")
    assert main(["project", str(recipe), "--analytic", "--cluster", "h100"]) == 2
    assert "error: invalid environment: 1 problem(s)\n  - $NNODES" in capsys.readouterr().err
    suite = tmp_path / "suite.yaml"
    suite.write_text("entries: 3\n")
    assert main(["ci", str(suite)]) == 2
    assert f"error: invalid CI suite {suite}" in capsys.readouterr().err
