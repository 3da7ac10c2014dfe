"""The cost table's entry: what one layer kind costs one rank for one micro-batch.

Producers: the timing store (measured, ``primus_ext.measure``) and the analytic roofline
(``primus_ext.model.roofline``). Consumers: the projection and the memory model. ``source`` says
which produced a number, and the projection's output carries it through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from primus_ext.model.rank_shape import RankShape


@dataclass(frozen=True, kw_only=True)
class LayerCost:
    """Cost of one layer kind at one per-rank shape on one device, for one micro-batch."""

    fwd_ms: float
    bwd_ms: float
    """Whole backward (input-grad + weight-grad)."""
    wgrad_ms: float | None = None
    """Weight-grad part of ``bwd_ms`` where measurable (zero-bubble schedules split it off)."""
    recompute_ms: float = 0.0
    """Extra forward re-run in backward under the shape's recompute setting."""
    params: int = 0
    """Parameters held by this rank for this layer."""
    saved_bytes: int = 0
    """Activation bytes saved for backward (unique storages) per micro-batch."""
    peak_bytes: int | None = None
    """Peak device memory during fwd+bwd where measured (GPU only)."""
    fwd_spread: float = 0.0
    """Relative spread (p90-p10)/median of the forward timing; 0 for analytic costs."""
    bwd_spread: float = 0.0
    source: str = "analytic"
    """``measured:<device>[@scale]``, ``store:<device>``, or ``analytic`` (roofline fallback)."""


class CostProvider(Protocol):
    """Anything that can price a per-rank shape: the timing store, the roofline, a fake in tests."""

    def cost(self, shape: RankShape) -> LayerCost | None:
        """The cost, or ``None`` when this provider has no entry for the shape."""
        ...


SP_UNSPLIT_TAG = ";sp-unsplit"
"""Suffix of ``LayerCost.source`` for a sequence-parallel shape measured in a one-rank world (``measure/build.py``:
norms and residuals on the whole sequence): its saved bytes compare with the formula without the SP split
(``memory.estimate_memory(measured_sequence_split=False)``)."""

MEASURED_AS_TAG = ";as-"
"""Suffix ``;as-<precision>`` of ``LayerCost.source``: the entry ran in another precision than its shape's (an
FP8 shape measured in bf16 on a GPU without transformer-engine). The projection carries it to the shape's
precision by the roofline's ratio (``model.carry.carry_cost``) and says so in the source."""
STAND_IN_SPEC = "local+torch"
"""A store entry's ``spec`` when megatron's local spec ran on a GPU with PyTorch's fused attention and grouped
GEMM standing in for transformer-engine's (``measure/build.py``)."""
STAND_IN_TAG = ";stand-ins"
"""Suffix of ``LayerCost.source`` for a GPU measurement of megatron's local spec with PyTorch stand-ins
(transformer-engine absent: ``measure/build.py``): its saved bytes are neither the TE spec's nor the CPU local
spec's (fused SwiGLU and flash attention, unfused norms), so the memory model keeps its TE formula."""
