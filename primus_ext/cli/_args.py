"""Argument types shared by the subcommands (this module's leading ``_`` keeps it out of the subcommand list)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """``type=`` for a count: a whole number >= 1, else argparse's usage error (exit code 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}")
    return value
