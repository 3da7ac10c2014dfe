"""Per pipeline chunk, what it holds: dense / MoE layers, which of them recompute in full or offload.

``plan(model, pp, vpp, layout, first, last, acc_e, acc_l, recompute_plan(e), offloaded_layers(e))`` is memoised
(the split reads only the pipeline fields); ``memory.stage`` turns the compositions into bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from primus_ext.model.kinds.registry import pattern_kinds
from primus_ext.model.recompute import block_layers
from primus_ext.model.stages import StagePlan, pipeline_plan
from primus_ext.specs import ExecutionSpec, ModelSpec


@dataclass(frozen=True, kw_only=True)
class ChunkComposition:
    dense: int
    moe: int
    embedding: bool
    output: bool
    mtp: int
    block_dense: int = 0
    """Of the layers this chunk recomputes in full (the block method's first ``recompute_num_layers``, or Primus's
    ``recompute_layer_ids``): how many are dense."""
    block_moe: int = 0
    offload_dense: int = 0
    """Of the first ``cpu_offloading_num_layers`` layers of the model (activation CPU offloading): how
    many this chunk holds, dense and MoE."""
    offload_moe: int = 0
    hybrid: tuple[int, ...] = ()
    """A hybrid model's layers in this chunk by kind (in ``kinds.registry.pattern_kinds`` order); none
    recomputes or offloads (megatron-core's ``MambaStack``)."""


@lru_cache(maxsize=1024)
def plan(model: ModelSpec, pp: int, vpp: int | None, layout: str | None, first: int | None,
          last: int | None, acc_e: bool, acc_l: bool, recompute_layers: int | tuple[int, ...],
          offload_layers: int = 0, schedule: str = "1f1b") -> tuple[tuple[StagePlan, ...], tuple]:
    """The split and, per chunk, its composition; ``recompute_layers``: the first N layers of each chunk
    (block method) or the global ids of the recomputed layers (Primus's ``recompute_layer_ids``)."""
    execution = ExecutionSpec(pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp,
                              pipeline_model_parallel_layout=layout, decoder_first_pipeline_num_layers=first,
                              decoder_last_pipeline_num_layers=last, account_for_embedding_in_pipeline_split=acc_e,
                              account_for_loss_in_pipeline_split=acc_l, pipeline_schedule=schedule)
    plan = pipeline_plan(model, execution)
    pattern = model.moe_layer_pattern
    hybrid_symbols = pattern_kinds(model.hybrid_layer_pattern)
    comps = []
    for stage in plan:
        row = []
        for chunk in stage.chunks:
            if model.hybrid_layer_pattern:
                # a hybrid model's MTP layers (mtp_layer_pattern at each depth) with the chunk's decoder layers
                symbols = [model.hybrid_layer_pattern[i] for i in chunk.layers] + [
                    *model.mtp_layer_pattern * chunk.mtp_layers]
                row.append(ChunkComposition(dense=0, moe=0, embedding=chunk.embedding, output=chunk.output,
                                            mtp=chunk.mtp_layers, hybrid=tuple(map(symbols.count, hybrid_symbols))))
                continue
            moe = [i < len(pattern) and pattern[i] for i in chunk.layers]
            if isinstance(recompute_layers, tuple):
                head = [m for i, m in zip(chunk.layers, moe, strict=True) if i in recompute_layers]
            else:
                head = moe[:recompute_layers]
            offloaded = [m for i, m in zip(chunk.layers, moe, strict=True) if i < offload_layers]
            row.append(ChunkComposition(dense=len(moe) - sum(moe), moe=sum(moe), embedding=chunk.embedding,
                                        output=chunk.output, mtp=chunk.mtp_layers,
                                        block_dense=len(head) - sum(head), block_moe=sum(head),
                                        offload_dense=len(offloaded) - sum(offloaded), offload_moe=sum(offloaded)))
        comps.append(tuple(row))
    return plan, tuple(comps)


def recompute_plan(e: ExecutionSpec) -> int | tuple[int, ...]:
    """Which layers recompute, as ``_plan`` takes it: Primus's ``recompute_layer_ids``, else the block method's
    first ``recompute_num_layers`` layers per chunk, else 0 (uniform: every layer, handled per group)."""
    if e.recompute_granularity == "full" and e.recompute_layer_ids:
        return e.recompute_layer_ids
    return block_layers(e) or 0  # model.recompute: block 0 recomputes none, as for the step time


def offloaded_layers(e: ExecutionSpec) -> int:
    """Transformer layers whose saved activations are offloaded to the host (0 when off)."""
    return e.cpu_offloading_num_layers if e.cpu_offloading and e.cpu_offloading_activations else 0
