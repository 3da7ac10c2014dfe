"""Numbers written into a result document stay inside the schema's bounds (round, then clamp float noise)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from primus_ext.results import document, dumps
from primus_ext.results.conform import conform
from primus_ext.results.schema import SCHEMA


def _verify_doc(exposed_fraction: float, mfu: float) -> dict:
    comm = {"total_s": 1.0, "exposed_s": 1.0, "exposed_fraction": exposed_fraction, "group": "8 ranks"}
    return {"kind": "projection", "mfu": mfu, "breakdown": {"comm": {"dp_grad": comm}}}


def test_float_noise_over_a_fraction_bound_is_clamped() -> None:
    doc = conform(_verify_doc(1.0000000000000009, 0.3372222222222222))
    assert doc["breakdown"]["comm"]["dp_grad"]["exposed_fraction"] == 1.0
    assert doc["mfu"] == 0.337222222222  # 12 significant digits


def test_a_real_violation_is_left_for_the_schema_to_see() -> None:
    doc = conform(_verify_doc(1.3, -0.2))
    assert doc["breakdown"]["comm"]["dp_grad"]["exposed_fraction"] == 1.3 and doc["mfu"] == -0.2


def test_nullable_and_referenced_bounds_are_followed() -> None:
    trial = {"config": {}, "status": "projected", "origin": "x", "step_time_s": -1e-18, "tokens_per_s_per_gpu": None,
             "mfu": 1 + 1e-15, "breakdown": None, "sources": None, "peak_memory_gib": None, "capacity_gib": None,
             "peak_stage": None, "problems": []}
    doc = document("tune", strategy="exhaustive", margin=0.05, best=trial, baseline=None, gain=None, optimum=None,
                   regret=None, ranked=[trial], pareto=[], sensitivity=[], stats={}, exhaustive_stats=None,
                   candidates=1, notes=[], best_execution=None, launch_environment={})
    out = json.loads(dumps(doc))
    assert out["best"]["mfu"] == 1.0 and out["ranked"][0]["step_time_s"] == 0.0
    jsonschema.Draft202012Validator(SCHEMA).validate(out)


@pytest.mark.parametrize("value", [0.1 + 0.2, 1e-300, 123456789.123456789])
def test_rounding_keeps_twelve_significant_digits(value: float) -> None:
    assert conform({"kind": "x", "v": value})["v"] == pytest.approx(value, rel=1e-11)
