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
