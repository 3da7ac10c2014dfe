"""Arguments shared by the subcommands (this module's leading ``_`` keeps it out of the subcommand list): the cost and
calibration flags of every command that projects, and the argument types (in ``primus_ext.argtypes``, below the
launcher hooks that parse the same flags)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from primus_ext.argtypes import finite_float, nonnegative_float, positive_int

if TYPE_CHECKING:
    from primus_ext.session import Session


def add_cost_arguments(parser: argparse.ArgumentParser, *, measured: bool = False) -> None:
    """``--store``, ``--device``, ``--accept-scaled``, ``--compute`` (``measured`` too where ``measured``) and
    ``--analytic``: where layer costs come from, the same flags for ``project``, ``compare``, ``tune`` and
    ``calibrate`` (``session_of`` reads them)."""
    parser.add_argument("--store", metavar="FILE",
                        help="timing store with measured layer costs (SQLite, or its JSON-lines export; default: the "
                             "default store, when it exists)")
    parser.add_argument("--device", help="whose measurements to read from the store (default: the target GPU's)")
    parser.add_argument("--accept-scaled", action="store_true",
                        help="also use down-scaled (CPU-sized) store entries for their target shapes")
    first = "measure what the store lacks on this device first (measured), " if measured else ""
    parser.add_argument("--compute", choices=("measured", "store", "analytic")[0 if measured else 1:], default="store",
                        help=f"layer costs: {first}read the store with roofline fallback (store, default), or roofline "
                             "only (analytic)")
    parser.add_argument("--analytic", action="store_true", help="same as --compute analytic")


def add_calibration_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--uncalibrated`` and ``--cluster-label``: which stored calibration records (``primus_ext.session``) apply,
    the same flags for every command that projects (``project``, ``compare``, ``tune``)."""
    parser.add_argument("--uncalibrated", action="store_true",
                        help="ignore calibration records from real runs (primus-ext calibrate) in the store")
    parser.add_argument("--cluster-label", metavar="NAME",
                        help="which cluster record of the target's profile applies (calibrate --scope cluster; default "
                             "$PRIMUS_EXT_CLUSTER_LABEL, else the unlabelled one)")


def session_of(args: argparse.Namespace, *, calibrated: bool = True, scale: float | None = None) -> Session:
    """The command's one projection session from the flags of ``add_cost_arguments`` and ``--cluster-label``
    (``session.cost_choice``); ``calibrated``: apply stored records; ``scale``: ``--compute measured``'s scale."""
    from primus_ext.session import Session, cost_choice

    return Session(cost_choice(compute=args.compute, analytic=args.analytic, store=args.store, device=args.device,
                               accept_scaled=args.accept_scaled, scale=scale, uncalibrated=not calibrated,
                               cluster_label=args.cluster_label))


__all__ = ["add_calibration_arguments", "add_cost_arguments", "finite_float", "nonnegative_float", "positive_int",
           "session_of"]
