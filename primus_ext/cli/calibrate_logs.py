"""The training logs ``calibrate`` reads and their comparison with the recipe's projection (model and cluster scope
share them: ``cli.calibrate``, ``cli.calibrate_cluster``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from primus_ext.calibration.compare import LogComparison


def split_inputs(items: list[str]) -> tuple[list[Path], list[str]]:
    """The logs (files, or every *.log of a folder) and the ``key=value`` overrides among ``calibrate``'s inputs."""
    logs, overrides = [], []
    for item in items:
        path = Path(item)
        if "=" in item and not path.exists():
            overrides.append(item)
        elif path.is_dir():
            found = sorted(path.glob("*.log"))
            if not found:
                from primus_ext.errors import PrimusExtError

                raise PrimusExtError(f"{item}: a folder without *.log files (give the training logs themselves)")
            logs.extend(found)
        else:
            logs.append(path)
    return logs, overrides


def run_identity(log: Any) -> str:
    """What makes two logs one run: their content (every iteration line read, with its step time and line number,
    and the memory reports), not their names: a log given three times, or a copy of it, is one run of evidence."""
    import hashlib

    return hashlib.sha256(repr((log.format, log.iterations, log.memory)).encode("utf-8")).hexdigest()


Loader = Callable[[list[str]], Any]
"""Loads the recipe a log ran, with extra ``key=value`` overrides (``--follow-log``)."""


def layer_costs(session: Any, system: Any) -> Any:
    """The command's layer costs for ``system``'s GPU (``session.costs``); the roofline when ``--store`` names a file
    the record will create (nothing to read yet)."""
    store = session.choice.store
    if store is not None and not Path(store).exists() and session.choice.mode == "store":
        return None
    return session.costs(system.gpu.name)


def compare_all(args: argparse.Namespace, session: Any, base: Any, jobs: list[tuple[Path, Loader]], *,
                 skip_unreadable: bool = False, environment: Any = None) -> list[LogComparison]:
    """Each log against the uncalibrated projection of the recipe its loader gives, over ``session``'s layer costs
    (on ``environment``'s cluster record when given). An unreadable log is an error (exit 2), or with
    ``skip_unreadable`` said and left out (a verify-top candidate whose run failed)."""
    from primus_ext.calibration.compare import compare_log, crossing, log_problems, mismatches
    from primus_ext.errors import PrimusExtError, Problem, RecipeError
    from primus_ext.logs import LogError, read_log

    read, problems, runs = [], [], {}
    for path, loader in jobs:
        try:
            log = read_log(path)
            first = runs.setdefault(run_identity(log), path)
            if first is not path:  # one run counts once, however many times (or names) it is given
                print(f"note: {path} is the same run as {first} (the same iterations): counted once",
                      file=sys.stderr)
                continue
            read.append((path, loader, log))
        except LogError as err:
            if skip_unreadable:
                print(f"skipped {path}: {err}", file=sys.stderr)
                continue
            problems.append(Problem(path=str(path), message=str(err), fix="give a training log of the run"))
    if problems:
        raise RecipeError(problems=problems, source="training logs", what="cannot read")
    comparisons = []
    costs = layer_costs(session, base.system)
    for path, loader, log in read:
        recipe = loader([])
        crossed = crossing(recipe, log)  # another GPU type or precision: refused whatever the flags
        if crossed:
            problems.extend(Problem(path=f"{path}: {p.path}", value=p.value, message=p.message, fix=p.fix)
                            for p in crossed)
            continue
        found, follow = mismatches(recipe, log)
        for flag in log.flags[:20]:
            print(f"warning: {path}: {flag}", file=sys.stderr)
        if len(log.flags) > 20:
            print(f"warning: {path}: {len(log.flags) - 20} more flagged lines", file=sys.stderr)
        weak = log_problems(log)
        if weak and not args.force:
            problems.extend(Problem(path=f"{path}: {p.path}", value=p.value, message=p.message, fix=p.fix)
                            for p in weak)
            continue
        if found and not args.follow_log:
            problems.extend(Problem(path=f"{path}: {p.path}", value=p.value, message=p.message, fix=p.fix)
                            for p in found)
            continue
        if found:
            recipe = loader(follow)
        if environment is not None:
            from dataclasses import replace

            from primus_ext.calibration.environment import apply_environment

            recipe = replace(recipe, system=apply_environment(recipe.system, environment.values))
        comparisons.append(compare_log(recipe, log, costs, path=str(path), followed=follow if found else ()))
        left = comparisons[-1].mismatches
        if left:
            problems.extend(Problem(path=f"{path}: {p.path}", value=p.value, message=p.message, fix=p.fix)
                            for p in left)
    if problems:
        raise RecipeError(problems=problems, source=f"{args.recipe} (against the logged runs)")
    if not comparisons:
        raise PrimusExtError("no log could be compared")
    return comparisons
