"""Argument types shared by the subcommands (this module's leading ``_`` keeps it out of the subcommand list); they
live in ``primus_ext.argtypes``, below the launcher hooks that parse the same flags."""

import argparse

from primus_ext.argtypes import finite_float, nonnegative_float, positive_int


def add_calibration_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--uncalibrated`` and ``--cluster-label``: which stored calibration records (``primus_ext.session``) apply,
    the same flags for every command that projects (``project``, ``compare``, ``tune``)."""
    parser.add_argument("--uncalibrated", action="store_true",
                        help="ignore calibration records from real runs (primus-ext calibrate) in the store")
    parser.add_argument("--cluster-label", metavar="NAME",
                        help="which cluster record of the target's profile applies (calibrate --scope cluster; default "
                             "$PRIMUS_EXT_CLUSTER_LABEL, else the unlabelled one)")


__all__ = ["add_calibration_arguments", "finite_float", "nonnegative_float", "positive_int"]
