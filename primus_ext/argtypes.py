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
