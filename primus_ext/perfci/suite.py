"""The suite file: recipes x clusters (x node counts) with tolerances, validated all at once.

    suite: shipped-recipes               # a name for reports
    store: stores/h200.jsonl             # optional timing-store export (relative to this file)
    defaults:
      tolerance: {throughput_pct: 2.0, memory_gib: 0.5}
    entries:
      - recipe: ../recipes/llama3.1_8B-pretrain.yaml   # relative to this file
        cluster: mi325x
        nodes: [1, 8]                    # one entry per node count (names end in /1n, /8n)
        overrides: [micro_batch_size=2]
        name: llama8b                    # optional; default: recipe stem + cluster + nodes
        tolerance: {throughput_pct: 3.0}
        measured: {tokens_per_s_per_gpu: 5762, tolerance_pct: 15, source: "short run 2026-11"}
        config_roots: [../../Primus]     # optional; folders searched for model/module presets (--config-root):
                                         # a Primus recipe outside a checkout otherwise reads primus-ext's bundled
                                         # ones (``ci`` notes it per entry)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from primus_ext.errors import Problem, RecipeError
from primus_ext.files import real_path, safe_yaml

DEFAULT_THROUGHPUT_PCT = 2.0
"""Default allowed throughput drop: above run-to-run noise of the projection (which is exact arithmetic
given the same inputs), so a real change in the code or recipe shows up."""
DEFAULT_MEMORY_GIB = 0.5
DEFAULT_MEASURED_PCT = 15.0
"""Default allowed |projected - measured| for measured anchors (the projection's target accuracy band)."""

SUITE_KEYS = {"suite", "store", "defaults", "entries"}
MAX_ENTRIES = 200
"""The most entries a suite may expand to (an entry per node count): the shipped suite has 9 recipes; a suite past it is
refused before any projection (issue 56: 2 000 node counts spent over 5 CPU-s refusing each)."""
ENTRY_KEYS = {"recipe", "cluster", "nodes", "overrides", "name", "tolerance", "measured", "config_roots"}
TOLERANCE_KEYS = {"throughput_pct", "memory_gib"}
MEASURED_KEYS = {"tokens_per_s_per_gpu", "tolerance_pct", "source"}


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    throughput_pct: float = DEFAULT_THROUGHPUT_PCT
    memory_gib: float = DEFAULT_MEMORY_GIB


@dataclass(frozen=True, kw_only=True)
class Measured:
    tokens_per_s_per_gpu: float
    tolerance_pct: float = DEFAULT_MEASURED_PCT
    source: str = ""


@dataclass(frozen=True, kw_only=True)
class Entry:
    name: str
    recipe: Path
    cluster: str | None
    nodes: int | None
    overrides: tuple[str, ...] = ()
    tolerance: Tolerance = Tolerance()
    measured: Measured | None = None
    config_roots: tuple[Path, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Suite:
    name: str
    path: Path
    entries: tuple[Entry, ...]
    store: Path | None = None


def _number(value: Any, path: str, problems: list[Problem], *, positive: bool = True) -> float | None:
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or (positive and value <= 0)):
        problems.append(Problem(path=path, value=value, message="must be a positive (finite) number"))
        return None
    return float(value)


def _unknown(data: dict, allowed: set[str], path: str, problems: list[Problem]) -> None:
    for key in data:
        if key not in allowed:
            problems.append(Problem(path=f"{path}.{key}", message="unknown key",
                                    fix=f"use one of {', '.join(sorted(allowed))}"))


def _tolerance(data: Any, path: str, base: Tolerance, problems: list[Problem]) -> Tolerance:
    if data is None:
        return base
    if not isinstance(data, dict):
        problems.append(Problem(path=path, value=data, message="must be a mapping",
                                fix="e.g. {throughput_pct: 2.0, memory_gib: 0.5}"))
        return base
    _unknown(data, TOLERANCE_KEYS, path, problems)
    tp = _number(data.get("throughput_pct", base.throughput_pct), f"{path}.throughput_pct", problems)
    mem = _number(data.get("memory_gib", base.memory_gib), f"{path}.memory_gib", problems)
    return Tolerance(throughput_pct=tp or base.throughput_pct, memory_gib=mem or base.memory_gib)


def _entries(raw: dict, index: int, root: Path, default_tol: Tolerance, problems: list[Problem]) -> list[Entry]:
    path = f"entries[{index}]"
    if not isinstance(raw, dict):
        problems.append(Problem(path=path, value=raw, message="each entry must be a mapping"))
        return []
    _unknown(raw, ENTRY_KEYS, path, problems)
    recipe = raw.get("recipe")
    if not isinstance(recipe, str) or not recipe:
        problems.append(Problem(path=f"{path}.recipe", value=recipe, message="required: path to a recipe YAML"))
        return []
    recipe_path = real_path(root / recipe)
    if not recipe_path.is_file():
        problems.append(Problem(path=f"{path}.recipe", value=recipe, message=f"file not found: {recipe_path}"))
    cluster = raw.get("cluster")
    if cluster is not None and not isinstance(cluster, str):
        problems.append(Problem(path=f"{path}.cluster", value=cluster, message="must be a profile name"))
    nodes_raw = raw.get("nodes")
    nodes_list = nodes_raw if isinstance(nodes_raw, list) else [nodes_raw]
    for j, n in enumerate(nodes_list):
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            problems.append(Problem(path=f"{path}.nodes" + (f"[{j}]" if isinstance(nodes_raw, list) else ""),
                                    value=n, message="node counts must be positive integers"))
    overrides = raw.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
        problems.append(Problem(path=f"{path}.overrides", value=overrides, message="must be a list of key=value"))
        overrides = []
    measured = None
    m = raw.get("measured")
    if m is not None:
        if not isinstance(m, dict):
            problems.append(Problem(path=f"{path}.measured", value=m, message="must be a mapping"))
        else:
            _unknown(m, MEASURED_KEYS, f"{path}.measured", problems)
            tok = _number(m.get("tokens_per_s_per_gpu"), f"{path}.measured.tokens_per_s_per_gpu", problems)
            tol = _number(m.get("tolerance_pct", DEFAULT_MEASURED_PCT), f"{path}.measured.tolerance_pct", problems)
            if tok and tol:
                measured = Measured(tokens_per_s_per_gpu=tok, tolerance_pct=tol, source=str(m.get("source", "")))
    tolerance = _tolerance(raw.get("tolerance"), f"{path}.tolerance", default_tol, problems)
    roots = tuple(real_path(root / r) for r in raw.get("config_roots") or [] if isinstance(r, str))
    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        problems.append(Problem(path=f"{path}.name", value=name, message="must be a string"))
        name = None
    out = []
    for n in nodes_list:
        if n is not None and not isinstance(n, int):
            continue
        label = name or f"{Path(recipe).stem}@{cluster or 'recipe-cluster'}"
        if n is not None and (len(nodes_list) > 1 or not name):
            label += f"/{n}n"
        out.append(Entry(name=label, recipe=recipe_path, cluster=cluster, nodes=n, overrides=tuple(overrides),
                         tolerance=tolerance, measured=measured, config_roots=roots))
    return out


def load_suite(path: str | Path) -> Suite:
    """Parse and validate a suite file; every problem is reported at once (``RecipeError``)."""
    from primus_ext.files import InputRefused, read_input

    path = Path(path)
    try:
        data = safe_yaml.load(read_input(path, max_bytes=safe_yaml.MAX_TEXT_BYTES, what="suite").decode("utf-8"))
    except InputRefused as err:
        raise RecipeError(problems=[Problem(path=str(path), message=str(err))]) from None
    except OSError as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"cannot read: {err.strerror}")]) from None
    except UnicodeDecodeError as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"not UTF-8 text ({err.reason})")]) from None
    except yaml.YAMLError as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"invalid YAML: {err}")]) from None
    if not isinstance(data, dict):
        raise RecipeError(problems=[Problem(path=str(path), message="a suite must be a mapping with 'entries'")])
    problems: list[Problem] = []
    _unknown(data, SUITE_KEYS, "suite", problems)
    root = path.parent
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        problems.append(Problem(path="defaults", value=defaults, message="must be a mapping"))
        defaults = {}
    _unknown(defaults, {"tolerance"}, "defaults", problems)
    default_tol = _tolerance(defaults.get("tolerance"), "defaults.tolerance", Tolerance(), problems)
    raw_entries = data.get("entries")
    if not isinstance(raw_entries, list) or not raw_entries:
        problems.append(Problem(path="entries", value=raw_entries, message="a non-empty list is required"))
        raw_entries = []
    if sum(len(raw["nodes"]) if isinstance(raw, dict) and isinstance(raw.get("nodes"), list) else 1
           for raw in raw_entries) > MAX_ENTRIES:
        raise RecipeError(problems=[*problems, Problem(
            path="entries", value=f"{len(raw_entries)} entries", message=f"more than {MAX_ENTRIES} entries once each "
            "node count is one", fix=f"split the suite into files of at most {MAX_ENTRIES} entries")])
    entries = [e for i, raw in enumerate(raw_entries) for e in _entries(raw, i, root, default_tol, problems)]
    names = [e.name for e in entries]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(Problem(path="entries", value=dup, message="duplicate entry name",
                                fix="give the entries distinct 'name's"))
    store = data.get("store")
    store_path = None
    if store is not None:
        store_path = real_path(root / str(store))
        if not store_path.is_file():
            problems.append(Problem(path="store", value=store, message=f"timing store not found: {store_path}"))
    if problems:
        raise RecipeError(problems=problems, source=str(path), what="invalid CI suite")
    return Suite(name=str(data.get("suite") or path.stem), path=path, entries=tuple(entries), store=store_path)
