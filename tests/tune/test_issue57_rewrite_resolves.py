"""Issue 57, part 7: the rewrite of a tuned configuration resolves to it, for every schedule the tuner can choose.

A copy of the README's default recipe tuned at 4 x H100 chose V-half and ``--out`` exited 2 ("the rewritten recipe
does not resolve to the tuned configuration"): Primus's V schedules set VPP = 2 themselves, the tuner wrote VPP 2
and the reload read none. Here: the README's reproducer through the CLI, and a property over every schedule and a
random sample of each axis (legal configurations of two shipped Primus recipes): the tuned copy's text, reloaded
from a file beside the recipe, resolves to exactly the configuration; a schedule no recipe key runs (DualPipe,
DualPipeV: what-ifs) is refused by name, never written. The long sweep is ``benchmarks/tuned_rewrite_resolves.py``.

    python -m pytest -q tests/tune/test_issue57_rewrite_resolves.py
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from primus_ext.cli import main
from primus_ext.errors import RecipeError
from primus_ext.model.pipeline.registry import SCHEDULES, get_schedule
from primus_ext.recipe import load_recipe
from primus_ext.recipe.checks import check
from primus_ext.recipe.rewrite import apply_changes, execution_changes, read_text
from primus_ext.tune.axes import SCHEDULE
from primus_ext.tune.space import AXIS_ORDER, build_space

REPO = Path(__file__).resolve().parents[2]
SAMPLES = 6
"""Legal configurations drawn per (recipe, schedule)."""


def test_the_readme_recipe_tuned_at_4_h100_writes_a_copy_that_resolves(tmp_path: Path, capsys) -> None:
    recipe = tmp_path / "recipe.yaml"
    shutil.copy(REPO / "recipes" / "llama3.1_8B-pretrain.yaml", recipe)
    out = tmp_path / "t.yaml"
    assert main(["tune", str(recipe), "--cluster", "h100", "--nodes", "4", "--budget", "12", "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    tuned = load_recipe(out, cluster="h100", nodes=4)
    assert tuned.execution.pipeline_schedule in SCHEDULES


def sample(space, rng: random.Random, schedule: str, tries: int = 400):
    """Up to SAMPLES legal configurations of ``space`` with ``schedule``, each axis drawn at random."""
    found = []
    for _ in range(tries):
        config = {}
        for axis in AXIS_ORDER:
            domain = space.domain(axis, config)
            if axis == SCHEDULE:
                if schedule not in domain:
                    break
                config[axis] = schedule
            elif not domain:
                break
            else:
                config[axis] = rng.choice(list(domain))
        else:
            if not space.membership(config):
                execution = space.to_execution(config)
                if not check(space.model, execution, space.system):
                    found.append(execution)
        if len(found) >= SAMPLES:
            break
    return found


@pytest.mark.parametrize("name, nodes", [("llama3.1_8B-pretrain.yaml", 4), ("mixtral_8x7B-pretrain.yaml", 8)])
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_every_schedule_and_a_sample_of_each_axis_resolves(tmp_path: Path, name: str, nodes: int,
                                                           schedule: str) -> None:
    source = tmp_path / name
    shutil.copy(REPO / "recipes" / name, source)
    recipe = load_recipe(source, cluster="h100", nodes=nodes)
    space = build_space(recipe.model, recipe.execution, recipe.system, {SCHEDULE: (schedule,)})
    executions = sample(space, random.Random(f"{name}-{schedule}"), schedule)
    if not executions:
        pytest.skip(f"{schedule}: no legal configuration of {name} at {nodes} nodes in the sample")
    for i, tuned in enumerate(executions):
        if get_schedule(tuned.pipeline_schedule).recipe_keys(tuned.pp) is None:
            with pytest.raises(RecipeError, match="what-if"):
                execution_changes(recipe, tuned)
            continue
        changes = execution_changes(recipe, tuned)
        text, _ = apply_changes(read_text(source), changes, path=str(source), module=recipe.module,
                                cluster={"cluster": "h100", "nodes": nodes})
        copy = tmp_path / f"tuned-{i}.yaml"
        copy.write_text(text)
        reloaded = load_recipe(copy, cluster="h100", nodes=nodes)
        assert reloaded.execution == tuned, (schedule, changes)
