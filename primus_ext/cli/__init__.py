"""The ``primus-ext`` console script: a thin entry point, one module per subcommand.

Every module in this package whose name does not start with ``_`` is a subcommand: it defines
``register(subparsers)`` which adds its parser and sets ``func`` (``args -> int`` exit code).
Subcommand modules import heavy libraries (torch, megatron) inside their ``func`` only, so that
``primus-ext --help`` stays fast.

Domain errors (``PrimusExtError``) are printed without a traceback and exit with code 2.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from primus_ext import __version__
from primus_ext.errors import PrimusExtError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="primus-ext",
        description="Hybrid (measured + analytic) projection and auto-tuning for Megatron-core training.",
    )
    parser.add_argument("--version", action="version", version=f"primus-ext {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    package = importlib.import_module(__name__)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except PrimusExtError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
