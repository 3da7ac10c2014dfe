"""Test fixture: the shape of Primus's ``primus/cli/main.py`` (AMD-AGI/Primus fd1eeab).

Like the real entry (``python primus/cli/main.py train pretrain --config EXP.yaml [--key value ...]``):
puts the checkout on ``sys.path``, registers every module of ``primus.cli.subcommands`` through its
``register_subcommand(subparsers)``, parses with ``parse_known_args`` and hands the unknown arguments
to the command as its overrides: ``args.func(args, unknown_args)``.
"""

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path

SUBCOMMANDS = "primus.cli.subcommands"


def main() -> None:
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    parser = argparse.ArgumentParser(prog="primus")
    subparsers = parser.add_subparsers(dest="command", required=True)
    package = importlib.import_module(SUBCOMMANDS)
    for module in sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_")):
        importlib.import_module(f"{SUBCOMMANDS}.{module}").register_subcommand(subparsers)
    args, unknown_args = parser.parse_known_args()
    args.func(args, unknown_args)


if __name__ == "__main__":
    main()
