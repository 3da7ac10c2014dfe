"""The house's layers, enforced: no import runs up the layers, none crosses between packages of one layer, and no
import cycle joins two modules.

    PYTHONPATH=$PWD python -m pytest -q tests/test_layers.py

``LAYERS`` lists the packages (and root modules) of ``primus_ext`` bottom first; a package may import its own
modules and anything in a lower layer, nothing in its own layer or above. Every import counts, at the top of a
module or inside a function (a lazy import is a dependency all the same), and ``if TYPE_CHECKING:`` imports too
(a type from above is knowledge from above). Cycles are checked between modules on every import, type-only ones
included (a circle closed by a type is still two modules that cannot be read, or moved, one without the other), and
on the imports a plugin registry makes when it loads (``PLUGIN_LOADS``: the layer-kind registry imports every kind
module, so a kind that imported a module looking kinds up would close a circle no import statement shows).
docs/DESIGN.md "Layers" says why each package sits where it does, and how ``model/`` keeps its kinds out of circles.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "primus_ext"

LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer.split()) for layer in (
    "errors",                       # domain errors: every layer raises them
    "specs files argtypes",         # typed frozen specs; the one writer / reader; argparse types
    "hardware",                     # GPU and cluster profiles (YAML data) -> SystemSpec
    "model",                        # analytic parts: shapes, params, FLOPs, memory, collectives, schedules, roofline
    "recipe measure logs",          # YAML -> specs (checked against model's rules); real layers timed; training logs
    "projection",                   # costs + collectives + schedule -> one Projection
    "calibration",                  # real runs correct projections: records, the correction arithmetic
    "tune",                         # search over executions: space, legality, pre-filter, strategies, oracle
    "session sweep",                # one per command: target, cost chain, calibration, the tuner's oracle; a scaling
                                    # sweep: a session's projection at each node count (the session passed in)
    "report",                       # tables, HTML, timelines, traces: how a projection is shown
    "validate results",             # projections against published runs; the JSON schema documents (compare's rows
                                    # are report's, so results sits above it)
    "perfci launcher",              # performance CI; --projection-only hook, delegation, trainer, verify-top runs
    "cli",                          # one module per subcommand
    "__main__",
))
"""Bottom first. ``session`` (issue 46 part 1, ``primus_ext/session.py``) builds the tuner's oracle, so it sits above
``tune``; the commands (``cli``, ``launcher``) and ``validate`` ask it."""


@dataclass(frozen=True)
class Import:
    source: str
    """Importing module (dotted, ``primus_ext.x.y``)."""
    target: str
    """Imported module (a submodule named in ``from pkg import sub`` resolves to it)."""
    line: int
    type_only: bool


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    base = PACKAGE.parent.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path, tree: ast.Module | None = None) -> Iterator[Import]:
    """Every ``primus_ext`` import in ``path`` (relative ones resolved)."""
    name = module_name(path)
    tree = tree or ast.parse(path.read_text(encoding="utf-8"))
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module or ""
            subs = [f"{base}.{alias.name}" for alias in node.names if _is_module(f"{base}.{alias.name}")]
            targets = subs or [base]
        for target in targets:
            if target == "primus_ext" or target.startswith("primus_ext."):
                yield Import(name, target, node.lineno, id(node) in type_only)


def plugin_loads() -> list[Import]:
    """The imports ``model.kinds.registry`` makes when it loads the built-in kinds (``_load_builtins``: every module
    of its package but ``_NOT_KINDS``), as imports from the registry (line 0: no statement)."""
    from primus_ext.model.kinds.registry import _NOT_KINDS

    registry = "primus_ext.model.kinds.registry"
    kinds = PACKAGE / "model" / "kinds"
    return [Import(registry, module_name(path), 0, False) for path in sorted(kinds.glob("*.py"))
            if path.stem not in (*_NOT_KINDS, "__init__")]


def all_imports() -> list[Import]:
    """Every import statement of the package, and the plugin registry's loads (``plugin_loads``)."""
    return [i for path in sorted(PACKAGE.rglob("*.py")) for i in imports_of(path)] + plugin_loads()


def unit(module: str) -> str:
    """The package (or root module) a module belongs to: ``primus_ext.model.pipeline.ops`` -> ``model``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_of(name: str) -> int:
    for k, layer in enumerate(LAYERS):
        if name in layer:
            return k
    raise KeyError(name)


def layering_problems(imports: list[Import]) -> list[str]:
    """Imports that run up the layers or across a layer, one line each."""
    out = []
    for i in imports:
        a, b = unit(i.source), unit(i.target)
        if not a or not b or a == b:
            continue
        if layer_of(b) >= layer_of(a):
            where = "up" if layer_of(b) > layer_of(a) else "across"
            out.append(f"{i.source}:{i.line} imports {i.target} ({a} -> {b} runs {where} the layers)")
    return out


def cycles(imports: list[Import]) -> list[list[str]]:
    """Strongly connected sets of modules (more than one) over every import, type-only ones included."""
    edges: dict[str, set[str]] = {}
    for i in imports:
        if i.source != i.target:
            edges.setdefault(i.source, set()).add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the module graph is a few hundred nodes deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_package_has_a_layer():
    units = {unit(module_name(p)) for p in PACKAGE.rglob("*.py")} - {""}
    placed = set().union(*LAYERS)
    assert not units - placed, f"place these in LAYERS (tests/test_layers.py) and docs/DESIGN.md: {units - placed}"


def test_no_import_runs_up_the_layers():
    problems = layering_problems(all_imports())
    assert not problems, "\n".join(problems)


def test_no_import_cycle():
    found = cycles(all_imports())
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_the_check_sees_an_upward_import(tmp_path):
    """The checks fail on what they are meant to catch: a model module importing the tuner, lazily."""
    path = PACKAGE / "model" / "flops.py"
    source = path.read_text(encoding="utf-8") + "\n\ndef _probe():\n    from primus_ext.tune.oracle import Score\n"
    added = list(imports_of(path, ast.parse(source)))
    problems = layering_problems(added)
    assert any("primus_ext.tune.oracle" in p and "runs up" in p for p in problems), problems
    loop = [Import("primus_ext.a", "primus_ext.b", 1, False), Import("primus_ext.b", "primus_ext.a", 1, True)]
    assert cycles(loop) == [["primus_ext.a", "primus_ext.b"]]  # a type-only import closes a circle too


def test_the_check_sees_a_kind_calling_back():
    """A kind module that imports a module looking kinds up (a dispatcher, type-only even) closes a circle through
    the registry's load of the kinds: the check finds it."""
    path = PACKAGE / "model" / "kinds" / "decoder.py"
    source = path.read_text(encoding="utf-8").replace(
        "from __future__ import annotations\n",
        "from __future__ import annotations\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from primus_ext.model.layers import layer_params\n", 1)
    module = module_name(path)
    imports = [i for i in all_imports() if i.source != module] + list(imports_of(path, ast.parse(source)))
    found = cycles(imports)
    assert any(module in c and "primus_ext.model.kinds.registry" in c and "primus_ext.model.layers" in c
               for c in found), found
    assert any(i.type_only and i.target == "primus_ext.model.layers" for i in imports_of(path, ast.parse(source)))


@pytest.mark.parametrize("module", ["primus_ext.errors", "primus_ext.model.flops"])
def test_module_names_resolve(module):
    assert _is_module(module)
