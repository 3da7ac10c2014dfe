"""megatron-core's notes that every spawned rank would repeat, and how to keep them out of the ranks' stderr.

    with quiet_ranks():                 # ranks started inside inherit the filters
        mp.start_processes(...)
    for text in MEGATRON_NOTES:         # this process: before importing megatron-core
        warnings.filterwarnings("ignore", message=f".*{text}.*", category=UserWarning)

Torch-free (the trainer's planning imports it). A spawned rank imports megatron-core while it unpickles its
task, before any code of ours runs, so the filters reach it through ``PYTHONWARNINGS``, whose message field
matches the start of a warning's text.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

MEGATRON_NOTES = ("Transformer Engine and Apex are not installed", "Apex is not installed",
                  "full scope is deprecated")
"""megatron-core's import-time UserWarnings without TE/Apex (the bench table's notes say what matters)."""
CPU_NOTES = ("When using async grad allreduce it is recommended to set the environment variable "
             "CUDA_DEVICE_MAX_CONNECTIONS",)
"""GPU-only advice megatron-core repeats on every rank of a CPU run (async grad all-reduce on CUDA streams)."""


@contextmanager
def quiet_ranks(notes: tuple[str, ...] = MEGATRON_NOTES + CPU_NOTES) -> Iterator[None]:
    """``PYTHONWARNINGS`` ignoring ``notes`` for the processes started inside; restored afterwards."""
    before = os.environ.get("PYTHONWARNINGS")
    filters = [f"ignore:{text}:UserWarning" for text in notes]
    os.environ["PYTHONWARNINGS"] = ",".join([before, *filters] if before else filters)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = before
