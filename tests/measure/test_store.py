"""Timing store: record, CostProvider lookup by device, failures kept, export/import round trip."""

from __future__ import annotations

import json
from dataclasses import replace

from archs import GQA, MOE

from primus_ext.measure.runner import Measurement
from primus_ext.measure.store import FabricPoint, TimingStore, shape_from_dict
from primus_ext.model.costs import CostOrigin, LayerCost
from primus_ext.model.rank_shape import RankShape

H200 = "NVIDIA H200"
VERSIONS = "torch=2.9.0;megatron-core=0.16.1;te=2.8.0"
TARGET = RankShape(kind="dense", arch=GQA, seq_length=4096, micro_batch_size=2, recompute_modules=("core_attn",))
MOE_TARGET = RankShape(kind="moe", arch=MOE, seq_length=4096, ep=2)


def _measurement(target: RankShape, *, scale: float = 1.0, device: str = H200, cost: LayerCost | None = None,
                 error: str | None = None) -> Measurement:
    return Measurement(target=target, shape=target.scaled(scale), scale=scale, device=device, dtype="bfloat16",
                       versions=VERSIONS, host="node-1", date="2026-12-02T12:00:00+00:00", cost=cost,
                       error=error, reps=10, warmup=2, notes=("a note",))


COST = LayerCost(fwd_ms=1.234567890123, bwd_ms=2.5, wgrad_ms=None, recompute_ms=0.25, params=123456,
                 saved_bytes=7 * 2**20, peak_bytes=None, fwd_spread=0.031, bwd_spread=0.0625,
                 origin=CostOrigin.parse(f"measured:{H200}"))


def _fill(store: TimingStore) -> None:
    store.record(_measurement(TARGET, cost=COST))
    cpu_cost = replace(COST, origin=CostOrigin.parse("measured:cpu@scale=0.125"))
    store.record(_measurement(TARGET, scale=0.125, device="cpu:test", cost=cpu_cost))
    store.record(_measurement(MOE_TARGET, error="OutOfMemoryError: CUDA out of memory"))
    store.record_fabric([FabricPoint(device=H200, world=8, backend="nccl", op="all_reduce", nbytes=2**20,
                                     time_ms=0.05, busbw_gbps=36.7, versions=VERSIONS, reps=10)])


def test_cost_provider_by_device_and_scale(tmp_path):
    with TimingStore(tmp_path / "a.sqlite", device=H200, versions=VERSIONS) as store:
        _fill(store)
        assert store.cost(TARGET) == COST
        assert store.cost(MOE_TARGET) is None  # failed: recorded, never a cost
        assert [r["reason"] for r in store.failures()] == ["OutOfMemoryError: CUDA out of memory"]
    with TimingStore(tmp_path / "a.sqlite", device="cpu:test") as cpu:
        assert cpu.cost(TARGET) is None  # a scaled CPU stand-in is not the target's cost...
        assert cpu.cost(TARGET.scaled(0.125)).source == "measured:cpu@scale=0.125"  # ...but its own shape's
    with TimingStore(tmp_path / "a.sqlite", device="cpu:test", accept_scaled=True) as cpu:
        stand_in, own = cpu.cost(TARGET), cpu.cost(TARGET.scaled(0.125))
        assert "@scale=0.125" in stand_in.source and "carried to the full shape" in stand_in.source
        assert stand_in.fwd_ms > own.fwd_ms  # the full shape's times, not the 1/8-width layer's (MFU >> 100 %)


def test_export_import_round_trip_on_a_clean_cache(tmp_path, monkeypatch):
    with TimingStore(tmp_path / "src.sqlite", device=H200, versions=VERSIONS) as src:
        _fill(src)
        n = src.export(tmp_path / "h200.jsonl")
        rows, fabric = src.layer_rows(), src.fabric()
    assert n == 4
    monkeypatch.setenv("PRIMUS_EXT_CACHE", str(tmp_path / "clean"))
    with TimingStore(device=H200) as dst:
        assert dst.path == tmp_path / "clean" / "timings.sqlite" and not dst.layer_rows()
        assert dst.import_(tmp_path / "h200.jsonl") == 4
        key = lambda r: (r["kind"], r["shape_key"], r["device"])  # noqa: E731
        assert sorted(dst.layer_rows(), key=key) == sorted(rows, key=key)
        assert dst.fabric() == fabric
        assert dst.cost(TARGET) == COST
        dst.export(tmp_path / "again.jsonl")
    lines = lambda name: sorted((tmp_path / name).read_text().splitlines())  # noqa: E731
    assert lines("again.jsonl") == lines("h200.jsonl")


def test_shape_json_rebuilds_the_shape(tmp_path):
    with TimingStore(tmp_path / "a.sqlite", device=H200, versions=VERSIONS) as store:
        store.record(_measurement(MOE_TARGET, scale=0.5, cost=COST))
        (row,) = store.layer_rows()
    assert shape_from_dict(json.loads(row["target_json"])) == MOE_TARGET
    assert shape_from_dict(json.loads(row["shape_json"])) == MOE_TARGET.scaled(0.5)
    assert row["target_key"] == MOE_TARGET.key() and row["shape_key"] == MOE_TARGET.scaled(0.5).key()


def test_projection_reads_only_the_target_gpus_entries(tmp_path):
    from primus_ext.measure.store import device_for, store_for_target

    path = tmp_path / "t.sqlite"
    with TimingStore(path, device=H200, versions=VERSIONS) as store:
        _fill(store)
        assert device_for(store, "h200") == H200 and device_for(store, "cpu") == "cpu:test"
        assert device_for(store, "h100") is None and device_for(store, "mi300x") is None
    assert store_for_target(path, "h100") is None  # nothing measured on an H100: the roofline decides
    assert store_for_target(path, "h200").cost(TARGET) == COST
    assert store_for_target(path, "h100", device=H200).cost(TARGET) == COST  # an explicit device wins


def test_projection_reads_an_export_as_it_came_back_from_the_gpu_machine(tmp_path):
    import pytest

    from primus_ext.errors import PrimusExtError
    from primus_ext.measure.store import store_for_target

    with TimingStore(tmp_path / "t.sqlite", device=H200, versions=VERSIONS) as store:
        _fill(store)
        store.export(tmp_path / "h200.jsonl")
    assert store_for_target(tmp_path / "h200.jsonl", "h200").cost(TARGET) == COST
    assert store_for_target(tmp_path / "h200.jsonl", "h100") is None
    (tmp_path / "notes.txt").write_text("not a store\n")
    with pytest.raises(PrimusExtError, match="not a timing store or its JSON-lines export"):
        store_for_target(tmp_path / "notes.txt", "h200")


def test_an_eager_fused_attention_measurement_serves_graphed_shapes_but_not_flash_attention_2(tmp_path):
    graphed, flash2 = replace(TARGET, cuda_graph="layers"), replace(TARGET, attention_kernel="flash2")
    with TimingStore(tmp_path / "a.sqlite", device=H200, versions=VERSIONS) as store:
        store.record(_measurement(graphed, cost=COST))  # a graphed target is measured (and stored) eagerly
        assert store.cost(TARGET) == store.cost(graphed) == COST
        assert store.entry(graphed) is not None and store.entry(graphed) == store.entry(TARGET)
        assert store.cost(flash2) is None  # the measurement ran the framework's fused attention


def test_an_entry_says_when_it_ran_in_another_precision_or_with_stand_ins(tmp_path):
    """An FP8 shape measured in bf16 without TE, on the local spec with PyTorch stand-ins: both said in the
    source, which the projection reads (``model.carry``, the memory model)."""
    from primus_ext.model.costs import MEASURED_AS_TAG, STAND_IN_SPEC, STAND_IN_TAG

    fp8 = replace(TARGET, precision="fp8")
    with TimingStore(tmp_path / "a.sqlite", device=H200, versions=VERSIONS) as store:
        store.record(replace(_measurement(fp8, cost=COST), spec=STAND_IN_SPEC))
        store.record(replace(_measurement(TARGET, cost=COST), spec="te"))
        assert store.cost(fp8).source == f"measured:{H200}{MEASURED_AS_TAG}bf16{STAND_IN_TAG}"
        assert store.cost(TARGET) == COST  # ran as its shape says, on the TE spec: nothing to add


def test_a_real_fp8_measurement_wins_over_a_newer_bf16_stand_in_run(tmp_path):
    from primus_ext.model.costs import STAND_IN_SPEC

    fp8 = replace(TARGET, precision="fp8")
    te_cost = replace(COST, fwd_ms=0.5)
    with TimingStore(tmp_path / "a.sqlite", device=H200, versions=VERSIONS) as store:
        store.record(replace(_measurement(fp8, cost=te_cost), dtype="fp8", spec="te", date="2026-01-01T00:00:00+00:00"))
        store.record(replace(_measurement(fp8, cost=COST), spec=STAND_IN_SPEC))  # newer, bf16, stand-ins
        assert store.cost(fp8) == te_cost


def test_cpu_entries_are_not_tagged(tmp_path):
    """A CPU run builds FP8 shapes in bf16 too, but its timings stand in for a GPU's as they are."""
    fp8 = replace(TARGET, precision="fp8")
    cpu_cost = replace(COST, origin=CostOrigin.parse("measured:cpu"))
    with TimingStore(tmp_path / "a.sqlite", device="cpu:test", versions=VERSIONS) as store:
        store.record(replace(_measurement(fp8, device="cpu:test", cost=cpu_cost), spec="local+torch"))
        assert store.cost(fp8) == cpu_cost
