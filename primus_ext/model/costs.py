"""The cost table's entry: what one layer kind costs one rank for one micro-batch.

Producers: the timing store (measured, ``primus_ext.measure``) and the analytic roofline
(``primus_ext.model.roofline``). Consumers: the projection and the memory model. ``origin`` (a ``CostOrigin``)
says which produced a number and how it ran; its ``label`` is the ``source`` string the projection's output
carries (``measured:cpu@scale=0.125;sp-unsplit``), and readers use its fields, not the string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from primus_ext.model.rank_shape import RankShape

SP_UNSPLIT_TAG = ";sp-unsplit"
"""Label tag of ``CostOrigin.sequence_unsplit``: a sequence-parallel shape measured in a one-rank world
(``measure/build.py``: norms and residuals on the whole sequence): its saved bytes compare with the formula without
the SP split (``memory.estimate_memory(measured_sequence_split=False)``)."""

MEASURED_AS_TAG = ";as-"
"""Label tag ``;as-<precision>`` of ``CostOrigin.measured_as``: the entry ran in another precision than its shape's
(an FP8 shape measured in bf16 on a GPU without transformer-engine). The projection carries it to the shape's
precision by the roofline's ratio (``model.carry.carry_cost``) and says so in the label."""
STAND_IN_SPEC = "local+torch"
"""A store entry's ``spec`` when megatron's local spec ran on a GPU with PyTorch's fused attention and grouped
GEMM standing in for transformer-engine's (``measure/build.py``)."""
STAND_IN_TAG = ";stand-ins"
"""Label tag of ``CostOrigin.stand_ins``: a GPU measurement of megatron's local spec with PyTorch stand-ins
(transformer-engine absent: ``measure/build.py``): its saved bytes are neither the TE spec's nor the CPU local
spec's (fused SwiGLU and flash attention, unfused norms), so the memory model keeps its TE formula."""

_HEAD = re.compile(r"(?P<producer>[a-z-]+)(?::(?P<device>[^@;+]*))?(?:@scale=(?P<scale>[0-9.eE+-]+))?")
_AS = re.compile(re.escape(MEASURED_AS_TAG) + r"([a-z0-9]+)")


@dataclass(frozen=True, kw_only=True)
class CostOrigin:
    """Where a ``LayerCost`` came from and how it ran: what the projection and the memory model need to know.

    ``label`` writes it as one string (the store's ``source`` column, the projection's ``sources``);
    ``parse`` reads such a string back, once, where one is loaded (the timing store)."""

    producer: str = "analytic"
    """``analytic`` (roofline), ``measured`` (timed here) or ``store`` (an imported entry)."""
    device: str = ""
    """The device it ran on (``cpu``, ``NVIDIA H100 80GB HBM3``); empty for analytic costs."""
    scale: float = 1.0
    """Fraction of the shape's widths it ran at (< 1: a reduced-scale run standing in for the full shape)."""
    sequence_unsplit: bool = False
    """A sequence-parallel shape run in a one-rank world (``SP_UNSPLIT_TAG``)."""
    measured_as: str | None = None
    """The precision it ran in when not its shape's (``MEASURED_AS_TAG``); ``None`` when the same."""
    stand_ins: bool = False
    """megatron's local spec with PyTorch stand-ins for transformer-engine (``STAND_IN_TAG``)."""
    note: str = ""
    """How it was carried since (`` carried to h100 by the analytic ratio``, ``+lora``): label text, read by no one."""

    @property
    def on_cpu(self) -> bool:
        """Measured on a CPU (megatron-core's local spec there, not TE's)."""
        return "cpu" in self.device.lower()

    @property
    def label(self) -> str:
        head = self.producer + (f":{self.device}" if self.device else "")
        head += f"@scale={self.scale:g}" if self.scale < 1.0 else ""
        tags = (SP_UNSPLIT_TAG if self.sequence_unsplit else "") + (
            f"{MEASURED_AS_TAG}{self.measured_as}" if self.measured_as else "") + (
            STAND_IN_TAG if self.stand_ins else "")
        return head + tags + self.note

    @classmethod
    def parse(cls, label: str) -> CostOrigin:
        """The origin a ``label`` writes (``parse(o.label) == o`` for every origin without a note)."""
        head = _HEAD.match(label)
        if head is None:
            return cls(producer="", note=label)
        rest, flags = label[head.end():], {"sequence_unsplit": False, "measured_as": None, "stand_ins": False}
        while True:
            if rest.startswith(SP_UNSPLIT_TAG):
                flags["sequence_unsplit"], rest = True, rest[len(SP_UNSPLIT_TAG):]
            elif rest.startswith(STAND_IN_TAG):
                flags["stand_ins"], rest = True, rest[len(STAND_IN_TAG):]
            elif (found := _AS.match(rest)) is not None:
                flags["measured_as"], rest = found.group(1), rest[found.end():]
            else:
                break
        scale = head.group("scale")
        return cls(producer=head.group("producer"), device=head.group("device") or "",
                   scale=float(scale) if scale else 1.0, note=rest, **flags)


ANALYTIC = CostOrigin()
"""The roofline's origin (``analytic``)."""


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
    origin: CostOrigin = field(default=ANALYTIC)
    """Who produced it and how it ran (``CostOrigin``)."""

    @property
    def source(self) -> str:
        """``origin`` as one string: ``measured:<device>[@scale=f][;tags]``, ``store:<device>``, or ``analytic``."""
        return self.origin.label


class CostProvider(Protocol):
    """Anything that can price a per-rank shape: the timing store, the roofline, a fake in tests."""

    def cost(self, shape: RankShape) -> LayerCost | None:
        """The cost, or ``None`` when this provider has no entry for the shape."""
        ...

