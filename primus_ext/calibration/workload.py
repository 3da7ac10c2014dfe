"""What a calibration record is about: one model, run one way, on one cluster.

A record applies *exactly* to the workload it was measured on (same model, same execution, same GPU type and
count) and, with a wider band, to *nearby* configurations: the same model in the same precision on the same GPU
type, laid out or batched differently. Everything else gets no calibration.

    w = Workload.of(model, execution, system)
    w.match(other)        # "exact" | "nearby" | None
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

Match = Literal["exact", "nearby"]

_LAYOUT_FIELDS = ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                  "virtual_pipeline_model_parallel_size", "context_parallel_size", "expert_model_parallel_size",
                  "data_parallel_size", "micro_batch_size", "global_batch_size", "seq_length",
                  "recompute_granularity")
"""Execution fields a record's description lists (what a user recognises a run by)."""


def fingerprint(value: Any) -> str:
    """A short stable hash of a spec (its fields as sorted JSON)."""
    data = asdict(value) if hasattr(value, "__dataclass_fields__") else value
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class Workload:
    model: str
    """``fingerprint`` of the model's architecture (every field but its name)."""
    execution: str
    """``fingerprint(execution)``."""
    gpu: str
    """The GPU's datasheet name (``GPUSpec.name``)."""
    num_gpus: int
    precision: str
    label: str = ""
    """For people: model name and the layout (``tp2 pp4 mbs1 gbs512 seq8192``)."""
    layout: tuple[tuple[str, Any], ...] = ()
    """The execution's layout fields, to tell how far a nearby configuration is."""

    @classmethod
    def of(cls, model: ModelSpec, execution: ExecutionSpec, system: SystemSpec) -> Workload:
        layout = tuple(sorted((name, getattr(execution, name)) for name in _LAYOUT_FIELDS))
        short = {"tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
                 "virtual_pipeline_model_parallel_size": "vpp", "context_parallel_size": "cp",
                 "expert_model_parallel_size": "ep", "data_parallel_size": "dp", "micro_batch_size": "mbs",
                 "global_batch_size": "gbs", "seq_length": "seq", "recompute_granularity": "recompute"}
        parts = [f"{short[k]}{getattr(execution, k)}" for k in _LAYOUT_FIELDS
                 if getattr(execution, k) not in (None, 1) or k == "micro_batch_size"]
        label = f"{model.name or 'model'} on {system.world_size} x {system.gpu.name}: {' '.join(parts)}"
        return cls(model=cls.model_key(model), execution=fingerprint(execution), gpu=system.gpu.name,
                   num_gpus=system.world_size, precision=execution.precision, label=label, layout=layout)

    @staticmethod
    def model_key(model: ModelSpec) -> str:
        """``fingerprint`` of the architecture: every field but the name (a renamed preset is the same model)."""
        return fingerprint({k: v for k, v in asdict(model).items() if k != "name"})

    def match(self, other: Workload) -> Match | None:
        """How a record of ``self`` applies to ``other``."""
        if self.model != other.model or self.gpu != other.gpu or self.precision != other.precision:
            return None
        if self.execution == other.execution and self.num_gpus == other.num_gpus:
            return "exact"
        return "nearby"

    def distance(self, other: Workload) -> int:
        """Layout fields that differ (plus one for a different GPU count): the nearest record wins."""
        theirs = dict(other.layout)
        return sum(theirs.get(k) != v for k, v in self.layout) + (self.num_gpus != other.num_gpus)

    def key(self) -> str:
        return f"{self.model}:{self.execution}:{self.gpu}:{self.num_gpus}:{self.precision}"

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "execution": self.execution, "gpu": self.gpu, "num_gpus": self.num_gpus,
                "precision": self.precision, "label": self.label,
                "layout": {k: v for k, v in self.layout}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        return cls(model=str(data["model"]), execution=str(data["execution"]), gpu=str(data["gpu"]),
                   num_gpus=int(data["num_gpus"]), precision=str(data["precision"]),
                   label=str(data.get("label", "")), layout=tuple(sorted((data.get("layout") or {}).items())))
