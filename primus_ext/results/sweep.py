"""``primus-ext project RECIPE --nodes 1,2,4,8 --json OUT``: a scaling sweep as one schema document (kind
``sweep``).

    from primus_ext.results.sweep import sweep_document
    doc = sweep_document(result)                      # result: primus_ext.sweep.Sweep
    [(e["nodes"], e["tokens_per_s_per_gpu"], e["gpu_hours"]) for e in doc["entries"]]

The target (model, cluster, GPU) and the recipe fields are those of the first node count that projects; ``tokens``
is the training size the hours are for. One entry per node count, in the order given: ``status`` ``projected``
with the projection's figures under the ``projection`` document's names, or ``refused`` with the ``reason`` and
nulls.
"""

from __future__ import annotations

from typing import Any

from primus_ext.results import document, gib
from primus_ext.results.projection import recipe_fields


def sweep_entry(row: Any) -> dict[str, Any]:
    """One node count (``primus_ext.sweep.SweepRow``) in the schema's names."""
    p = row.projection
    memory = None if p is None else p.memory
    verdict = None
    if memory is not None:
        from primus_ext.model.memory import margin_verdict

        verdict = margin_verdict(memory.peak_bytes, memory.capacity_bytes)
    return {
        "nodes": row.nodes, "world_size": row.gpus, "status": "projected" if p is not None else "refused",
        "reason": row.reason,
        "step_time_s": None if p is None else p.step_time_s,
        "tokens_per_s_per_gpu": None if p is None else p.tokens_per_s_per_gpu,
        "tflops_per_gpu": None if p is None else p.model_tflops_per_gpu,
        "mfu": None if p is None else p.mfu,
        "peak_memory_gib": None if memory is None else gib(memory.peak_bytes),
        "capacity_gib": None if memory is None else gib(memory.capacity_bytes),
        "verdict": verdict,
        "gpu_hours": row.gpu_hours, "wall_hours": row.wall_hours,
    }


def sweep_document(result: Any) -> dict[str, Any]:
    """The ``sweep`` document of ``result`` (``primus_ext.sweep.Sweep``; at least one row projects)."""
    first = result.first
    assert first is not None, "a sweep with no projected row is an error (exit 2), not a document"
    system = first.projection.system
    return document("sweep", model=first.projection.model.name, cluster=system.name, gpu=system.gpu.name,
                    gpus_per_node=int(system.gpu.gpus_per_node), tokens=result.tokens,
                    entries=[sweep_entry(r) for r in result.rows], **recipe_fields(first.recipe))
