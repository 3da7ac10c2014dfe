"""Megatron-format training logs of a synthetic cluster, for the calibration tests.

    from runlogs import TINY, TARGET, kernel_step, write_log
    step = kernel_step(TINY_PATH, 1.18)                  # what a cluster 1.18x slower in its kernels measures
    write_log(tmp_path / "run.log", [step] * 20, dump={"fp8": "hybrid"}, device="NVIDIA H100 80GB HBM3")
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from tiny import tiny_recipe

from primus_ext.calibration.apply import parts_of
from primus_ext.launcher.verify_top.local import megatron_log_lines
from primus_ext.projection import project
from primus_ext.recipe import load_recipe

TINY = tiny_recipe(micro_batch_size=1, global_batch_size=64, tensor_model_parallel_size=1)
"""Eight DP ranks of the tiny model on one H100 node (``TARGET``), eight micro-batches each."""
TARGET = ("--cluster", "h100", "--nodes", "1")


def kernel_step(recipe: str | Path, k: float, overrides: Sequence[str] = ()) -> float:
    """The step a cluster whose kernels run ``k`` x the projected time measures (links as projected)."""
    loaded = load_recipe(recipe, list(overrides), cluster="h100", nodes=1)
    parts = parts_of(project(loaded.model, loaded.execution, loaded.system, None).breakdown)
    return k * parts.kernels_s + parts.links_s


def steady(step: float, n: int, *, jitter: float = 0.005) -> list[float]:
    """Two warm-up iterations (3x, 2x) and ``n`` steady ones alternating ``step`` x (1 +- jitter)."""
    return [3 * step, 2 * step] + [step * (1 + (jitter if i % 2 else -jitter)) for i in range(n)]


def write_log(path: Path, steps: Sequence[float], *, global_batch_size: int = 64,
              dump: Mapping[str, object] | None = None, device: str | None = None, nan_share: float = 0.0) -> Path:
    """A Megatron log: an nvidia-smi-like line naming ``device``, the argument dump ``dump``, one iteration line per
    step (the first ``nan_share`` of every four lines print ``nan`` for their time)."""
    lines = []
    if device:
        lines.append(f"|   0  {device}          On  |   00000000:18:00.0 Off |                    0 |")
    if dump:
        lines.append("------------------------ arguments ------------------------")
        lines += [f"  {k} {'.' * max(3, 48 - len(k))} {v}" for k, v in dump.items()]
        lines.append("-------------------- end of arguments ---------------------")
    iterations = megatron_log_lines(list(steps), [], global_batch_size=global_batch_size, end=datetime(2026, 1, 1))
    bad = round(4 * nan_share)
    for i, line in enumerate(iterations):
        lines.append(re.sub(r"\(ms\): [0-9.]+", "(ms): nan", line) if i % 4 < bad else line)
    path.write_text("\n".join(lines) + "\n")
    return path
