"""Which transformer layers Megatron recomputes in full: the one rule the step time and the memory both read.

    from primus_ext.model.recompute import block_layers
    n = block_layers(execution)   # None: not the block method; else the first n layers of every chunk (0: none)

``projection.table.chunk_counts`` (a layer's recompute time) and ``model.memory.plan.recompute_plan`` (a layer's
saved bytes and the recompute working set) both ask here, so a configuration's time and memory agree on which
layers recompute.

megatron-core ``TransformerBlock._checkpointed_forward`` (transformer/transformer_block.py, core_v0.16.1 l. 544-563):
under ``recompute_method: block`` it checkpoints layer ``i`` of a ``TransformerBlock`` (one per pipeline chunk)
only while ``i < recompute_num_layers`` (plus the layers fp8 / fp4 skip for inputs without a gradient), and runs
the rest plainly, so ``recompute_num_layers: 0`` recomputes no layer at all (Primus's Mixtral-8x22B recipes for
MI300X / MI325X state it). Under ``uniform`` it checkpoints groups of ``recompute_num_layers`` layers (every layer
recomputes; ``recipe.checks`` refuses 0, which megatron would loop on).
"""

from __future__ import annotations

from primus_ext.specs import ExecutionSpec

EVERY_LAYER = 1 << 30
"""``block_layers``'s answer for a block recompute without ``recompute_num_layers`` (megatron-core's
TransformerConfig refuses it, ``recipe.checks`` too): every layer of the chunk, as any chunk has fewer."""


def block_layers(e: ExecutionSpec) -> int | None:
    """The leading layers of each pipeline chunk Megatron checkpoints under full recompute with
    ``recompute_method: block`` (0 = none); ``None`` for any other recompute (none, selective, uniform, or Primus's
    ``recompute_layer_ids``, which name the layers themselves)."""
    if e.recompute_granularity != "full" or e.recompute_method != "block" or e.recompute_layer_ids:
        return None
    return EVERY_LAYER if e.recompute_num_layers is None else e.recompute_num_layers
