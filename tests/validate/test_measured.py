"""Hybrid validation: rows projected from a timing store's measured layers, carried within a GPU family."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from validate_rows import ARCH_HEADER, RUN_HEADER, SMALL_DENSE, runs_of, write

from primus_ext.cli import main
from primus_ext.errors import PrimusExtError
from primus_ext.hardware import load_gpu
from primus_ext.measure.runner import Measurement
from primus_ext.measure.store import TimingStore
from primus_ext.model.analytic import analytic_cost
from primus_ext.model.costs import CostOrigin
from primus_ext.model.layers import rank_shapes
from primus_ext.validate.measured import CarriedCosts, measured_projector, open_store
from primus_ext.validate.run import analytic_projector, validate_runs

H200 = "NVIDIA H200"
ROWS = ("S,2025,M,4096,BF16,H100,16,1,1,,1,,,16,1,64,,20000,,,,\n"
        "S,2025,M,4096,FP8,H200,16,2,1,,1,,,8,1,64,,18000,,,,\n"
        "S,2025,M,4096,BF16,B200,16,1,1,,1,,,16,1,64,,40000,,,,\n"
        "S,2025,M,4096,BF16,H100,16,1,1,,1,,,16,2,64,,15000,,,,\n")
SPEEDUP = 0.5
"""The fake measurements run in half the roofline's time on the H200."""


def _record(store: TimingStore, runs, *, skip_kind: str = "", device: str = H200) -> None:
    h200 = load_gpu("h200")
    for run in runs[:2]:  # the third row is a B200's, the fourth (MBS=2) is left uncovered on purpose
        for shape in rank_shapes(run.model, run.execution).values():
            if shape.kind == skip_kind:
                continue
            as_run = replace(shape, precision="bf16")  # no TE on the measuring GPU: fp8 runs in bf16
            c = analytic_cost(as_run, h200)
            cost = replace(c, fwd_ms=c.fwd_ms * SPEEDUP, bwd_ms=c.bwd_ms * SPEEDUP,
                           origin=CostOrigin(producer="measured", device=device))
            store.record(Measurement(target=shape, shape=shape, scale=1.0, device=device, dtype="bfloat16",
                                     versions="v", host="h", date="2026-12-04", cost=cost, reps=5, warmup=2))


@pytest.fixture
def runs(tmp_path):
    return runs_of(tmp_path, ROWS)


def test_carried_costs_scale_by_the_roofline_ratio(tmp_path, runs):
    store = TimingStore(tmp_path / "s.sqlite", device=H200, versions="any")
    _record(store, runs)
    # the host floor off (``Efficiency.host_factor`` 0): the ratio of the two GPUs' kernels, which it would hide
    h100, h200 = (replace(g, efficiency=replace(g.efficiency, host_factor=0.0)) for g in map(load_gpu, ("h100",
                                                                                                        "h200")))
    dense_bf16 = rank_shapes(runs[0].model, runs[0].execution)["dense"]
    measured = store.cost(dense_bf16)
    assert CarriedCosts(store=store, measured_on=h200, target=h200).cost(dense_bf16) == measured
    twin = replace(h200, sources=("a hardware CSV",))  # the same GPU read from another file: not carried
    assert CarriedCosts(store=store, measured_on=h200, target=twin).cost(dense_bf16) == measured
    on_h100 = CarriedCosts(store=store, measured_on=h200, target=h100).cost(dense_bf16)
    ratio = analytic_cost(dense_bf16, h100).fwd_ms / analytic_cost(dense_bf16, h200).fwd_ms
    assert on_h100.fwd_ms == pytest.approx(measured.fwd_ms * ratio)
    hbm_ratio = h200.hbm_bandwidth_bytes_per_s / h100.hbm_bandwidth_bytes_per_s
    assert measured.fwd_ms < on_h100.fwd_ms <= measured.fwd_ms * hbm_ratio
    assert f"to {h100.name}" in on_h100.source
    dense_fp8 = rank_shapes(runs[1].model, runs[1].execution)["dense"]
    assert dense_fp8.precision == "fp8"
    assert store.cost(dense_fp8).source == f"measured:{H200};as-bf16"  # the store says how the entry ran
    carried = CarriedCosts(store=store, measured_on=h200, target=twin).cost(dense_fp8)
    assert carried.fwd_ms < store.cost(dense_fp8).fwd_ms  # fp8 GEMMs from a bf16 measurement
    assert "bf16 measurement to fp8" in carried.source and "to h200" not in carried.source
    assert ";as-" not in carried.source  # carried once: the projection's lookup leaves it as it is


def test_projector_uses_measured_layers_and_refuses_what_it_cannot_cover(tmp_path, runs):
    store = TimingStore(tmp_path / "s.sqlite", device=H200, versions="any")
    _record(store, runs)
    report = validate_runs(runs, measured_projector(store, load_gpu("h200")))
    analytic = validate_runs(runs, analytic_projector)
    by_index = {r.index: r for r in report.rows}
    for i in (0, 1):  # faster measured layers: more throughput than the roofline alone
        assert by_index[i].projected_tokens_per_sec_per_gpu > analytic.rows[i].projected_tokens_per_sec_per_gpu
    assert "no carry-over to" in by_index[2].skipped_reason and "blackwell" in by_index[2].skipped_reason
    assert "no measured dense, embedding, output layer" in by_index[3].skipped_reason
    assert report.summary.n_projected == 2


def test_projector_names_the_missing_layer_kinds(tmp_path, runs):
    store = TimingStore(tmp_path / "s.sqlite", device=H200, versions="any")
    _record(store, runs, skip_kind="output")
    project = measured_projector(store, load_gpu("h200"))
    with pytest.raises(PrimusExtError, match="no measured output layer"):
        project(runs[0])


def test_open_store_reads_exports_and_picks_the_device(tmp_path, runs):
    store = TimingStore(tmp_path / "s.sqlite", device=H200, versions="any")
    _record(store, runs)
    store.export(tmp_path / "s.jsonl")
    assert open_store(str(tmp_path / "s.jsonl")).device == H200
    _record(store, runs, device="NVIDIA H100 80GB HBM3")
    with pytest.raises(PrimusExtError, match="name one with --store-device"):
        open_store(str(tmp_path / "s.sqlite"))
    assert open_store(str(tmp_path / "s.sqlite"), H200).device == H200
    with pytest.raises(PrimusExtError, match="no such file"):
        open_store(str(tmp_path / "none.jsonl"))
    (tmp_path / "s.jsonl").rename(tmp_path / "export.json")  # any name: the content says what it is
    assert open_store(str(tmp_path / "export.json")).device == H200
    for bad in ("{not json\n", '"a string"\n', "\x00\xff binary\n"):
        write(tmp_path, "bad.jsonl", bad)
        with pytest.raises(PrimusExtError, match="not a timing store"):
            open_store(str(tmp_path / "bad.jsonl"))
    write(tmp_path, "empty.sqlite", "")
    with pytest.raises(PrimusExtError, match="holds no measured layer"):
        open_store(str(tmp_path / "empty.sqlite"))


def test_cli_prints_and_writes_the_hybrid_report(tmp_path, runs, capsys):
    store = TimingStore(tmp_path / "s.sqlite", device=H200, versions="any")
    _record(store, runs)
    store.export(tmp_path / "s.jsonl")
    write(tmp_path, "a.csv", ARCH_HEADER + SMALL_DENSE)
    write(tmp_path, "r.csv", RUN_HEADER + ROWS)
    out = tmp_path / "v.json"
    assert main(["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv"), "--store",
                 str(tmp_path / "s.jsonl"), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["hybrid"]["summary"]["n_projected"] == 2
    assert data["hybrid_analytic_same_rows_summary"]["n_projected"] == 2
    printed = capsys.readouterr().out
    assert "hybrid (layers measured on NVIDIA H200" in printed and "analytic, same rows" in printed
    capsys.readouterr()
    assert main(["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv"), "--store",
                 str(tmp_path / "s.jsonl"), "--store-gpu", "nosuchgpu"]) == 2
    assert "projected" not in capsys.readouterr().out  # refused before any projection ran
    assert main(["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv"), "--store-gpu", "h200"]) == 2
    assert "--store-gpu without --store" in capsys.readouterr().err


COMMITTED = Path(__file__).resolve().parents[2] / "benchmarks" / "stores" / "h200-validation-hopper-rows.jsonl"
VALIDATION = Path(__file__).resolve().parents[3] / "shared" / "validation"


@pytest.mark.skipif(not VALIDATION.exists(), reason="shared/validation not present")
def test_the_committed_h200_store_still_serves_the_hopper_rows():
    """The H200 run of 2026-12-04 (RESULTS.md): its store keys must keep matching the rows' per-rank shapes, or
    every row would be refused as uncovered and the hybrid figures could not be reproduced without a GPU."""
    from primus_ext.validate.archs import read_archs
    from primus_ext.validate.hardware_csv import read_hardware
    from primus_ext.validate.runs import read_runs

    archs = read_archs(VALIDATION / "model_archs.csv")
    runs = read_runs(VALIDATION / "measured_throughput.csv", archs, read_hardware(VALIDATION / "hardware_specs.csv"))
    report = validate_runs(runs, measured_projector(open_store(str(COMMITTED)), load_gpu("h200")))
    assert report.summary.n_projected == 32  # every Hopper row but the FlashAttention-2 (torchtitan) ones
    assert report.summary.median_abs_error_pct < 20.0
    projected = [r for r in report.rows if r.skipped_reason is None]
    assert {r.gpu for r in projected} <= {"H100", "H200"}
