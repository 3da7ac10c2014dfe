"""Argument types shared by the subcommands (``cli``) and the launcher hooks (``launcher``): argparse ``type=``
functions that refuse a bad value with a usage error (exit code 2)."""

from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    """``type=`` for a count: a whole number >= 1, else argparse's usage error (exit code 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}")
    return value


def int_in(low: int, high: int):
    """``type=`` for a whole number in ``low..high``, else argparse's usage error naming the bound (exit code 2),
    before any work: ``--budget 10000000`` ran unbounded, ``--nodes 100000`` built a space for minutes."""
    def parse(text: str) -> int:
        digits = text.strip().lstrip("+-")
        value = int(text) if digits.isascii() and digits.isdigit() and len(digits) <= 18 else None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low:,} to {high:,}, not {text[:40]!r}")
        return value

    parse.__name__ = f"whole number in {low}..{high}"  # argparse's message for a type error names the type
    return parse


MAX_BUDGET = 10_000
"""Projections one ``tune`` may spend: TPE proposed 300 in 4.4 CPU-s (llama3.1 70B on h100, 2 cores, this repo's
measurement) and its cost per proposal grows with the trials; past this the search is minutes to hours."""
MAX_SEED = 2**32 - 1
"""numpy's and optuna's seeds are 32-bit unsigned (``numpy.random.seed``: 0 <= seed < 2**32)."""
MAX_ROWS_SHOWN = 10_000
"""Rows of a ranking or worst-rows table (``--top``, ``--worst``)."""
MAX_NODE_FLAG = 100_000
"""``--nodes`` (``recipe.node_count.MAX_NODES``, kept equal by a test: this module imports nothing heavy)."""
MAX_RANKS = 4_096
"""Local ranks of a short run (``--nproc``, ``--verify-nproc``): a node has at most 8-72 GPUs."""
MAX_ITERS = 1_000_000
"""Iterations of a short run / timed repetitions of a layer."""


def finite_float(text: str) -> float:
    """``type=`` for a number: finite (argparse's ``float`` takes 'nan' and 'inf'), else a usage error (exit 2)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    """``type=`` for a margin, a time-out or a scale: a finite number >= 0."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {text!r}")
    return value


def positive_float(text: str) -> float:
    """``type=`` for a size (``--tokens 1e12``): a finite number > 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, not {text!r}")
    return value


def node_counts(text: str) -> int | tuple[int, ...]:
    """``type=`` for ``--nodes``: one count (``8``: an ``int``, as ``positive_int``), or a comma list of distinct counts
    (``1,2,4,8``: a tuple, in the order given) for a scaling sweep."""
    if "," not in text:
        return positive_int(text)
    counts = tuple(positive_int(part.strip()) for part in text.split(","))
    if len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(f"names a node count twice: {text!r}")
    return counts
