"""In-node collective sweep over two gloo ranks, stored next to the layer costs."""

from __future__ import annotations

import pytest

from primus_ext.measure.fabric import OPS, fabric_sweep
from primus_ext.measure.store import TimingStore


@pytest.mark.slow
def test_sweep_covers_every_op_and_size_with_nccl_tests_bus_bandwidth(tmp_path):
    sizes = (2**12, 2**16)
    points, failures = fabric_sweep(world=2, sizes=sizes, reps=2, warmup=1, device="cpu")
    assert failures == []
    assert {(p.op, p.nbytes) for p in points} == {(op, n) for op in OPS for n in sizes}
    for p in points:
        assert p.world == 2 and p.backend == "gloo" and p.time_ms > 0
        algbw = p.nbytes / (p.time_ms * 1e-3) / 1e9
        factor = {"all_reduce": 1.0}.get(p.op, 0.5 if p.op != "send_recv" else 1.0)  # 2(n-1)/n, (n-1)/n, 1
        assert p.busbw_gbps == pytest.approx(algbw * factor)
    with TimingStore(tmp_path / "s.sqlite", device=points[0].device) as store:
        store.record_fabric(points)
        assert store.fabric(op="all_gather") == sorted((p for p in points if p.op == "all_gather"),
                                                       key=lambda p: p.nbytes)


def test_unknown_collective_is_refused():
    with pytest.raises(ValueError, match="unknown collectives"):
        fabric_sweep(world=2, ops=("all_reduce", "broadcastt"))
