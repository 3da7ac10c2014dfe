"""The GPUs this machine shows: one of the ways a projection's target GPU is stated (``recipe.target``).

    from primus_ext.hardware.visible import visible_gpus
    visible_gpus()        # ("NVIDIA H100 80GB HBM3",) x 8 on an H100 node, () on a CPU-only machine

Asked only when nothing else names the target (``--cluster``, the recipe's ``# primus-ext:`` comment,
``$PRIMUS_EXT_CLUSTER``, a Primus recipe's ``configs/<GPU>/`` folder). torch is imported only where a GPU
driver's device node exists (``/dev/nvidiactl`` for CUDA, ``/dev/kfd`` for ROCm): a CPU-only machine answers
at once.
"""

from __future__ import annotations

import os
from functools import cache

DRIVER_NODES = ("/dev/nvidiactl", "/dev/kfd")
"""Device nodes of the NVIDIA kernel driver and of ROCm's KFD: without either no GPU is visible to torch."""


@cache
def visible_gpus() -> tuple[str, ...]:
    """The device name of every GPU torch sees here (``torch.cuda.get_device_name``), ``()`` when none."""
    if not any(os.path.exists(node) for node in DRIVER_NODES):
        return ()
    try:
        import torch

        if not torch.cuda.is_available():
            return ()
        return tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    except (ImportError, RuntimeError, AssertionError):  # no torch, a broken driver or a CPU build: none stated
        return ()
