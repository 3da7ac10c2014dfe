"""YAML files with Primus's ``extends:`` inheritance, and the preset search path.

``extends:`` is a list of paths relative to the file (a single string is accepted); they are merged
in order, then the file's own keys win. A missing ``extends`` target is a warning (the Primus
mirror's ``pre_trainer.yaml`` extends an absent ``../module_base.yaml``); an unreadable or
malformed file is a ``Problem``. Every key remembers the file that last set it.

Preset lookup (``find_preset``): the name as a path relative to the experiment file, then
``<experiment dir>/models|modules/``, then for each config root ``R``: ``R/models|modules/``,
``R/primus/configs/models|modules/megatron/``, ``R/models|modules/megatron/``; finally the shipped
``recipes/`` folder of this checkout, but only when no config root is a Primus checkout: a Primus
tree's presets are never mixed with the bundled ones.

Config roots: the ``--config-root`` folders, else the Primus checkout the recipe lives in
(``find_primus_root``: the nearest folder above the recipe holding ``primus/configs/models/megatron``,
where Primus's own ``PresetLoader`` looks).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from primus_ext.errors import Problem, shown
from primus_ext.files import InputRefused, read_input, real_path, safe_yaml
from primus_ext.recipe.templates import expand_templates

SHIPPED_RECIPES = Path(__file__).resolve().parents[2] / "recipes"
"""``recipes/`` next to the package in a source checkout (absent in a wheel install)."""

MAX_FILE_BYTES = safe_yaml.MAX_TEXT_BYTES
"""Recipes are small; a larger file is refused rather than parsed."""
MAX_EXTENDS_FILES = 256
"""Distinct files one ``extends`` tree may read (Primus's deepest preset tree reads 4)."""
MAX_EXTENDS_DEPTH = 32
"""Levels of ``extends`` (each level a recursion: a chain of thousands would exhaust the stack)."""


def safe_load(text: str, duplicates: list[str] | None = None) -> Any:
    """``yaml.safe_load`` within ``safe_yaml``'s bounds; appends the duplicate keys it meets to ``duplicates``."""
    return safe_yaml.load(text, duplicates)


def display(path: Path) -> str:
    """A path as the user would write it: relative to the working directory when inside it."""
    try:
        return str(real_path(path).relative_to(real_path(Path.cwd())))
    except ValueError:
        return str(path)


@dataclass
class Layer:
    """Merged key/values of one source, with where each top-level key was written."""

    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)

    def update(self, other: Layer) -> None:
        for key, value in other.values.items():
            old = self.values.get(key)
            self.values[key] = deep_merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
            self.origins[key] = other.origins[key]


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        old = merged.get(key)
        merged[key] = deep_merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return merged


def read_yaml(path: Path, problems: list[Problem], warnings: list[str] | None = None) -> dict[str, Any] | None:
    """Safe-load one YAML mapping; any failure becomes a Problem and ``None``; duplicate keys a warning."""
    label = display(path)
    try:  # bounded, regular files only; noted as an input (no output of this command may replace it)
        text = read_input(path, max_bytes=MAX_FILE_BYTES, what="YAML file").decode("utf-8")
    except InputRefused as err:
        problems.append(Problem(path=label, message=f"refused: {err}", fix="give a YAML file"))
        return None
    except (OSError, UnicodeDecodeError) as err:
        problems.append(Problem(path=label, message=f"cannot read: {err}", fix="check the path"))
        return None
    duplicates: list[str] = []
    try:
        data = safe_load(text, duplicates)
    except safe_yaml.YAMLTooLarge as err:
        problems.append(Problem(path=label, message=f"refused before reading it whole: {err}",
                                fix="write the values out; a recipe needs no large lists or alias chains"))
        return None
    except yaml.YAMLError as err:
        problems.append(Problem(path=label, message=f"invalid YAML: {' '.join(str(err).split())}",
                                fix="fix the YAML syntax at the marked line"))
        return None
    except (ValueError, RecursionError, OverflowError) as err:  # bad timestamps, absurd nesting
        problems.append(Problem(path=label, message=f"invalid YAML value: {err}"))
        return None
    if duplicates and warnings is not None:
        warnings.append(f"{label}: duplicate key {', '.join(duplicates)}: the last value is used, as PyYAML does; "
                        "remove the other one")
    if data is None:
        return {}
    if not isinstance(data, dict):
        problems.append(Problem(path=label, message=f"top level must be a mapping, got {type(data).__name__}",
                                fix="write `key: value` lines"))
        return None
    bad = [key for key in data if not isinstance(key, str)]
    if bad:
        problems.append(Problem(path=label, value=bad[0], message="keys must be strings",
                                fix="quote the key or rename it"))
        return None
    return data


def load_preset(path: Path, env: Mapping[str, str], problems: list[Problem], warnings: list[str], *,
                key_prefix: str = "", files: list[Path] | None = None, _stack: tuple[Path, ...] = (),
                _loaded: dict[Path, Layer] | None = None) -> Layer:
    """A file merged over everything it ``extends``; origins are ``<file>:<key>`` (or ``key_prefix``).

    ``files`` collects every file read, parents first (what the report lists as the presets used).
    Each file is read once per call (``_loaded``: later ``extends`` of it reuse the merged layer, so two files that
    list their parent 300 times cost three reads, not 90 000); a parent listed twice in one ``extends`` is merged
    once, at its last place (the same result: later entries win); at most ``MAX_EXTENDS_FILES`` files and
    ``MAX_EXTENDS_DEPTH`` levels."""
    loaded: dict[Path, Layer] = {} if _loaded is None else _loaded
    resolved = real_path(path)
    label = display(path)
    if resolved in _stack:
        chain = " -> ".join(display(p) for p in (*_stack, resolved))
        problems.append(Problem(path=f"{label}:extends", message=f"inheritance cycle {chain}",
                                fix="remove one of the extends entries"))
        return Layer()
    if resolved in loaded:
        return Layer(values=dict(loaded[resolved].values), origins=dict(loaded[resolved].origins))
    if len(_stack) > MAX_EXTENDS_DEPTH or len(loaded) >= MAX_EXTENDS_FILES:
        problems.append(Problem(path=f"{label}:extends", message=f"more than {MAX_EXTENDS_DEPTH} levels or "
                                f"{MAX_EXTENDS_FILES} files of extends", fix="flatten the inheritance"))
        return Layer()
    data = read_yaml(path, problems, warnings)
    if data is None:
        return Layer()
    try:
        data = expand_templates(data, env, problems, path=f"{label}:")
    except RecursionError:
        problems.append(Problem(path=label, message="YAML nested too deeply", fix="flatten the file"))
        return Layer()
    layer = Layer()
    extends = data.pop("extends", None)
    if isinstance(extends, str):
        extends = [extends]
    if extends is not None and not (isinstance(extends, list) and all(isinstance(e, str) for e in extends)):
        problems.append(Problem(path=f"{label}:extends", value=extends,
                                message="expected a list of relative file paths", fix="write extends: [base.yaml]"))
        extends = []
    by_name = {p: i for i, p in enumerate(extends or [])}  # a repeat is merged at its last place
    if len(by_name) > MAX_EXTENDS_FILES:
        problems.append(Problem(path=f"{label}:extends", value=len(by_name),
                                message=f"more than {MAX_EXTENDS_FILES} different parents",
                                fix="flatten the inheritance"))
        by_name = {}
    last = {real_path(path.parent / p): i for p, i in sorted(by_name.items(), key=lambda item: item[1])}
    for parent, i in sorted(by_name.items(), key=lambda item: item[1]):
        target = path.parent / parent
        if last.get(real_path(target)) != i:
            continue
        if not is_file(target):
            why = ("a symlink that leads nowhere (a loop, or its file is missing)" if os.path.islink(target)
                   else "not found")
            warnings.append(f"{label}: extends target {shown(parent)} {why} at {display(target)}; skipped")
            continue
        layer.update(load_preset(target, env, problems, warnings, files=files, _stack=(*_stack, resolved),
                                 _loaded=loaded))
    if files is not None:
        files.append(path)
    own = Layer(values=data, origins={key: f"{key_prefix}{key}" if key_prefix else f"{label}:{key}" for key in data})
    layer.update(own)
    loaded[resolved] = Layer(values=dict(layer.values), origins=dict(layer.origins))
    return layer


Kind = Literal["model", "module"]


def is_file(path: Path) -> bool:
    """``Path.is_file`` that answers False for names the OS refuses (too long, NUL bytes)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


PRIMUS_PRESETS = Path("primus") / "configs"
"""Where a Primus checkout keeps its presets: ``primus/configs/<models|modules>/<framework>/`` (Primus's
``primus/core/config/preset_loader.py``, ``PresetLoader.load``)."""
MAX_ROOT_WALK = 32
"""Folders walked up from a recipe in search of a Primus checkout (deeper trees are not Primus layouts)."""


def is_primus_root(root: Path) -> bool:
    """Whether ``root`` is a Primus checkout (it holds ``primus/configs/models/megatron``)."""
    try:
        return (root / PRIMUS_PRESETS / "models" / "megatron").is_dir()
    except (OSError, ValueError):
        return False


def find_primus_root(recipe: Path) -> Path | None:
    """The nearest folder above ``recipe`` that is a Primus checkout, or ``None``."""
    try:
        folder = real_path(recipe).parent
    except (OSError, RuntimeError, ValueError):
        return None
    for candidate in [folder, *folder.parents][:MAX_ROOT_WALK]:
        if is_primus_root(candidate):
            return candidate
    return None


def search_dirs(kind: Kind, base_dir: Path, roots: Sequence[Path]) -> list[Path]:
    """Folders searched for a ``model:`` / ``config:`` name, nearest first."""
    sub = "models" if kind == "model" else "modules"
    dirs = [base_dir, base_dir / sub]
    for root in roots:
        dirs += [root / sub, root / "primus" / "configs" / sub / "megatron", root / sub / "megatron"]
    if not any(is_primus_root(root) for root in roots):
        dirs.append(SHIPPED_RECIPES / sub)
    unique: list[Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def find_preset(name: str, kind: Kind, base_dir: Path, roots: Sequence[Path],
                exclude: Path | None = None) -> tuple[Path | None, list[Path]]:
    """The first existing ``<dir>/<name>`` over ``search_dirs`` other than ``exclude`` (the experiment file
    itself, when it shares the preset's name); also every path tried."""
    tried: list[Path] = []
    candidate = Path(name)
    if candidate.is_absolute():
        return (candidate if is_file(candidate) else None), [candidate]
    for directory in search_dirs(kind, base_dir, roots):
        path = directory / name
        tried.append(path)
        if is_file(path) and not (exclude is not None and _same_file(path, exclude)):
            return path, tried
    return None, tried


def _same_file(a: Path, b: Path) -> bool:
    try:
        return real_path(a) == real_path(b)
    except (OSError, RuntimeError, ValueError):
        return False
