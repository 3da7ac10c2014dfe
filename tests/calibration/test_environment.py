"""A cluster environment in the profile's efficiency (``calibration.environment``): the kernel factor makes every
analytic kernel k times slower, the link factor moves the collectives only, the plausible ranges and their sentences,
and a stored cluster record's round trip and label rule (``calibration.cluster``).

    python -m pytest -q tests/calibration/test_environment.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from runlogs import TINY

from primus_ext.calibration.cluster import (
    ClusterRecord,
    ClusterRun,
    forget_cluster_records,
    load_cluster_records,
    pick_cluster_record,
    save_cluster_record,
)
from primus_ext.calibration.environment import (
    SCALEUP_FLOOR_BYTES_PER_S,
    apply_environment,
    implausible,
    plausible_range,
)
from primus_ext.calibration.record import RecordKept
from primus_ext.hardware import load_gpu
from primus_ext.projection import evaluate
from primus_ext.recipe import load_recipe


@pytest.fixture
def tiny(tmp_path: Path):
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(TINY)
    return load_recipe(recipe, cluster="h100", nodes=1)


def test_the_kernel_factor_scales_every_analytic_kernel_and_the_links_only_collectives(tiny):
    base = evaluate(tiny.model, tiny.execution, tiny.system)
    slow = evaluate(tiny.model, tiny.execution, apply_environment(tiny.system, {"kernels": 1.7}))
    assert slow.breakdown.compute_s == pytest.approx(1.7 * base.breakdown.compute_s, rel=1e-9)
    assert slow.breakdown.exposed_comm_s == pytest.approx(base.breakdown.exposed_comm_s, rel=1e-9)
    linked = evaluate(tiny.model, tiny.execution, apply_environment(tiny.system, {"scaleup_link": 0.1}))
    assert linked.breakdown.compute_s == pytest.approx(base.breakdown.compute_s, rel=1e-12)
    assert linked.breakdown.exposed_comm_s > 3 * base.breakdown.exposed_comm_s  # 1/8 of the link, + latency
    assert apply_environment(tiny.system, {}) is tiny.system
    with pytest.raises(KeyError):
        apply_environment(tiny.system, {"nvlink": 0.5})


def test_plausible_ranges_have_their_physical_sources():
    gpu = load_gpu("mi355x")
    low, high = plausible_range("scaleup_link", gpu)
    assert low == pytest.approx(SCALEUP_FLOOR_BYTES_PER_S / 537.6e9) and high == 1.0  # PCIe 3.0 x16 of xGMI
    assert implausible({"scaleup_link": 0.0735, "kernels": 1.3, "overlap": 0.0}, gpu) == []  # the real node: 40 GB/s
    [why] = implausible({"scaleup_link": 0.01}, gpu)
    assert "5.4 GB/s" in why and "PCIe 3.0 x16" in why
    assert "plausible range" in implausible({"kernels": 4.0}, gpu)[0]


def _record(label: str = "", configurations: int = 1, date: str = "2026-12-06T00:00:00Z") -> ClusterRecord:
    runs = tuple(ClusterRun(log=f"/logs/{i}.log", model=f"m{i}", configuration=f"c{i}", measured_s=1.0,
                            before_s=0.5, after_s=1.0) for i in range(configurations))
    return ClusterRecord(profile="mi355x", gpu="mi355x", label=label, values={"scaleup_link": 0.05},
                         profile_values={"scaleup_link": 0.8428}, runs=runs, date=date)


def test_a_cluster_record_round_trips_is_replaced_only_by_as_much_evidence_and_is_picked_by_label(tmp_path: Path):
    store = tmp_path / "timings.sqlite"
    gpu = load_gpu("mi355x")
    save_cluster_record(_record(configurations=2), store)
    [back] = load_cluster_records(store, profile="mi355x", gpu=gpu)
    assert back == _record(configurations=2)
    with pytest.raises(RecordKept, match="resting on more configurations"):
        save_cluster_record(_record(configurations=1), store)
    save_cluster_record(_record(label="rack-3"), store)  # another label: side by side
    records = load_cluster_records(store)
    assert pick_cluster_record(records, profile="mi355x")[0].configurations == 2
    assert pick_cluster_record(records, profile="mi355x", label="rack-3")[0].label == "rack-3"
    none, note = pick_cluster_record(records, profile="mi355x", label="rack-9")
    assert none is None and "rack-9" in note and "rack-3" in note
    assert pick_cluster_record(records, profile="mi300x") == (None, "")
    assert forget_cluster_records(store, profile="mi355x", label="rack-3") == 1
    assert [r.label for r in load_cluster_records(store)] == [""]


def test_a_stored_value_outside_its_physical_range_is_not_read(tmp_path: Path, capsys):
    store = tmp_path / "timings.sqlite"
    bad = ClusterRecord(profile="mi355x", gpu="mi355x", values={"scaleup_link": 3.0}, runs=_record().runs)
    save_cluster_record(bad, store)
    assert load_cluster_records(store, gpu=load_gpu("mi355x")) == []
    assert "not readable" in capsys.readouterr().err
