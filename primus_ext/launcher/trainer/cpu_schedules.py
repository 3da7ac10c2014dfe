"""A seventh CPU workaround, scoped to megatron's pipeline schedules (training only).

megatron-core 0.16.1's three schedules (``forward_backward_no_pipelining``, 1F1B, interleaved)
allocate their token counter with ``torch.zeros([], dtype=torch.int, device="cuda")``: a literal
device string, which the ``torch.cuda.current_device`` shim (``primus_ext.measure.shims``) does not
reach. ``patch_schedules_for_cpu()`` gives the schedules module a view of ``torch`` whose ``zeros``
maps ``device="cuda"`` to the CPU; every other attribute is torch's own. Applied only in CPU
trainer processes (never on a GPU run).

The timing-measurement shims live in ``primus_ext.measure.shims``; this one is only needed to
*train*, which is why it lives beside the built-in trainer.
"""

from __future__ import annotations

import types
from typing import Any

import torch


class _CpuZerosTorch(types.ModuleType):
    """``torch`` as seen by the schedules module, with ``zeros(device="cuda")`` on the CPU."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def zeros(*args: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:
        if device is not None and torch.device(device).type == "cuda":
            device = "cpu"
        return torch.zeros(*args, device=device, **kwargs)


def patch_schedules_for_cpu() -> None:
    """Idempotent; call after the CPU shims, before ``get_forward_backward_func``."""
    from megatron.core.pipeline_parallel import schedules

    if not isinstance(schedules.torch, _CpuZerosTorch):
        schedules.torch = _CpuZerosTorch("torch")
