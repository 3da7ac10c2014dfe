"""The timeline of the new pipeline schedules: DualPipe's overlapped pairs drawn once, V stages' inputs."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest

from primus_ext.projection import project
from primus_ext.recipe import load_recipe
from primus_ext.report.timeline import step_segments, totals_by_kind

RECIPE = Path(__file__).parents[2] / "recipes" / "llama3.1_70B-pretrain.yaml"


@pytest.mark.parametrize("schedule, vpp", [("dualpipe", None), ("dualpipev", None), ("zb-v", 2), ("v-min", 2)])
def test_every_second_of_the_step_is_drawn_once(schedule, vpp):
    recipe = load_recipe(RECIPE)
    ex = replace(recipe.execution, pipeline_schedule=schedule, virtual_pipeline_model_parallel_size=vpp,
                 pipeline_model_parallel_layout=None, global_batch_size=64)
    p = project(recipe.model, ex, recipe.system, memory=False, band=False)
    segments = step_segments(p)
    assert segments
    for rank in range(ex.pp):
        mine = sorted((s for s in segments if s.rank == rank), key=lambda s: s.start_s)
        assert all(a.end_s <= b.start_s + 1e-12 for a, b in pairwise(mine))  # no overlap
        assert sum(totals_by_kind(segments, rank).values()) == pytest.approx(p.step_time_s, rel=1e-9)
    paired = [s for s in segments if "overlapped with" in s.label]
    assert bool(paired) == schedule.startswith("dualpipe")
