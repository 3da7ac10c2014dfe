"""Per-GPU memory: what a rank holds (parameters, gradients, optimizer state, activations, buffers), per stage.

Usage::

    from primus_ext.model.memory import estimate_memory, fits
    mem = estimate_memory(model, execution, system)         # Memory: per stage + peak + fits
    fits(model, execution, system, margin=0.05)              # bool, no I/O, no torch

The rooms behind it (other packages import from here, not from them):

* ``estimate``: ``estimate_memory`` / ``fits`` / ``peak_bytes``, the ``Memory`` result, HBM capacity and margin;
* ``gate``: the launch gate's exit code of a verdict (``gate_exit``: 0 fits, 4 within the model's error, 3 out of
  memory; ``strict``) and the sentence said with it (``gate_note``);
* ``rank``: one pipeline rank's bytes (``rank_memory``: the one arithmetic behind ``estimate_memory`` and
  ``fits``), ``StageMemory``, constants for context, NCCL, workspaces, fragmentation;
* ``stage``: what each rank holds whatever the sharding and schedule (``rank_profile``), memoised;
* ``activations``: the formulas of the bytes one layer saves for backward per micro-batch (``TE`` / ``LOCAL``
  implementations); ``saved``: those bytes asked of the layer's kind, recompute applied;
* ``plan``: per pipeline chunk, its dense / MoE layers and which of them recompute or offload;
* ``schedule``: micro-batches in flight per rank and chunk (megatron-core's warm-up rule);
* ``state``: per-rank parameters, gradients, optimizer state and the data-parallel sharding transients;
* ``optimizer_state``: Adam's bytes per parameter (the state kept, the step's HBM traffic), its sharding.
"""

from primus_ext.model.memory.activations import LOCAL, TE
from primus_ext.model.memory.estimate import (
    DEFAULT_MARGIN,
    MEMORY_ERROR,
    Memory,
    capacity_bytes,
    estimate_memory,
    fits,
    margin_verdict,
    peak_bytes,
)
from primus_ext.model.memory.gate import (
    EXIT_FITS,
    EXIT_ILLEGAL,
    EXIT_OUT_OF_MEMORY,
    EXIT_WITHIN_ERROR,
    gate_exit,
    gate_note,
    gate_verdict,
)
from primus_ext.model.memory.optimizer_state import adam_state_bytes, adam_step_bytes, dp_sharded
from primus_ext.model.memory.rank import StageMemory
from primus_ext.model.memory.saved import activation_bytes_per_layer
from primus_ext.model.memory.state import reduce_bytes

__all__ = ["DEFAULT_MARGIN", "EXIT_FITS", "EXIT_ILLEGAL", "EXIT_OUT_OF_MEMORY", "EXIT_WITHIN_ERROR", "LOCAL",
           "MEMORY_ERROR", "TE", "Memory", "StageMemory", "activation_bytes_per_layer", "adam_state_bytes",
           "adam_step_bytes", "capacity_bytes", "dp_sharded", "estimate_memory", "fits", "gate_exit", "gate_note",
           "gate_verdict", "margin_verdict", "peak_bytes", "reduce_bytes"]
