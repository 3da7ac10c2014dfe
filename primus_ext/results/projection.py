"""Projection, memory and verification results as schema documents (``primus_ext.results.schema``).

    from primus_ext.results.projection import memory_document, projection_document
    projection_document(projection, recipe=recipe)   # primus-ext project RECIPE --json -
    memory_document(memory, recipe=recipe)           # primus-ext project RECIPE --memory-only --json -

The memory block is the same in both (``doc["memory"]["peak_memory_gib"]``), each pipeline stage with its
parts (parameters, gradients, optimizer state, activations, other) in GiB.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from primus_ext.projection.result import IMBALANCE_THRESHOLD, imbalance, stage_idle
from primus_ext.results import document, gib

BAND_WHAT = ("tokens_per_s_per_gpu with every efficiency moved by the profile's band (+-10 %, wider where its "
             "calibration rests on few runs: efficiency.band) and the measurement spread: a sensitivity band, "
             "not a confidence interval")
PARTS = ("params", "grads", "optimizer", "activations", "other")
"""A stage's memory parts (``<part>_gib``); they add up to its ``peak_memory_gib``."""


def _target(system: Any) -> dict[str, Any]:
    return {"cluster": system.name, "gpu": system.gpu.name, "nodes": system.num_nodes,
            "world_size": system.world_size}


def recipe_fields(recipe: Any) -> dict[str, Any]:
    """What a document says of the recipe: its file, the preset files read, the Primus root, the warnings and where
    its target GPU and node count were stated (``recipe.target``, ``Recipe.nodes_source``)."""
    source, root = getattr(recipe, "source", None), getattr(recipe, "config_root", None)
    target = getattr(recipe, "target", None)
    return {"recipe": None if source is None else str(source),
            "preset_files": [str(p) for p in getattr(recipe, "preset_files", ()) or ()],
            "config_root": None if root is None else str(root),
            "warnings": [str(w) for w in getattr(recipe, "warnings", ()) or ()],
            "target_source": None if target is None else str(target.source),
            "nodes_source": getattr(recipe, "nodes_source", None)}


def stage_memory(stage: Any) -> dict[str, Any]:
    """One pipeline stage's peak and its parts (GiB); ``detail_gib`` the named parts behind them."""
    out: dict[str, Any] = {"rank": int(stage.rank), "peak_memory_gib": gib(stage.total_bytes)}
    out.update({f"{part}_gib": gib(getattr(stage, f"{part}_bytes")) for part in PARTS})
    out["microbatches_in_flight"] = round(float(stage.microbatches_in_flight), 3)
    out["detail_gib"] = {k: gib(v) for k, v in stage.detail.items() if not k.endswith("count")}
    out["counts"] = {k: int(v) for k, v in stage.detail.items() if k.endswith("count")}
    return out


def memory_block(memory: Any) -> dict[str, Any] | None:
    """The ``memory`` block: peak, capacity, headroom, verdict and every stage with its parts."""
    if memory is None:
        return None
    from primus_ext.model.memory import margin_verdict

    return {
        "peak_memory_gib": gib(memory.peak_bytes),
        "capacity_gib": gib(memory.capacity_bytes),
        "headroom_gib": gib(memory.headroom_bytes),
        "fits": bool(memory.fits),
        "verdict": margin_verdict(memory.peak_bytes, memory.capacity_bytes),
        "margin": float(memory.margin),
        "peak_stage": int(memory.peak_stage.rank),
        "activations_source": memory.source,
        "stages": [stage_memory(s) for s in memory.stages],
    }


def memory_document(memory: Any, *, recipe: Any = None, system: Any = None, model: str = "") -> dict[str, Any]:
    """``project --memory-only --json``."""
    system = system if system is not None else recipe.system
    name = model or (recipe.model.name if recipe is not None else "")
    return document("memory", model=name, **_target(system), fits=bool(memory.fits), memory=memory_block(memory),
                    **recipe_fields(recipe))


def band(low_high: tuple[float, float] | None, calibration: Any = None, gpu: Any = None,
         evidence: Any = None) -> dict[str, Any] | None:
    """The JSON band; ``gpu``: the profile whose widened band says why (``projection.project.band_reason``);
    ``evidence``: the published runs the band's measured error rests on (``projection.error_bands.Evidence``)."""
    if low_high is None:
        return None
    from primus_ext.projection.project import band_range, band_reason

    reason = band_reason(gpu) if gpu is not None else ""
    widened = f"; here +-{band_range(gpu):.0%}, widened: {reason}" if reason else ""
    if calibration is not None:
        what = (f"tokens_per_s_per_gpu calibrated from real runs ({calibration.match}): +-{calibration.band:.0%}, the "
                "runs' spread" + (" widened for a nearby configuration" if calibration.match == "nearby" else ""))
    elif evidence is not None:
        wider = "; per side the wider of that and the sensitivity band" if evidence.known else ""
        what = f"tokens_per_s_per_gpu: {evidence.sentence()}{wider} (the sensitivity band: {BAND_WHAT}{widened})"
    else:
        what = BAND_WHAT + widened
    out = {"low": low_high[0], "high": low_high[1], "what": what}
    if calibration is None and evidence is not None:
        out["evidence"] = evidence.to_dict()
    return out


def projection_fields(p: Any, *, timeline: bool = False) -> dict[str, Any]:
    """The projection's figures, breakdown, stages, memory, sources and inputs (no document header)."""
    b = p.breakdown
    peaks = {s.rank: gib(s.total_bytes) for s in (p.memory.stages if p.memory is not None else ())}
    idle = {i.rank: i for i in stage_idle(p)}
    stages = []
    for s in p.stages:
        stage = dataclasses.asdict(s)
        stage["fwd_s"], stage["bwd_s"] = list(s.fwd_s), list(s.bwd_s)
        stage["peak_memory_gib"] = peaks.get(s.rank)
        stage["idle_s"], stage["idle_fraction"] = idle[s.rank].idle_s, idle[s.rank].idle_fraction
        stages.append(stage)
    spread = imbalance(p)
    fields: dict[str, Any] = {
        "model": p.model.name,
        **_target(p.system),
        "step_time_s": p.step_time_s,
        "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
        "tflops_per_gpu": p.model_tflops_per_gpu,
        "mfu": p.mfu,
        "band": band(p.band, getattr(p, "calibration", None), p.system.gpu, getattr(p, "band_evidence", None)),
        "num_microbatches": p.num_microbatches,
        "fits": None if p.memory is None else bool(p.memory.fits),
        "breakdown": {
            "compute_s": b.compute_s, "recompute_s": b.recompute_s, "overhead_s": b.overhead_s,
            "bubble_s": b.bubble_s, "optimizer_s": b.optimizer_s,
            "comm": {c.kind: {"total_s": c.total_s, "exposed_s": c.exposed_s,
                              "exposed_fraction": c.exposed_fraction, "group": c.group} for c in b.comms},
        },
        "stages": stages,
        "imbalance": None if spread is None else {
            "spread": spread.spread, "busiest_rank": spread.busiest_rank, "idlest_rank": spread.idlest_rank,
            "flagged": spread.flagged, "threshold": IMBALANCE_THRESHOLD, "fix": spread.fix,
            "message": spread.message},
        "memory": memory_block(p.memory),
        "sources": dict(p.sources),
        "notes": list(p.notes),
        **({"calibration": p.calibration.to_dict()} if getattr(p, "calibration", None) is not None else {}),
        **({"cluster_calibration": p.cluster_calibration.to_dict()}
           if getattr(p, "cluster_calibration", None) is not None else {}),
        "inputs": {
            "model": dataclasses.asdict(p.model),
            "execution": dataclasses.asdict(p.execution),
            "system": {"name": p.system.name, "gpu": p.system.gpu.name, "num_nodes": p.system.num_nodes,
                       "world_size": p.system.world_size,
                       "efficiency": dataclasses.asdict(p.system.gpu.efficiency)},
        },
    }
    if timeline:
        fields["timeline"] = [dataclasses.asdict(e) for e in p.timeline]
    return fields


def projection_document(p: Any, *, recipe: Any = None, timeline: bool = False, **extra: Any) -> dict[str, Any]:
    """``project --json`` and the launcher's projection.json (``extra``: e.g. ``overrides``, ``verify``)."""
    return document("projection", **projection_fields(p, timeline=timeline), **recipe_fields(recipe), **extra)


def verify_fields(v: Mapping[str, Any]) -> dict[str, Any]:
    """A short run's measured vs projected figures (``short_run.VerifyResult.as_dict()``) in the schema's names."""
    return {
        "measured": {"step_time_s": v["measured_step_s"], "tokens_per_s_per_gpu": v["measured_tokens_per_s_per_gpu"],
                     "spread": v["measured_spread"], "steps": v["measured_steps"],
                     "collective_s": v.get("measured_collective_s"), "skew_s": v.get("measured_skew_s")},
        "projected": {"step_time_s": v["projected_step_s"],
                      "tokens_per_s_per_gpu": v["projected_tokens_per_s_per_gpu"],
                      "exposed_comm_s": v.get("projected_exposed_comm_s")},
        "error_pct": v["error_pct"],
        "world_size": v["world_size"], "layout": v["layout"], "schedule": v["schedule"], "device": v["device"],
        "fabric": v["fabric"],
    }


def verify_document(v: Mapping[str, Any], *, training: Mapping[str, Any] | None = None,
                    recipe: Any = None) -> dict[str, Any]:
    """``train --train-iters N --verify``: verify.json (``training``: the run's own record)."""
    return document("verify", **verify_fields(v), training=dict(training or {}), **recipe_fields(recipe))
