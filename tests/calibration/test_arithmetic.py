"""One calibration arithmetic: a projection corrected by ``apply_record`` and the tuner's score of the same
projection corrected by the oracle carry the same numbers, to the bit, in both scopes."""

from pathlib import Path

import pytest

from primus_ext.calibration import CalibrationRecord, Correction, RunFigures, Workload, apply_record
from primus_ext.calibration.arithmetic import correct, corrected_step_floor
from primus_ext.projection import evaluate, project
from primus_ext.projection.evaluate import step_floor
from primus_ext.recipe import load_recipe
from primus_ext.tune.oracle import projection_oracle, score_of

RECIPE = Path(__file__).parents[2] / "recipes" / "mixtral_8x7B-pretrain.yaml"


@pytest.fixture(scope="module")
def recipe():
    return load_recipe(RECIPE, cluster="h100", nodes=2)


def _record(recipe, correction):
    return CalibrationRecord(workload=Workload.of(recipe.model, recipe.execution, recipe.system),
                             correction=correction, measured=(RunFigures(step_s=1.0),),
                             projected=(RunFigures(step_s=1.0),), logs=("/x/train.log",),
                             date="2026-12-01T00:00:00Z", costs="analytic")


@pytest.mark.parametrize("correction", [Correction(kernel_factor=1.3, overhead_s=0.05, memory_factor=1.1),
                                        Correction(kernel_factor=0.8, scope="step")])
def test_projection_and_tuner_score_are_corrected_alike(recipe, correction):
    record = _record(recipe, correction)
    projection = evaluate(recipe.model, recipe.execution, recipe.system)
    fixed = apply_record(projection, record, "exact")
    oracle = projection_oracle(recipe.model, recipe.system, None, calibrations=(record,))
    score = oracle(recipe.execution)
    assert score.step_time_s == fixed.step_time_s != projection.step_time_s
    assert score.tokens_per_s_per_gpu == fixed.tokens_per_s_per_gpu and score.mfu == fixed.mfu
    assert score.breakdown == score_of(fixed).breakdown  # every part, the communication kinds included
    batch = oracle.many([recipe.execution])[0]  # the batch path's own figures agree with evaluate's to rounding
    assert batch.step_time_s == pytest.approx(score.step_time_s, rel=1e-12)
    assert batch.tokens_per_s_per_gpu == pytest.approx(score.tokens_per_s_per_gpu, rel=1e-12)


def test_corrected_breakdown_still_adds_up(recipe):
    p = project(recipe.model, recipe.execution, recipe.system, None, band=False)
    for c in (Correction(kernel_factor=1.7, overhead_s=0.2), Correction(kernel_factor=0.5, scope="step")):
        fixed = apply_record(p, _record(recipe, c), "exact")
        assert fixed.breakdown.total_s == pytest.approx(fixed.step_time_s, rel=1e-12)


def test_the_floor_stays_below_the_corrected_step(recipe):
    floor, _ = step_floor(recipe.model, recipe.execution, recipe.system)
    p = evaluate(recipe.model, recipe.execution, recipe.system)
    for c in (Correction(kernel_factor=0.3, overhead_s=0.01), Correction(kernel_factor=2.0),
              Correction(kernel_factor=0.4, scope="step")):
        parts = score_of(p).breakdown
        assert corrected_step_floor(c, floor) <= correct(c, p.step_time_s, parts).step_s
