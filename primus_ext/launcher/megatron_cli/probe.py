"""Run inside a Megatron-LM source tree: dump its argument parser, and parse command lines with it (stdlib only).

    PYTHONPATH=TREE python probe.py TREE < request.json > reply.json

``TREE`` holds a release's ``megatron/`` folder (``git archive TAG megatron``). The request is
``{"argvs": [[flag, ...], ...]}``; the reply is ``{"options": [...], "parsed": [...]}``: every action of the parser
``megatron.training.arguments.parse_args`` builds (option strings, dest, kind, nargs, choices, default) and, per
argv, ``{"error": null}`` or argparse's error message. ``megatron.training``'s ``__init__`` (it imports the training
loop, and through it triton) is replaced by a bare package holding ``global_vars``'s getters, which is all that
``arguments.py`` and ``training/utils.py`` import from it. This file is not imported by primus-ext.
"""

import argparse
import contextlib
import enum
import importlib
import io
import json
import os
import sys
import types


class _Built(Exception):
    def __init__(self, parser):
        super().__init__("parser built")
        self.parser = parser


def _import_arguments(tree):
    import megatron.core  # the tree's, not an installed wheel's: checked below

    where = os.path.realpath(megatron.core.__file__)
    if not where.startswith(os.path.realpath(tree) + os.sep):
        raise SystemExit(f"megatron.core imported from {where}, not from {tree}")
    package = types.ModuleType("megatron.training")
    package.__path__ = [os.path.join(tree, "megatron", "training")]
    sys.modules["megatron.training"] = package
    global_vars = importlib.import_module("megatron.training.global_vars")
    for name in dir(global_vars):
        if name.startswith("get_"):
            setattr(package, name, getattr(global_vars, name))
    return importlib.import_module("megatron.training.arguments")


def _jsonable(value):
    if isinstance(value, enum.Enum):
        return value.name
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple) and all(v is None or isinstance(v, bool | int | float | str) for v in value):
        return list(value)
    return {"unrepresentable": type(value).__name__}


def _kind(action):
    if isinstance(action, argparse._StoreTrueAction):
        return "store_true"
    if isinstance(action, argparse._StoreFalseAction):
        return "store_false"
    if isinstance(action, argparse._StoreConstAction):
        return "store_const"
    if isinstance(action, argparse._StoreAction):
        return "store"
    return type(action).__name__


def _options(parser):
    out = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        out.append({"flags": list(action.option_strings), "dest": action.dest, "kind": _kind(action),
                    "nargs": action.nargs, "const": _jsonable(action.const),
                    "choices": None if action.choices is None else [_jsonable(c) for c in action.choices],
                    "default": _jsonable(action.default)})
    return out


def main():
    tree = sys.argv[1]
    request = json.load(sys.stdin)
    arguments = _import_arguments(tree)
    originals = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args

    def capture(self, *args, **kwargs):
        raise _Built(self)

    argparse.ArgumentParser.parse_args = capture
    argparse.ArgumentParser.parse_known_args = capture
    sys.argv = ["pretrain_gpt.py"]
    try:
        arguments.parse_args(ignore_unknown_args=False)
        raise SystemExit("parse_args returned without building a parser")
    except _Built as built:
        options = _options(built.parser)
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = originals
    parsed = []
    for argv in request.get("argvs", []):
        sys.argv = ["pretrain_gpt.py", *argv]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                arguments.parse_args(ignore_unknown_args=False)
            parsed.append({"error": None})
        except SystemExit:
            lines = [line for line in err.getvalue().splitlines() if "error:" in line]
            parsed.append({"error": lines[-1] if lines else err.getvalue()[-2000:]})
    json.dump({"options": options, "parsed": parsed}, sys.stdout)


if __name__ == "__main__":
    main()
