"""The JSON Schema (draft 2020-12) every command's JSON document follows; one ``kind`` per command.

    import jsonschema                                   # a test dependency ('.[dev]'), not a runtime one
    from primus_ext.results.schema import SCHEMA
    jsonschema.validate(json.load(open("projection.json")), SCHEMA)

``$defs`` hold what the kinds share: ``figures`` (``step_time_s``, ``tokens_per_s_per_gpu``, ``tflops_per_gpu``,
``mfu`` as a fraction), ``band`` (``low``, ``high``, ``what``), ``memory`` (peak, capacity, headroom, verdict and
each pipeline stage with its parts in GiB), ``trial`` (one configuration a search tried) and ``ci_figures``.
Documents and the objects whose names are the contract refuse unknown keys, so a renamed field fails the test
(``tests/results/test_schema.py``) instead of drifting.
"""

from __future__ import annotations

from typing import Any

from primus_ext.results.version import KINDS, SCHEMA_VERSION
from primus_ext.tune.axes import LABELS as AXIS_LABELS

NUM: dict[str, Any] = {"type": "number"}
NONNEG: dict[str, Any] = {"type": "number", "minimum": 0}
FRACTION: dict[str, Any] = {"type": "number", "minimum": 0, "maximum": 1}
STR: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer"}
BOOL: dict[str, Any] = {"type": "boolean"}


def _null(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/$defs/{name}"}


def _closed(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """An object with exactly these keys (all required unless ``required`` names a subset)."""
    return {"type": "object", "properties": properties, "required": list(properties) if required is None
            else required, "additionalProperties": False}


FIGURES = {"step_time_s": NONNEG, "tokens_per_s_per_gpu": NONNEG, "tflops_per_gpu": NONNEG, "mfu": FRACTION}
TARGET = {"model": STR, "cluster": STR, "gpu": STR, "nodes": INT, "world_size": INT}
RECIPE = {"recipe": _null(STR), "preset_files": {"type": "array", "items": STR}, "config_root": _null(STR),
          "warnings": {"type": "array", "items": STR}, "target_source": _null(STR), "nodes_source": _null(STR)}
"""``target_source``, ``nodes_source``: where the target GPU and the node count were stated (``recipe.target``,
``Recipe.nodes_source``); optional, as documents written before them stay valid under schema version 1."""
PROVENANCE = ("target_source", "nodes_source")
"""The optional keys of ``RECIPE``."""
HEADER = {"schema_version": {"const": SCHEMA_VERSION}, "kind": {"enum": list(KINDS)}}
PARTS = {f"{part}_gib": NUM for part in ("params", "grads", "optimizer", "activations", "other")}

_VERDICT: dict[str, Any] = {"enum": ["fits", "over the margin", "within the model's error", "out of memory"]}
STAGE_MEMORY = _closed({
    "rank": INT, "peak_memory_gib": NONNEG, **PARTS, "microbatches_in_flight": NONNEG,
    "detail_gib": {"type": "object", "additionalProperties": NUM},
    "counts": {"type": "object", "additionalProperties": INT},
})
MEMORY = _closed({
    "peak_memory_gib": NONNEG, "capacity_gib": NONNEG, "headroom_gib": NUM, "fits": BOOL,
    "verdict": _VERDICT,
    "margin": FRACTION, "peak_stage": INT,
    "activations_source": STR, "stages": {"type": "array", "items": _ref("stage_memory"), "minItems": 1},
})
BAND_EVIDENCE = _closed({
    "class": _closed({"family": STR, "type": {"enum": ["dense", "moe", "hybrid"]}, "precision": STR, "scale": STR}),
    "level": {"enum": ["class", "family x type x precision", "family x type", "type", "all rows", "none"]},
    "n": INT, "n_class": INT, "n_family_type": INT, "error_pct_low": _null(NUM), "error_pct_high": _null(NUM),
}, required=["class", "level", "n", "n_class", "error_pct_low", "error_pct_high"])
"""The published runs an uncalibrated band's measured error rests on (``projection.error_bands.Evidence``): the
projection's class, the level its rows were pooled at (``type``: the model type on every GPU family; ``none``: no
published run of the model type, the band is the sensitivity band), how many rows there, in the class itself and in
its family x type (``n_family_type``, optional: 0 when the type's rows on other families are the evidence), the
signed-error interval applied (%)."""
BAND = _closed({"low": NONNEG, "high": NONNEG, "what": STR, "evidence": BAND_EVIDENCE},
               required=["low", "high", "what"])
"""``evidence``: optional (an uncalibrated projection's band; documents written before it stay valid)."""
COMM = _closed({"total_s": NONNEG, "exposed_s": NONNEG, "exposed_fraction": FRACTION, "group": STR})
BREAKDOWN = _closed({
    "compute_s": NONNEG, "recompute_s": NONNEG, "overhead_s": NONNEG, "bubble_s": NONNEG, "optimizer_s": NONNEG,
    "comm": {"type": "object", "additionalProperties": _ref("comm")},
})
SECONDS_LIST = {"type": "array", "items": NONNEG}
STAGE_TIME = _closed({
    "rank": INT, "layers": INT, "fwd_s": SECONDS_LIST, "bwd_s": SECONDS_LIST, "busy_s": NONNEG, "finish_s": NONNEG,
    "embedding": BOOL, "output": BOOL, "dense_params": INT, "expert_params": INT, "peak_memory_gib": _null(NONNEG),
    "idle_s": NONNEG, "idle_fraction": FRACTION,
}, required=["rank", "layers", "fwd_s", "bwd_s", "busy_s", "finish_s", "embedding", "output", "dense_params",
             "expert_params", "peak_memory_gib"])
"""``idle_s`` / ``idle_fraction`` (the stage's wait in the pipeline, and its share of the step) are optional:
documents written before them stay valid under schema version 1."""
IMBALANCE = _closed({"spread": FRACTION, "busiest_rank": INT, "idlest_rank": INT, "flagged": BOOL,
                     "threshold": FRACTION, "fix": STR, "message": STR})
VERIFY = {
    "measured": _closed({"step_time_s": NONNEG, "tokens_per_s_per_gpu": NONNEG, "spread": NONNEG, "steps": INT,
                         "collective_s": _null(NONNEG), "skew_s": _null(NONNEG)}),
    "projected": _closed({"step_time_s": NONNEG, "tokens_per_s_per_gpu": NONNEG, "exposed_comm_s": _null(NONNEG)}),
    "error_pct": NUM, "world_size": INT, "layout": STR, "schedule": STR, "device": STR, "fabric": STR,
}
CALIBRATION_APPLIED = _closed({
    "match": {"enum": ["exact", "nearby"]}, "kernel_factor": NONNEG, "overhead_s": NONNEG,
    "scope": {"enum": ["kernels", "step"]}, "memory_factor": _null(NONNEG), "band": NONNEG,
    "uncalibrated_step_time_s": NONNEG, "uncalibrated_peak_bytes": _null(NONNEG), "record": STR,
    "logs": {"type": "array", "items": STR}, "date": STR, "store": _null(STR), "timeline_scale": NONNEG,
}, required=["match", "kernel_factor", "overhead_s", "scope", "memory_factor", "band", "uncalibrated_step_time_s",
             "uncalibrated_peak_bytes", "record"])
"""``logs`` / ``date`` / ``store`` (which stored record changed the figures, and where to ``--forget`` it) and
``timeline_scale`` (the stages' and the timeline's times x it) are optional: documents written before them stay valid
under schema version 1."""
CLUSTER_APPLIED = _closed({
    "record": STR, "values": {"type": "object", "additionalProperties": NONNEG},
    "profile_values": {"type": "object", "additionalProperties": NONNEG},
    "origin": {"enum": ["cluster", "model record"]}, "logs": {"type": "array", "items": STR}, "date": STR,
    "store": _null(STR),
})
"""The cluster record a projection ran on (``calibrate --scope cluster``): optional under schema version 1."""
RUN_FIGURES = _closed({"step_s": NONNEG, "tokens_per_s_per_gpu": _null(NONNEG), "tflops_per_gpu": _null(NONNEG),
                       "peak_bytes": _null(NONNEG), "spread": NONNEG, "iterations": INT},
                      required=["step_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "peak_bytes", "spread"])
LOG_COMPARISON = _closed({
    "log": STR, "format": STR, "framework": _null(STR), "measured": RUN_FIGURES, "projected": RUN_FIGURES,
    "step_ratio": NONNEG, "iterations_used": INT, "first_iteration": _null(INT), "last_iteration": _null(INT),
    "excluded": {"type": "array"}, "averaged": BOOL, "flags": {"type": "array", "items": STR},
    "overrides": {"type": "array", "items": STR}, "memory_rank": _null(INT), "notes": {"type": "array", "items": STR},
})
PROJECTION = {
    **TARGET, **FIGURES, "band": _null(_ref("band")), "num_microbatches": INT, "fits": _null(BOOL),
    "breakdown": _ref("breakdown"), "stages": {"type": "array", "items": _ref("stage_time"), "minItems": 1},
    "imbalance": _null(IMBALANCE), "memory": _null(_ref("memory")),
    "sources": {"type": "object", "additionalProperties": STR},
    "notes": {"type": "array", "items": STR}, "inputs": {"type": "object"},
    "calibration": _ref("calibration_applied"),
    "cluster_calibration": _ref("cluster_applied"),
}
CONFIG = {"type": "object", "propertyNames": {"enum": list(AXIS_LABELS)}}
"""A tuner configuration: axis -> value, keyed by the recipe / ``ExecutionSpec`` field each axis sets
(``tensor_model_parallel_size``, ``micro_batch_size``, ...) or, for the tuner's own choices, ``split``,
``recompute``, ``sharding``, ``dp_overlap`` (``primus_ext.tune.axes``; the short labels tp, mbs, ... are display
only)."""
TRIAL = _closed({
    "config": CONFIG, "status": {"enum": ["projected", "oom", "illegal"]}, "origin": STR,
    "step_time_s": _null(NONNEG), "tokens_per_s_per_gpu": _null(NONNEG), "mfu": _null(FRACTION),
    "breakdown": _null({"type": "object", "additionalProperties": NUM}),
    "sources": _null({"type": "object", "additionalProperties": STR}),
    "peak_memory_gib": _null(NONNEG), "capacity_gib": _null(NONNEG), "peak_stage": _null(INT),
    "problems": {"type": "array", "items": {"type": "object", "required": ["path", "message"]}},
})
CI_FIGURES = {**{k: _null(v) for k, v in FIGURES.items()}, "peak_memory_gib": _null(NONNEG),
              "cost_source": STR}
_CI_ENTRY = {
    "name": STR, "status": {"enum": ["pass", "improved", "regression", "drift", "error"]}, "message": STR,
    **CI_FIGURES, "fits": _null(BOOL), "baseline": _null(_ref("baseline_entry")),
    "throughput_delta_pct": _null(NUM), "memory_delta_gib": _null(NUM), "measured_error_pct": _null(NUM),
    "wall_s": NONNEG,
}
CI_ENTRY = _closed({**_CI_ENTRY, "notes": {"type": "array", "items": STR}}, required=list(_CI_ENTRY))
"""``notes``: how the recipe was read where it may surprise (bundled presets); optional, added in schema 1."""
BASELINE_ENTRY = {"type": "object", "properties": CI_FIGURES,
                  "required": ["tokens_per_s_per_gpu", "peak_memory_gib", "step_time_s"],
                  "additionalProperties": False}
VALIDATION_ROW = {"type": "object", "required": ["measured_tokens_per_s_per_gpu", "projected_tokens_per_s_per_gpu",
                                                 "error_pct"],
                  "properties": {"measured_tokens_per_s_per_gpu": _null(NUM),
                                 "projected_tokens_per_s_per_gpu": _null(NUM), "error_pct": _null(NUM),
                                 "band": _closed({"low": NONNEG, "high": NONNEG,
                                                  "unit": {"const": "tokens_per_s_per_gpu"}, "inside": BOOL,
                                                  "evidence": BAND_EVIDENCE})}}
"""``band``: a projected row's band in tokens/s/GPU (``validate.bands``), its class error taken leave-one-model-out;
the summary's ``band_coverage`` says how often the bands hold (optional: added with the measured band, issue 53)."""
VALIDATION_REPORT = {"type": "object", "required": ["rows", "summary"],
                     "properties": {"rows": {"type": "array", "items": _ref("validation_row")},
                                    "summary": {"type": "object"}}}


CELL: dict[str, Any] = {"type": ["number", "string", "null"]}
COMPARISON_SIDE = _closed({**PROJECTION, **RECIPE, "label": STR, "overrides": {"type": "array", "items": STR}},
                          required=[k for k in (*PROJECTION, *RECIPE, "label", "overrides")
                                    if k not in ("calibration", "imbalance", *PROVENANCE,
                                                 "cluster_calibration")])
"""One side of ``compare --json``: the ``projection`` document's fields (less its header), a label, the overrides."""


def _kind(kind: str, properties: dict[str, Any], *, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """The schema of one kind: the header, ``properties`` (all required but ``optional``), nothing else."""
    props = {**HEADER, **properties, "kind": {"const": kind}}
    return {"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
            "then": {"type": "object", "properties": props, "additionalProperties": False,
                     "required": [k for k in props if k not in optional]}}


SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": f"https://primus-ext/results/v{SCHEMA_VERSION}.json",
    "title": "primus-ext result document",
    "type": "object",
    "required": ["schema_version", "kind"],
    "properties": HEADER,
    "$defs": {"stage_memory": STAGE_MEMORY, "memory": MEMORY, "band": BAND, "comm": COMM, "breakdown": BREAKDOWN,
              "stage_time": STAGE_TIME, "trial": TRIAL, "ci_entry": CI_ENTRY, "baseline_entry": BASELINE_ENTRY,
              "validation_row": VALIDATION_ROW, "validation_report": VALIDATION_REPORT,
              "verify": _closed(VERIFY), "calibration_applied": CALIBRATION_APPLIED,
              "cluster_applied": CLUSTER_APPLIED,
              "comparison_side": COMPARISON_SIDE},
    "allOf": [
        _kind("projection", {**PROJECTION, **RECIPE, "overrides": {"type": "array", "items": STR},
                             "verify": _ref("verify"), "timeline": {"type": "array"}},
              optional=("overrides", "verify", "timeline", "calibration", "imbalance", *PROVENANCE,
                        "cluster_calibration")),
        _kind("calibration", {
            **TARGET, "runs": {"type": "array", "items": LOG_COMPARISON, "minItems": 1},
            "record": _null({"type": "object"}), "stored_in": _null(STR), "refused": _null(STR),
            "applies_to": {"type": "array", "items": STR}, **RECIPE, "scope": {"enum": ["model", "cluster"]},
        }, optional=(*PROVENANCE, "scope")),
        _kind("memory", {**TARGET, "fits": BOOL, "memory": _ref("memory"), **RECIPE}, optional=PROVENANCE),
        _kind("comparison", {"a": _ref("comparison_side"), "b": _ref("comparison_side"), "rows": {
            "type": "array", "items": _closed({"name": STR, "a": CELL, "b": CELL, "unit": STR, "change": STR})}}),
        _kind("tune", {
            **TARGET, "strategy": STR, "margin": _null(FRACTION), "best": _null(_ref("trial")),
            "baseline": _null(_ref("trial")), "gain": _null(NUM), "optimum": _null(_ref("trial")),
            "regret": _null(FRACTION), "ranked": {"type": "array", "items": _ref("trial")},
            "pareto": {"type": "array", "items": _ref("trial")},
            "sensitivity": {"type": "array", "items": _closed({
                "axis": {"enum": list(AXIS_LABELS)}, "value": {}, "status": {"enum": ["projected", "oom", "illegal"]},
                "change": _null(NUM), "reason": STR})},
            "stats": {"type": "object"}, "exhaustive_stats": _null({"type": "object"}), "candidates": _null(INT),
            "notes": {"type": "array", "items": STR}, "best_execution": _null({"type": "object"}),
            "launch_environment": {"type": "object"}, **RECIPE,
            "verify_top": {"type": "object", "required": ["candidates", "regret", "spearman"]},
            "fastest": _null(_ref("trial")), "tie_band": _null(_ref("band")),
            "ties": {"type": "array", "items": _ref("trial")}, "kept_recipe": BOOL, "same_figures": INT,
            "search_regret": _null(FRACTION), "max_changes": _null(INT),
        }, optional=(*TARGET, *RECIPE, "verify_top", "fastest", "tie_band", "ties", "kept_recipe", "same_figures",
                     "search_regret", "max_changes")),
        _kind("sweep", {
            "model": STR, "cluster": STR, "gpu": STR, "gpus_per_node": INT, "tokens": NONNEG, **RECIPE,
            "entries": {"type": "array", "minItems": 1, "items": _closed({
                "nodes": INT, "world_size": _null(INT), "status": {"enum": ["projected", "refused"]},
                "reason": _null(STR), **{k: _null(v) for k, v in FIGURES.items()},
                "peak_memory_gib": _null(NONNEG), "capacity_gib": _null(NONNEG),
                "verdict": _null(_VERDICT), "gpu_hours": _null(NONNEG), "wall_hours": _null(NONNEG)})},
        }, optional=("target_source",)),
        _kind("ci", {"suite": STR, "exit_code": {"enum": [0, 1, 2]}, "counts": {
            "type": "object", "additionalProperties": INT}, "entries": {"type": "array", "items": _ref("ci_entry")}}),
        _kind("baseline", {"suite": STR,
                           "entries": {"type": "object", "additionalProperties": _ref("baseline_entry")}}),
        _kind("verify", {**VERIFY, "training": {"type": "object"}, **RECIPE}, optional=PROVENANCE),
        _kind("validation", {
            "label": STR, "rows": {"type": "array", "items": _ref("validation_row")}, "summary": {"type": "object"},
            "one_run_offset_summary": {"type": "object"}, "calibrated_from_user_run": _ref("validation_report"),
            "hybrid": _ref("validation_report"), "hybrid_analytic_same_rows_summary": {"type": "object"},
            "fits": {"type": "object"}, "pooled_prior": {"type": "object"},
            "cross_validation": _ref("validation_report"),
            "cross_validation_one_run_offset_summary": {"type": "object"},
        }, optional=("calibrated_from_user_run", "hybrid", "hybrid_analytic_same_rows_summary", "fits",
                     "pooled_prior", "cross_validation", "cross_validation_one_run_offset_summary")),
    ],
}
"""Validate a document with ``jsonschema.Draft202012Validator(SCHEMA)``."""
