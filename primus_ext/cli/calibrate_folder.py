"""``primus-ext calibrate DIR``: calibrate from the runs of a ``tune --verify-top`` folder.

    primus-ext tune RECIPE --verify-top 3            # RECIPE-verify-top/: candidate-N.yaml, launch.sh, manifest.json
    (on the cluster) ./launch.sh primus              # each run tees candidate-N.log into the folder
    primus-ext calibrate RECIPE-verify-top           # one record fitted across every candidate that ran

The manifest names the recipe the search started from and, per candidate, its variant file and log. Each log is
compared with the projection of *the manifest's recipe* laid out as its candidate (the variant's execution: the
model keeps the user's preset and name, so the record applies to their projections of it); when that recipe is
no longer where the manifest says, the variants themselves are projected (a flat recipe's model is then named
``candidate-N``; the record still matches the model, which is fingerprinted without its name). Several
candidates of different step sizes separate the kernel factor from a fixed step overhead (the least-squares fit
of ``calibration.correction``). Logs of ``--verify-run local`` are runs of a shrunk model on this machine, not of
the recipe on its cluster: refused.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from primus_ext.errors import PrimusExtError, Problem, RecipeError


def _base_path(manifest: dict[str, Any], folder: Path) -> Path | None:
    """The manifest's recipe: as written (absolute, or from here), else beside the folder (its default place)."""
    written = manifest.get("recipe")
    if not written:
        return None
    for candidate in (Path(written), folder.parent / Path(written).name):
        if candidate.is_file():
            return candidate
    return None


def folder_jobs(args: argparse.Namespace, session: Any,
                folder: Path) -> tuple[Any, list[tuple[Path, Any]], list[str]]:
    """The base recipe, a (log, loader) pair per candidate with a log, and one line per candidate left out (each
    loaded by ``session``, the command's)."""
    from primus_ext.launcher.verify_top.variants import MANIFEST, read_manifest

    manifest = read_manifest(folder)
    if manifest.get("local"):
        local = manifest["local"]
        raise RecipeError(problems=[Problem(
            path=str(folder / MANIFEST), value="local",
            message=f"the logs are of --verify-run local: the model shrunk by {local.get('scale')} on "
                    f"{local.get('device')} ranks here, not the recipe on its cluster",
            fix="run launch.sh on the cluster from a folder of tune --verify-top K (without --verify-run local), "
                "then calibrate that folder")])
    overrides = [item for item in args.inputs if "=" in item]
    if len(overrides) != len(args.inputs):
        raise PrimusExtError(f"calibrate {folder} reads the folder's candidate-N.log files: give no other logs "
                             "(key=value overrides apply to every candidate)")
    cluster = args.cluster or manifest.get("cluster")
    nodes = args.nodes or manifest.get("nodes")
    where = _base_path(manifest, folder)

    def load(path: Path, extra: list[str]) -> Any:
        return session.load(path, [*overrides, *extra], cluster=cluster, nodes=nodes, config_roots=args.config_root,
                            validate=False)

    base = load(where, []) if where is not None else None
    skipped: list[str] = []
    if where is None:
        skipped.append(f"{manifest.get('recipe')!r} (the manifest's recipe): not found; projecting the candidates' "
                       "own files")
    jobs: list[tuple[Path, Any]] = []
    for entry in manifest["candidates"]:
        log = folder / str(entry.get("log", ""))
        if not log.is_file():
            skipped.append(f"{entry.get('name')}: no {entry.get('log')} (not run)")
            continue
        variant_file = folder / str(entry.get("file", ""))
        if not variant_file.is_file():
            skipped.append(f"{entry.get('name')}: its recipe {entry.get('file')} is missing")
            continue
        jobs.append((log, _loader(load, base, where, variant_file)))
    if not jobs:
        raise PrimusExtError(f"{folder}: no candidate has a log yet (run launch.sh on the cluster; each run writes "
                             "candidate-N.log here)")
    if base is None:
        base = jobs[0][1]([])
    return base, jobs, skipped


def _loader(load: Callable[[Path, list[str]], Any], base: Any, where: Path | None,
            variant_file: Path) -> Callable[[list[str]], Any]:
    """Loads the candidate: the base recipe with the variant's execution (the variant alone without a base)."""

    def candidate(extra: list[str]) -> Any:
        variant = load(variant_file, extra)
        if base is None or where is None:
            return variant
        shown = load(where, extra) if extra else base
        if replace(variant.model, name=shown.model.name) != shown.model:  # the variant resolves another model
            return variant
        return replace(shown, execution=variant.execution)

    return candidate
