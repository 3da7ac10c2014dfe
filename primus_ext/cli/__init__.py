"""The ``primus-ext`` console script: a thin entry point, one module per subcommand.

Every module in this package whose name does not start with ``_`` is a subcommand: it defines
``register(subparsers)`` which adds its parser and sets ``func`` (``args -> int`` exit code).
Subcommand modules import heavy libraries (torch, megatron) inside their ``func`` only, so that
``primus-ext --help`` stays fast.

Domain errors (``PrimusExtError``) and what the operating system refuses (``OSError``: the path and the
reason) are printed without a traceback and exit with code 2; SIGTERM / SIGHUP end the command as an
exception would, so its temporary files are removed. A reader of
stdout that leaves early (``primus-ext validate ... | head``) silences the rest of the output; the
command still finishes and writes its files. A stream that refuses a write (``> /dev/full``, ``>&-``) is silenced
too, and the command exits with ``_streams.STREAM_FAILED`` (74) after one line saying so (``_streams``).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from primus_ext import __version__
from primus_ext.cli._streams import Guarded, stream_exit
from primus_ext.errors import PrimusExtError, cut, forget_env_texts
from primus_ext.files import forget_inputs, install_signal_exit


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
    args, extra = parser.parse_known_args(argv)
    # `key=value` overrides may also follow the options (argparse alone stops collecting them there)
    trailing = "overrides" if isinstance(getattr(args, "overrides", None), list) else "inputs"  # calibrate's
    if extra and isinstance(getattr(args, trailing, None), list) and all(
            "=" in x and not x.startswith("-") for x in extra):
        setattr(args, trailing, [*getattr(args, trailing), *extra])
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    for stream in (sys.stdout, sys.stderr):  # a lone surrogate in a recipe is shown escaped, not a traceback
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    install_signal_exit()
    forget_inputs()  # the inputs no output may replace are this command's (main may run many in one process)
    forget_env_texts()  # likewise the texts taken from the environment (shown as their templates: errors.redact)
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err = Guarded(stdout, "standard output"), Guarded(stderr, "standard error")
    try:
        code = _run(args)
        out.flush()  # what a block-buffered stream still holds, while a failure is still caught
        err.flush()
        return stream_exit(code, out, err)
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def _run(args: argparse.Namespace) -> int:
    """The subcommand's exit code; a domain error, a file the OS refuses, Ctrl-C said in one line (no traceback)."""
    try:
        return int(args.func(args) or 0)
    except PrimusExtError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except UnicodeDecodeError as err:  # a file that is not UTF-8 text (its reader names it where it can)
        print(f"error: a file given is not UTF-8 text ({err.reason} at byte {err.start}); give a YAML / JSON / "
              "CSV text file", file=sys.stderr)
        return 2
    except OSError as err:  # the file system refused: name the path and the reason, exit 2, no traceback
        where = " -> ".join(cut(f) for f in (err.filename, err.filename2) if f is not None)
        print(f"error: {where + ': ' if where else ''}{err.strerror or err}; check the path, its folder's "
              "permissions and free space", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
