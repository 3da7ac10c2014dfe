"""The tuner's axis names: one vocabulary for a configuration, and the short labels people type and read.

A configuration (``{axis: value}``) is keyed by the ``ExecutionSpec`` / recipe field name wherever one field carries
the axis (``tensor_model_parallel_size``, ``micro_batch_size``, ...); the axes that set several fields at once
(``split``, ``recompute``, ``sharding``, ``dp_overlap``) are tuner choices, not recipe keys, and keep their own names.
Trials, logs, the tune JSON, the strategies and the reports all use these names.

The short names (``tp``, ``pp``, ``mbs``, ...) are display labels only (``LABELS``: table headers, progress and
summary lines) and input aliases where a person types them or an older file carries them (``--pin tp=2``, a trial
log or LLM reply written with short keys): ``canonical`` translates them once, at that boundary::

    canonical({"tp": 2, "mbs": 1})      # {"tensor_model_parallel_size": 2, "micro_batch_size": 1}
    label(MBS)                          # "mbs"
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

TP = "tensor_model_parallel_size"
ETP = "expert_tensor_parallel_size"
PP = "pipeline_model_parallel_size"
VPP = "virtual_pipeline_model_parallel_size"
SCHEDULE = "pipeline_schedule"
SPLIT = "split"
CP = "context_parallel_size"
EP = "expert_model_parallel_size"
MBS = "micro_batch_size"
RECOMPUTE = "recompute"
SHARDING = "sharding"
PRECISION = "precision"
TP_OVERLAP = "tp_comm_overlap"
EP_OVERLAP = "overlap_moe_expert_parallel_comm"
DP_OVERLAP = "dp_overlap"

LABELS: dict[str, str] = {
    TP: "tp", ETP: "etp", PP: "pp", VPP: "vpp", SCHEDULE: "schedule", SPLIT: "split", CP: "cp", EP: "ep",
    MBS: "mbs", RECOMPUTE: "recompute", SHARDING: "sharding", PRECISION: "precision", TP_OVERLAP: "tp_comm_overlap",
    EP_OVERLAP: "ep_overlap", DP_OVERLAP: "dp_overlap",
}
"""Axis name -> its short display label (the names the tuner used before its axes took the recipe's names)."""
ALIASES: dict[str, str] = {short: name for name, short in LABELS.items() if short != name}
"""Short label -> axis name: accepted where a person types an axis or an older file carries one."""


def label(name: str) -> str:
    """The short display label of an axis (an unknown name as given)."""
    return LABELS.get(name, name)


def axis_name(key: str) -> str:
    """The axis name of a key given as a label or a name (anything else as given, for the caller to refuse)."""
    return ALIASES.get(key, key)


def spelled(names: Iterable[str]) -> str:
    """Axis names for a message, each with its label: ``tensor_model_parallel_size (tp), split, ...``."""
    return ", ".join(name if label(name) == name else f"{name} ({label(name)})" for name in names)


def canonical(config: Mapping[Any, Any]) -> dict[Any, Any]:
    """``config`` with its short labels translated to axis names (the boundary reader of a configuration from a
    person, an LLM or an older file). Keys that are neither stay as given, for the space to name as unknown; a key
    given both ways stays as given too (its label then reads as an unknown axis), so nothing is silently dropped."""
    out: dict[Any, Any] = {}
    for key, value in config.items():
        name = ALIASES.get(key, key) if isinstance(key, str) else key
        if name != key and name in config:
            name = key
        out[name] = value
    return out


__all__ = ["ALIASES", "CP", "DP_OVERLAP", "EP", "EP_OVERLAP", "ETP", "LABELS", "MBS", "PP", "PRECISION", "RECOMPUTE",
           "SCHEDULE", "SHARDING", "SPLIT", "TP", "TP_OVERLAP", "VPP", "axis_name", "canonical", "label",
           "spelled"]
