"""A stored record corrects its own workload exactly and nearby configurations by the same factor, wider band."""

from dataclasses import replace
from pathlib import Path

import pytest

from primus_ext.calibration import (
    NEARBY_SPREAD,
    CalibrationRecord,
    Correction,
    RunFigures,
    Workload,
    apply_record,
    apply_stored,
    find_record,
    load_records,
    save_record,
)
from primus_ext.calibration.apply import parts_of
from primus_ext.projection import project
from primus_ext.recipe import load_recipe

RECIPE = Path(__file__).parents[2] / "recipes" / "llama3.1_8B-pretrain.yaml"


@pytest.fixture(scope="module")
def recipe():
    return load_recipe(RECIPE, cluster="h100", nodes=1)


@pytest.fixture(scope="module")
def base(recipe):
    return project(recipe.model, recipe.execution, recipe.system, None, band=False)


def _record(projection, *, k=1.4, c=0.0, memory=1.2, spread=0.03, date="2026-12-01T00:00:00Z"):
    return CalibrationRecord(
        workload=Workload.of(projection.model, projection.execution, projection.system),
        correction=Correction(kernel_factor=k, overhead_s=c, spread=spread, memory_factor=memory),
        measured=(RunFigures(step_s=projection.step_time_s * k, spread=spread),),
        projected=(RunFigures(step_s=projection.step_time_s),), logs=("/x/train.log",), date=date)


def test_exact_match_reproduces_the_corrected_step_and_memory(base):
    record = _record(base, k=1.5, c=0.02)
    found = find_record([record], base.model, base.execution, base.system)
    assert found is not None and found[1] == "exact"
    p = apply_record(base, *found)
    parts = parts_of(base.breakdown)
    assert p.step_time_s == pytest.approx(1.5 * parts.kernels_s + parts.links_s + 0.02)
    assert p.breakdown.total_s == pytest.approx(p.step_time_s)  # the breakdown still adds up
    assert p.tokens_per_s_per_gpu == pytest.approx(base.tokens_per_s_per_gpu * base.step_time_s / p.step_time_s)
    assert p.mfu < base.mfu and p.memory.peak_bytes == pytest.approx(base.memory.peak_bytes * 1.2)
    low, high = p.band
    assert low < p.tokens_per_s_per_gpu < high and high / p.tokens_per_s_per_gpu == pytest.approx(1.03)
    assert p.calibration.match == "exact" and p.calibration.uncalibrated_step_s == base.step_time_s
    assert any("calibrated (exact)" in n for n in p.notes)


def test_nearby_configuration_moves_by_the_factor_with_a_wider_band(recipe, base):
    record = _record(base, k=1.3, spread=0.02)
    gbs = recipe.execution.global_batch_size * 2
    other = project(recipe.model, replace(recipe.execution, global_batch_size=gbs), recipe.system, None, band=False)
    found = find_record([record], other.model, other.execution, other.system)
    assert found is not None and found[1] == "nearby"
    p = apply_record(other, *found)
    parts = parts_of(other.breakdown)
    assert p.step_time_s == pytest.approx(1.3 * parts.kernels_s + parts.links_s)
    assert p.calibration.band == pytest.approx(0.02 + NEARBY_SPREAD)


def test_other_model_or_gpu_gets_no_record(recipe, base):
    record = _record(base)
    bigger = replace(recipe.model, num_layers=recipe.model.num_layers + 2)
    assert find_record([record], bigger, recipe.execution, recipe.system) is None
    h200 = load_recipe(RECIPE, cluster="h200", nodes=1).system
    assert find_record([record], recipe.model, recipe.execution, h200) is None


def test_exact_beats_nearby_and_nearest_beats_newest(recipe, base):
    exact = _record(base, k=1.1, date="2026-01-01T00:00:00Z")
    far = replace(exact, workload=replace(exact.workload, execution="x", layout=(("micro_batch_size", 99),)),
                  date="2026-12-01T00:00:00Z")
    assert find_record([far, exact], base.model, base.execution, base.system)[0] is exact


def test_store_round_trip_and_apply_stored(tmp_path, base):
    store = tmp_path / "timings.sqlite"
    assert apply_stored(base, str(store)) is base and not store.exists()  # nothing created by reading
    record = _record(base, k=1.25)
    save_record(record, store)
    assert load_records(store) == [record]
    p = apply_stored(base, str(store))
    assert p.calibration is not None and p.step_time_s > base.step_time_s


def test_record_for_other_layer_costs_is_not_applied_but_said(tmp_path, base):
    store = tmp_path / "timings.sqlite"
    save_record(replace(_record(base), costs="measured"), store)
    p = apply_stored(base, str(store))
    assert p.calibration is None and any("not applied" in n for n in p.notes)


def test_tuner_oracle_scores_are_calibrated(recipe, base):
    from primus_ext.tune.oracle import projection_oracle

    record = _record(base, k=2.0)
    plain = projection_oracle(recipe.model, recipe.system, None)(recipe.execution)
    calibrated = projection_oracle(recipe.model, recipe.system, None, [record])
    one = calibrated(recipe.execution)
    [many] = calibrated.many([recipe.execution])
    assert one.step_time_s == pytest.approx(many.step_time_s)
    bd = plain.breakdown
    kernels = bd["compute_s"] + bd["bubble_s"] + bd["optimizer_s"]
    links = sum(v for k, v in bd.items() if k.startswith("exposed_"))
    assert one.step_time_s == pytest.approx(2.0 * kernels + links, rel=1e-6)
    assert one.tokens_per_s_per_gpu < plain.tokens_per_s_per_gpu
