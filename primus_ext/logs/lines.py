"""One line of a training log -> what it states (pure functions; the reading loop is in ``read.py``).

Layouts read (sources: the upstream files named beside each pattern):
- Megatron-LM ``training_log`` (megatron/training/training.py, core_r0.12.0 ... core_v0.16.1 and main):
  `` [date] iteration {:8d}/{:8d} | consumed samples: ... | elapsed time per iteration (ms): {:.1f} |
  throughput per GPU (TFLOP/s/GPU): {:.1f} | learning rate | global batch size: {:5d} | ...``; fields are
  ``|``-separated ``name: value`` pairs and some are optional (throughput, skipped samples, energy), so they are
  read by name, never by position.
- Megatron's memory report (megatron/training/utils.py ``report_memory``; utils/common_utils.py on main):
  ``[Rank R] (after N iterations) memory (MB) | allocated: | max allocated: | reserved: | max reserved:``
  (MB = 2**20 bytes; unformatted floats up to core_v0.15, ``:.2f`` from core_v0.16).
- Primus (primus/backends/megatron/patches/training_log/): the same line with ``instant/average`` pairs
  (``elapsed time per iteration (ms): 664.0/664.0``), ``tokens per GPU (tokens/s/GPU)`` and hip/rocm memory
  usage fields; the first number (this iteration) is used.
- Megatron-Bridge: Megatron's line and memory report, plus ``Step Time : 4.65s GPU utilization:
  59892.5TFLOP/s/GPU`` (primus/backends/megatron_bridge/patches/training_log/ reads the same lines).
- NeMo 2 (Lightning progress logging): ``Training epoch E, iteration I/N | ... | global_batch_size: G |
  ... | train_step_timing in s: X``.
"""

from __future__ import annotations

import math
import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
MAX_DIGITS = 15
"""Digits of an integer read from a log (an iteration, a rank, a batch: 10**15 is past any run); a longer run of
digits is not such a number (Python refuses ``int()`` of over 4 300 digits with a ``ValueError``)."""
ITERATION = re.compile(r"\biteration\s+(\d{1,15})\s*/\s*(\d{1,15})\s*\|")
FIELD = re.compile(r"^\s*([A-Za-z][^:|]*?)\s*:\s*([^|]*?)\s*$")
DEVICE = re.compile(r"\b(?:NVIDIA|AMD Instinct)\s+(?:[A-Z]{1,3}\d{2,4}[A-Z]{0,2})(?:[ -]\w+){0,3}")
"""A GPU's device name as nvidia-smi, rocm-smi and ``torch.cuda.get_device_name`` print it (``NVIDIA H100 80GB HBM3``,
``AMD Instinct MI300X``)."""
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
MEMORY = re.compile(r"\[Rank (\d{1,15})\]\s*\((?:after (\d{1,15}) iterations)?[^)]*\)\s*memory \(MB\)(.*)$")
BRIDGE_STEP = re.compile(r"Step Time\s*:\s*([-+\d.eE]+)\s*s\b(?:.*?GPU utilization\s*:\s*([-+\d.eE]+)\s*"
                         r"TFLOP/s/GPU)?")
MFU = re.compile(r"\bMFU\b[^0-9|]*?([-+]?\d+(?:\.\d+)?)\s*%")
MAX_FIELDS = 256
"""Fields read of one line (Megatron's iteration line has ~15; Primus's ~20)."""
MAX_MFU_CHARS = 256
"""Characters of a field searched for MFU (its lazy gap made ``MFU MFU ...`` lines quadratic)."""
RANK_TAG = re.compile(r"\[rank-?(\d{1,15})(?:/\d+)?\]|\[default(\d{1,15})\]:|^\s*(\d{1,15}):\s")
"""Rank prefixes: Primus ``[rank-7/8]``, torchrun ``--tee`` ``[default0]:``, srun/mpirun ``--label`` ``0: ``."""
LOG_INTERVAL = re.compile(r"\blog_interval\b\s*(?:\.{2,}|:)\s*(\d{1,15})\b")
VERSIONS = (
    re.compile(r"backend=megatron\b.*?backend_version=([\w.+-]+)"),  # Primus patch_runner
    re.compile(r"\bmegatron[-_]core\s*(?:==|version[:=]?|v)?\s*(\d+\.\d+[\w.+-]*)", re.IGNORECASE),
)

STEP_MS = "elapsed time per iteration (ms)"
TFLOPS = "throughput per GPU (TFLOP/s/GPU)"
TOKENS = "tokens per GPU (tokens/s/GPU)"
BATCH = ("global batch size", "global_batch_size")
NEMO_STEP = "train_step_timing in s"


def clean(line: str) -> str:
    """Without ANSI colour codes and line terminators."""
    return (ANSI.sub("", line) if "\x1b" in line else line).rstrip("\r\n")


def first_number(text: str) -> float | None:
    """The first number of a field (Primus prints ``instant/average``: the instant one); ``None`` for none, or for
    one past a float's range (``1`` and 400 zeros reads as infinity)."""
    m = NUMBER.search(text)
    try:
        value = float(m.group()) if m else None
    except ValueError:
        return None
    return value if value is None or math.isfinite(value) else None


def small_int(text: str) -> int | None:
    """``text`` as a non-negative integer of at most ``MAX_DIGITS`` ASCII digits (an argument's value), else
    ``None``."""
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS else None


def fields(text: str) -> dict[str, str]:
    """``name: value`` pairs of a ``|``-separated line (the first occurrence of a name wins)."""
    out: dict[str, str] = {}
    for part in text.split("|", MAX_FIELDS)[:MAX_FIELDS]:  # FIELD's reading by str methods (a regex cost ~3 us each)
        name, colon, value = part.partition(":")
        name = name.strip()
        if colon and name and name[0].isascii() and name[0].isalpha() and name not in out:
            out[name] = value.strip()
    return out


def iteration_fields(line: str) -> tuple[int, int, dict[str, str]] | None:
    """(index, total, fields) of a Megatron/Primus/NeMo iteration line, ``None`` for any other line."""
    m = ITERATION.search(line) if "iteration" in line else None
    if not m:
        return None
    got = fields(line[m.end():])
    if STEP_MS not in got and NEMO_STEP not in got:
        return None
    return int(m.group(1)), int(m.group(2)), got


def memory_fields(line: str) -> tuple[int, int | None, dict[str, float | None]] | None:
    m = MEMORY.search(line) if "memory (MB)" in line else None
    if not m:
        return None
    got = fields(m.group(3))
    names = ("allocated", "max allocated", "reserved", "max reserved")
    return int(m.group(1)), int(m.group(2)) if m.group(2) else None, {
        n: first_number(got[n]) if n in got else None for n in names}


def rank_tag(line: str) -> int | None:
    """The rank a prefix names before the iteration field, ``None`` without one."""
    prefix = line[:line.find(" iteration ") if " iteration " in line else len(line)]
    if "[rank" not in prefix and "[default" not in prefix and not prefix.lstrip()[:1].isdigit():
        return None  # none of the three prefixes can match
    m = RANK_TAG.search(prefix)
    return next((int(g) for g in m.groups() if g is not None), None) if m else None


def version_of(line: str) -> str | None:
    if "megatron" not in line.lower():  # both patterns need the word
        return None
    for pattern in VERSIONS:
        m = pattern.search(line)
        if m:
            return f"megatron-core {m.group(1)}"
    return None
