"""The band as a measured error (issue 53 part 1): per class the held-out error of published runs, pooled upward where a
class has few rows, applied to the projected throughput; a class without runs keeps the sensitivity band and says so.

    python -m pytest -q tests/projection/test_error_bands.py
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from projection_specs import LLAMA, MOE8

from primus_ext.errors import RecipeError
from primus_ext.hardware import load_system
from primus_ext.projection import error_bands, project
from primus_ext.projection.error_bands import (
    LEVELS,
    MIN_ROWS,
    BandClass,
    ErrorBands,
    ErrorRow,
    class_of,
    evidence_of,
    file_dict,
    load_bands,
    shipped,
    summarise,
    widest,
)
from primus_ext.projection.project import sensitivity_band
from primus_ext.specs import ExecutionSpec

HOPPER = BandClass(family="hopper", kind="dense", precision="fp8", scale="<=64")
EX = ExecutionSpec(data_parallel_size=8, global_batch_size=64, seq_length=4096, micro_batch_size=1, precision="fp8")
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "validation"


def _rows(cls: BandClass, errors: list[float], model: str = "m") -> list[ErrorRow]:
    return [ErrorRow(model=model, band_class=cls, error_pct=e, source=f"fixture row {i}") for i, e in enumerate(errors)]


def test_summarise_counts_a_row_at_every_level_with_numpys_linear_quantiles():
    rows = _rows(HOPPER, [-30.0, -10.0, 0.0, 10.0, 50.0]) + _rows(replace(HOPPER, scale="<=1024"), [20.0])
    table = summarise(rows)
    assert table["hopper | dense | fp8 | <=64"].n == 5 and table["hopper | dense | fp8"].n == 6
    assert table["hopper | dense"].n == 6 and table["any | dense"].n == 6 and table["all"].n == 6
    own = table["hopper | dense | fp8 | <=64"]
    # numpy.percentile([-30, -10, 0, 10, 50], [10, 90]) = [-22, 34]
    assert (own.p10_pct, own.p90_pct, own.min_pct, own.max_pct) == pytest.approx((-22.0, 34.0, -30.0, 50.0))


def test_a_class_with_enough_rows_is_its_own_evidence():
    errors = [float(e) for e in range(-20, 20, 2)]  # 20 rows, -20 .. +18 %
    evidence = evidence_of(HOPPER, summarise(_rows(HOPPER, errors)))
    assert evidence.level == "class" and evidence.n == 20 == evidence.n_class
    assert (evidence.low_pct, evidence.high_pct) == pytest.approx((-16.2, 14.2))
    low, high = evidence.factors()
    # a projection 14.2 % high means the run is P / 1.142: the band's low end; 16.2 % low: P / 0.838, its high end
    assert (low, high) == pytest.approx((1 / 1.142, 1 / 0.838))


def test_few_rows_pool_upward_and_keep_their_own_extremes():
    few = _rows(HOPPER, [-60.0, -55.0])  # a class whose two runs were both far slower than projected
    others = _rows(replace(HOPPER, scale=">1024"), [float(e) for e in range(-5, 5)], model="other")
    table = summarise(few + others)
    evidence = evidence_of(HOPPER, table)
    assert evidence.level == "family x type x precision" and evidence.n == 12 and evidence.n_class == 2
    assert evidence.low_pct == -60.0  # pooled -> widened to the class's own worst row
    assert evidence.high_pct == pytest.approx(table["hopper | dense | fp8"].p90_pct)
    pooled = table["hopper | dense | fp8"]
    assert (evidence.level_low_pct, evidence.level_high_pct) == (pooled.p10_pct, pooled.p90_pct)
    assert evidence.widened_to == 2 and evidence.widened_by == "class"
    assert (f"({pooled.p10_pct:+.0f} % .. {pooled.p90_pct:+.0f} %) of 12 measured runs pooled at family x type x "
            f"precision (2 of this class), widened to -60 % .. {pooled.p90_pct:+.0f} % by the 2 runs of its class"
            ) in evidence.sentence()


def test_a_class_whose_type_has_no_run_anywhere_has_no_evidence():
    table = summarise(_rows(HOPPER, [1.0] * MIN_ROWS))
    evidence = evidence_of(BandClass(family="cdna4", kind="moe", precision="fp8", scale="<=64"), table)
    assert evidence.level == "none" and evidence.n == 0 and evidence.factors() is None
    assert ("no run measured with its model held out, of this class (cdna4 moe fp8, <=64 GPUs) nor of any moe model"
            in evidence.sentence())
    assert widest(100.0, (90.0, 110.0), evidence) == (90.0, 110.0)


def test_a_family_without_runs_of_its_type_takes_the_types_error_elsewhere_and_says_so():
    """Issue 52: a GPU family's first MoE projection is no better known than the MoE projections measured on other
    families; before, its band was the sensitivity band alone (+-5 % for an MI300X MoE recipe)."""
    errors = [float(e) for e in range(-20, 80, 5)]  # 20 MoE runs on Hopper, -20 .. +75 %
    table = summarise(_rows(replace(HOPPER, kind="moe"), errors) + _rows(HOPPER, [0.0] * MIN_ROWS, model="dense"))
    cdna3_moe = BandClass(family="cdna3", kind="moe", precision="fp8", scale="<=64")
    evidence = evidence_of(cdna3_moe, table)
    assert evidence.level == "type" and evidence.n == 20 and evidence.family_rows == 0 and evidence.n_class == 0
    assert (evidence.low_pct, evidence.high_pct) == pytest.approx((-10.5, 65.5))  # numpy's 10th / 90th percentiles
    assert evidence.widened_to == 0 and "widened" not in evidence.sentence()
    assert ("(-10 % .. +66 %) of 20 measured runs of moe models on other GPU families (none on cdna3 with its model "
            "held out), cdna3 moe fp8") in evidence.sentence()
    low, _ = widest(100.0, (95.0, 105.0), evidence)
    assert low == pytest.approx(100.0 / 1.655)  # the dense runs' +0 % says nothing about MoE


def test_a_family_without_runs_of_a_rare_type_takes_all_rows():
    hybrid = replace(HOPPER, kind="hybrid")
    table = summarise(_rows(hybrid, [40.0, 60.0], model="h") + _rows(HOPPER, [float(e) for e in range(-10, 10)]))
    evidence = evidence_of(BandClass(family="cdna3", kind="hybrid", precision="fp8", scale="<=64"), table)
    assert evidence.level == "all rows" and evidence.n == 22 and evidence.family_rows == 0
    assert evidence.widened_to == 0 and evidence.high_pct == pytest.approx(table["all"].p90_pct)
    assert "pooled at all rows (no hybrid run on cdna3 with its model held out, too few elsewhere)" in \
        evidence.sentence()


def test_a_familys_one_far_run_widens_its_pooled_band_and_is_named():
    """The MI355X DeepSeek-V2-Lite log (+273 %) is the only MoE run of its family: pooled over all rows (a family with
    runs of the type pools as issue 53 set), the band still reaches it."""
    moe = replace(HOPPER, kind="moe")
    cdna4_moe = BandClass(family="cdna4", kind="moe", precision="fp8", scale="<=64")
    table = summarise(_rows(moe, [float(e) for e in range(-20, 30, 5)]) + _rows(cdna4_moe, [273.0], model="log"))
    evidence = evidence_of(cdna4_moe, table)
    assert evidence.level == "all rows" and evidence.n == 11 and evidence.family_rows == 1
    assert evidence.high_pct == 273.0 and evidence.widened_to == 1
    assert evidence.widened_by == "class" and evidence.level_high_pct == table["all"].p90_pct < 273.0
    assert ("pooled at all rows (1 of this class), widened to -15 % .. +273 % by the 1 run of its class"
            in evidence.sentence())


def test_rows_held_out_by_submission_are_kept_but_are_no_ones_evidence(tmp_path: Path):
    """MLPerf's AMD rows run one configuration, held out one submission at a time: their +-3 % says how alike runs
    of that configuration are, not how far another model's projection lands (it was every MI300X dense band)."""
    cdna3 = BandClass(family="cdna3", kind="dense", precision="fp8", scale="<=64")
    same = [replace(r, holdout="submission") for r in _rows(cdna3, [-2.0, 1.0, 2.5] * 6, model="Llama2-70B")]
    rows = same + _rows(HOPPER, [float(e) for e in range(-10, 10)])
    table = summarise(rows)
    assert "cdna3 | dense" not in table and table["any | dense"].n == 20
    evidence = evidence_of(cdna3, table)
    assert evidence.level == "type" and evidence.family_rows == 0
    path = tmp_path / "bands.yaml"
    path.write_text(yaml.safe_dump(file_dict(rows, date="d", command="c")), encoding="utf-8")
    loaded = load_bands(path)
    assert sorted(r.holdout for r in loaded.rows) == sorted(r.holdout for r in rows)
    assert loaded.table.keys() == table.keys()


def test_the_band_is_per_side_the_wider_of_sensitivity_and_error():
    evidence = evidence_of(HOPPER, summarise(_rows(HOPPER, [float(e) for e in range(0, 100, 5)])))  # +0 .. +95 %
    low, high = widest(100.0, (90.0, 110.0), evidence)
    assert low == pytest.approx(100.0 / (1 + evidence.high_pct / 100)) and low < 90.0  # the error is wider below
    assert high == 110.0  # the error says nothing above the projection: the sensitivity side stays


def test_without_a_model_drops_its_rows():
    bands = ErrorBands(rows=tuple(_rows(HOPPER, [50.0] * MIN_ROWS, "own") + _rows(HOPPER, [0.0] * MIN_ROWS, "x")),
                       table={})
    assert bands.without("own").evidence(HOPPER).high_pct == 0.0
    assert bands.without("x").evidence(HOPPER).low_pct == 50.0
    assert bands.without("own") is bands.without("own")  # summarised once per model


def _fixture_bands(errors: list[float], cls: BandClass) -> ErrorBands:
    rows = tuple(_rows(cls, errors))
    return ErrorBands(rows=rows, table=summarise(rows))


def test_project_widens_its_band_to_its_class_error(monkeypatch):
    system = load_system("h100", 1)
    cls = class_of(LLAMA, EX, system)
    assert cls == BandClass(family="hopper", kind="dense", precision="fp8", scale="<=64")
    monkeypatch.setattr(error_bands, "shipped", lambda: _fixture_bands([float(e) for e in range(-100, 200, 10)], cls))
    p = project(LLAMA, EX, system, memory=False)
    sens = sensitivity_band(LLAMA, EX, system)
    evidence = p.band_evidence
    assert evidence is not None and evidence.level == "class" and evidence.n == 30
    lo, hi = evidence.factors()
    assert p.band == pytest.approx((p.tokens_per_s_per_gpu * lo, p.tokens_per_s_per_gpu * hi))
    assert p.band[0] < sens[0] and p.band[1] > sens[1]  # +-10 % efficiencies said far less than the runs measured


def test_a_class_without_runs_keeps_the_sensitivity_band_and_says_so(monkeypatch, capsys):
    system = load_system("mi355x", 1)
    monkeypatch.setattr(error_bands, "shipped", lambda: _fixture_bands([5.0] * MIN_ROWS, HOPPER))
    moe = ExecutionSpec(data_parallel_size=8, expert_model_parallel_size=8, global_batch_size=64, seq_length=4096,
                        micro_batch_size=1, precision="fp8")
    p = project(MOE8, moe, system, memory=False)
    assert p.band_evidence is not None and p.band_evidence.level == "none"
    assert p.band == pytest.approx(sensitivity_band(MOE8, moe, system))
    from primus_ext.report.projection_table import format_projection
    from primus_ext.results.projection import projection_fields

    assert "no run measured with its model held out, of this class (cdna4 moe fp8, <=64 GPUs)" in format_projection(p)
    assert projection_fields(p)["band"]["evidence"]["level"] == "none"


def test_the_shipped_file_is_what_its_rows_summarise_to():
    bands = shipped()
    assert len(bands.rows) >= 100 and bands.date and "error_bands.py" in bands.command
    assert {key: s.to_dict() for key, s in bands.table.items()} == \
        {key: s.to_dict() for key, s in summarise(bands.rows).items()}
    assert {r.source.split(" row ")[0] for r in bands.rows} == {
        "measured_throughput.csv", "mlperf_training.csv", "logs/primus-llama3.2-1b-fp8-8xMI355X.log",
        "logs/primus-dsv2-lite-fp8-8xMI355X.log"}
    # MLPerf's rows are one configuration held out by submission: kept, never a class's evidence
    assert {r.holdout for r in bands.rows if r.source.startswith("mlperf")} == {"submission"}
    assert {r.holdout for r in bands.rows if not r.source.startswith("mlperf")} == {"model"}
    data = yaml.safe_load(error_bands.BANDS_FILE.read_text(encoding="utf-8"))
    assert data["levels"] == list(LEVELS) and data["min_rows"] == MIN_ROWS
    assert data == file_dict(bands.rows, date=data["date"], command=data["command"])


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/validation is not beside the repository")
def test_the_shipped_rows_are_the_published_rows_classes():
    """Each shipped row names a row of the published data and the class its specs give (the errors need the
    cross-validation, ~10-40 min: ``benchmarks/error_bands.py``)."""
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.hardware_csv import read_hardware
    from primus_ext.validate.runs import read_runs

    archs, hardware = read_archs(SHARED / "model_archs.csv"), read_hardware(SHARED / "hardware_specs.csv")
    runs = {name: {r.index: r for r in read_runs(SHARED / name, archs, hardware)}
            for name in ("measured_throughput.csv", "mlperf_training.csv")}
    for row in shipped().rows:
        if row.source.startswith("logs/"):  # a real log's recipe (tests/support/recipes): the class of its specs
            assert (SHARED / row.source).is_file() and row.band_class.family == "cdna4"
            continue
        name, index = row.source.split(" row ")
        run = runs[name][int(index)]
        assert run.model_name == row.model and run.model is not None
        assert class_of(run.model, run.execution, run.system) == row.band_class, row.source


def test_an_amd_moe_recipe_gets_the_band_of_what_moe_projections_missed():
    """The brief's case: accuracy stalled where AMD and MoE live and the band did not know it. An MI300X MoE recipe's
    band now rests on the MoE runs of other families, and an MI355X one reaches its family's own +273 % log."""
    moe = ExecutionSpec(data_parallel_size=8, expert_model_parallel_size=8, global_batch_size=64, seq_length=4096,
                        micro_batch_size=1, precision="fp8")
    logged = max(r.error_pct for r in shipped().rows if r.band_class.family == "cdna4" and r.band_class.kind == "moe")
    for gpu, level in (("mi300x", "type"), ("mi355x", "all rows")):
        system = load_system(gpu, 1)
        p = project(MOE8, moe, system, memory=False)
        evidence = p.band_evidence
        assert evidence is not None and evidence.level == level, gpu
        assert p.band[0] < sensitivity_band(MOE8, moe, system)[0] * 0.9, gpu  # far wider than +-efficiency
        if gpu == "mi355x":
            assert evidence.high_pct >= logged > 200
            assert p.band[0] == pytest.approx(p.tokens_per_s_per_gpu / (1 + logged / 100), rel=1e-3)


def test_a_level_type_band_is_a_valid_projection_document():
    jsonschema = pytest.importorskip("jsonschema")
    from primus_ext.results.projection import projection_document, projection_fields
    from primus_ext.results.schema import SCHEMA

    moe = ExecutionSpec(data_parallel_size=8, expert_model_parallel_size=8, global_batch_size=64, seq_length=4096,
                        micro_batch_size=1, precision="fp8")
    p = project(MOE8, moe, load_system("mi300x", 1), memory=False)
    fields = projection_fields(p)
    assert fields["band"]["evidence"]["level"] == "type" and fields["band"]["evidence"]["n_family_type"] == 0
    jsonschema.validate(json.loads(json.dumps(projection_document(p))), SCHEMA)


def test_the_file_s_class_table_is_never_trusted_over_its_rows(tmp_path: Path):
    """A file of an older layout (no ``holdout``, classes of other levels): its rows are summarised again, so
    ``project`` (the whole table) and ``validate`` (``without``: the rows again) cannot disagree."""
    old = tmp_path / "old.yaml"
    rows = _rows(HOPPER, [float(e) for e in range(-10, 10)])
    data = file_dict(rows, date="d", command="c")
    for entry in data["rows"]:
        del entry["holdout"]
    data["classes"] = {"hopper | dense": {"n": 99, "error_pct_p10": -1, "error_pct_p90": 1, "error_pct_min": -1,
                                          "error_pct_max": 1}}
    old.write_text(yaml.safe_dump(data), encoding="utf-8")
    bands = load_bands(old)
    assert {r.holdout for r in bands.rows} == {"model"}
    assert bands.table == summarise(rows) and bands.evidence(HOPPER) == bands.without("other").evidence(HOPPER)
    mixed = ErrorBands(rows=(*rows, *(replace(r, model="sub", holdout="submission") for r in rows)), table={})
    assert mixed.without("m").table == {}  # submission rows are no one's evidence, not even once their model is out


def test_a_broken_file_names_itself_and_the_fix(tmp_path: Path):
    bad = tmp_path / "error_bands.yaml"
    bad.write_text("classes: {}\nrows:\n- {model: x, family: hopper, type: sparse, precision: fp8, scale: '<=64', "
                   "error_pct: 1, source: s}\n", encoding="utf-8")
    with pytest.raises(RecipeError) as err:
        load_bands(bad)
    assert str(bad) in str(err.value) and "benchmarks/error_bands.py" in str(err.value)
    assert "sparse" in str(err.value)
    bad.write_text("classes: {}\nrows:\n- {model: x, family: hopper, type: moe, precision: fp8, scale: '<=64', "
                   "error_pct: 1, source: s, holdout: fold}\n", encoding="utf-8")
    load_bands.cache_clear()
    with pytest.raises(RecipeError) as err:
        load_bands(bad)
    assert "holdout 'fold' is not model or submission" in str(err.value)
