"""The layer-kind registry: ``RankShape.kind`` name -> ``Kind`` instance.

The built-in kinds load on the first lookup: every module of this package but ``base`` and ``registry`` (a new
kind's module is found, not listed). Their modules import the formula modules, which import this one: the lazy load
is the one deliberate inversion of the model layer (docs/DESIGN.md "Layers"), and keeps the import graph acyclic.
"""

from __future__ import annotations

from primus_ext.errors import PrimusExtError, cut
from primus_ext.model.kinds.base import Kind

_KINDS: dict[str, Kind] = {}
_NOT_KINDS = ("base", "registry")
"""Modules of this package that define no kind."""
_loaded = False


class UnknownKind(PrimusExtError, KeyError):
    """A layer kind no class is registered for."""

    def __str__(self) -> str:
        return str(self.args[0])


def register(kind: Kind, *, replace: bool = False) -> Kind:
    """Add ``kind`` under ``kind.name``; a second kind of the same name is refused unless ``replace``."""
    if not isinstance(kind, Kind):
        raise TypeError(f"register() takes a Kind instance, got {type(kind).__name__}")
    if kind.name in _KINDS and not replace and type(_KINDS[kind.name]) is not type(kind):
        raise ValueError(f"layer kind {kind.name} is already registered ({type(_KINDS[kind.name]).__name__})")
    _KINDS[kind.name] = kind
    return kind


def _load_builtins() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        import importlib
        import pkgutil
        import sys

        package = __name__.rpartition(".")[0]
        for info in sorted(pkgutil.iter_modules(sys.modules[package].__path__), key=lambda i: i.name):
            if info.name not in _NOT_KINDS:
                importlib.import_module(f"{package}.{info.name}")


def get_kind(name: str) -> Kind:
    """The registered kind called ``name``; ``UnknownKind`` (naming the known ones) otherwise."""
    found = _KINDS.get(name)
    if found is None:
        _load_builtins()
        found = _KINDS.get(name)
        if found is None:
            raise UnknownKind(f"unknown layer kind {cut(name)}; known kinds: {', '.join(known_kinds())}")
    return found


def known_kinds() -> tuple[str, ...]:
    """The registered kind names, in registration order."""
    _load_builtins()
    return tuple(_KINDS)

