"""Every third-party module the package imports is declared in setup.py (install_requires or an extra).

A fresh install gets only what setup.py declares: a module imported anywhere in ``primus_ext`` (lazy imports
inside functions too) but declared nowhere ends a user's command in ``ModuleNotFoundError`` (scipy did, for
``calibrate`` and ``tune --verify-top``). Imports inside ``try`` blocks that catch ``ImportError`` are optional by
design and left out. The declarations are read from setup.py's source, so the test follows the file, not
whatever happens to be installed.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "primus_ext"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_requirements(setup_py: Path) -> dict[str, str]:
    """Normalised distribution name -> ``install_requires`` or ``extra NAME``, from setup()'s literal arguments."""
    tree = ast.parse(setup_py.read_text(encoding="utf-8"))
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    out: dict[str, str] = {}
    for kw in call.keywords:
        if kw.arg == "install_requires":
            for req in ast.literal_eval(kw.value):
                out[_norm(re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0])] = "install_requires"
        elif kw.arg == "extras_require":
            for extra, reqs in ast.literal_eval(kw.value).items():
                for req in reqs:
                    out.setdefault(_norm(re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0]), f"extra {extra}")
    return out


def _optional_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                h.type is None or re.search(r"\b(ImportError|ModuleNotFoundError)\b", ast.unparse(h.type))
                for h in node.handlers):
            lines |= {sub.lineno for stmt in node.body for sub in ast.walk(stmt)
                      if isinstance(sub, (ast.Import, ast.ImportFrom))}
    return lines


def imported_top_modules(root: Path) -> dict[str, str]:
    """Top-level module -> first place importing it (``file:line``), optional imports left out."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        optional = _optional_lines(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in optional:
                continue
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if node.level == 0 and node.module else [])
            for name in names:
                found.setdefault(name.split(".")[0], f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def undeclared(root: Path, declared: dict[str, str]) -> list[str]:
    """What ``root`` imports that no declared distribution provides (one line each, with where)."""
    owners = md.packages_distributions()
    problems = []
    for module, where in sorted(imported_top_modules(root).items()):
        if module in (root.name, "__future__") or module in sys.stdlib_module_names:
            continue
        dists = {_norm(d) for d in owners.get(module, ())}
        if dists & declared.keys() or _norm(module) in declared:
            continue
        problems.append(f"{module} (imported at {where}; provided by {sorted(dists) or 'nothing installed'})")
    return problems


def test_every_imported_module_is_declared() -> None:
    problems = undeclared(PACKAGE, declared_requirements(ROOT / "setup.py"))
    assert not problems, "declare these in setup.py:\n" + "\n".join(problems)


@pytest.mark.parametrize("dependency", ["scipy", "PyYAML", "numba"])
def test_removing_a_declared_dependency_is_caught(tmp_path: Path, dependency: str) -> None:
    setup_py = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert re.search(rf'"{dependency}[<>=!~,.\d]*"', setup_py), f"{dependency} is not declared in setup.py"
    stripped = re.sub(rf'\s*"{dependency}[<>=!~,.\d]*",', "", setup_py)
    (tmp_path / "setup.py").write_text(stripped, encoding="utf-8")
    problems = undeclared(PACKAGE, declared_requirements(tmp_path / "setup.py"))
    assert any(p.startswith({"PyYAML": "yaml"}.get(dependency, dependency)) for p in problems), problems


def test_optional_imports_are_left_out(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text("try:\n    import transformer_engine\nexcept ImportError:\n    pass\n"
                                "def f():\n    import not_a_real_module_xyz\n")
    found = imported_top_modules(pkg)
    assert "transformer_engine" not in found and "not_a_real_module_xyz" in found
