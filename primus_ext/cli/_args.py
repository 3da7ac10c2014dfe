"""Argument types shared by the subcommands (this module's leading ``_`` keeps it out of the subcommand list); they
live in ``primus_ext.argtypes``, below the launcher hooks that parse the same flags."""

from primus_ext.argtypes import finite_float, nonnegative_float, positive_int

__all__ = ["finite_float", "nonnegative_float", "positive_int"]
