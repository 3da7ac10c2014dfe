"""The layer-kind registry: ``RankShape.kind`` name -> ``Kind`` instance.

The built-in kinds load on the first lookup: every module of this package but ``base`` and ``registry`` (a new
kind's module is found, not listed), each registering the instances its ``KINDS`` lists. A kind's module imports
only the leaves of the model layer (``rank_shape``, the formula modules) and ``base``, never this module: the modules
that look kinds up (``model.layers``, ``model.analytic``, ...) sit above it, so the lazy load closes no import
circle (docs/DESIGN.md "Layers"; ``tests/test_layers.py`` counts it as an import).
"""

from __future__ import annotations

from types import MappingProxyType

from primus_ext.errors import PrimusExtError, cut
from primus_ext.model.kinds.base import Kind

_KINDS: dict[str, Kind] = {}
_NOT_KINDS = ("base", "registry")
"""Modules of this package that define no kind."""
_loaded = False
_PACKAGE = __name__.rpartition(".")[0]
_derived: dict[str, object] = {}
"""What ``symbol_kinds`` / ``pattern_kinds`` / ``placed_kinds`` derive from the registry (cleared by ``register``)."""
GPT_LAYOUT = ("dense", "moe", "embedding", "output")
"""The kinds a GPT model places without a symbol (``projection.table.chunk_counts``: dense / MoE by
``moe_layer_pattern``, the edges on the first / last stage). Any other kind places itself by its hybrid ``symbol``."""
_PATTERNS_LIMIT = 4096
"""``pattern_kinds`` answers kept before the memo starts again (bounded whatever the input)."""


class UnknownKind(PrimusExtError, KeyError):
    """A layer kind no class is registered for."""

    def __str__(self) -> str:
        return str(self.args[0])


def register(kind: Kind, *, replace: bool = False) -> Kind:
    """Add ``kind`` under ``kind.name``; a second kind of the same name is refused unless ``replace``, and so is a
    kind no model could place: one without a one-character ``symbol`` (other than ``GPT_LAYOUT``'s), a symbol
    another kind holds, or a symbol without its ``model_macs``.

    Register kinds before projecting (a module's import does): projections, chunk counts and layer costs already
    memoised keep the classes they were computed with (``projection.table.clear_cost_cache`` forgets them)."""
    if not isinstance(kind, Kind):
        raise TypeError(f"register() takes a Kind instance, got {type(kind).__name__}")
    if not type(kind).__module__.startswith(_PACKAGE + "."):
        _load_builtins()  # a plugin's or a test's kind: checked against the built-in ones, whatever loaded first
    if kind.name in _KINDS and not replace and type(_KINDS[kind.name]) is not type(kind):
        raise ValueError(f"layer kind {kind.name} is already registered ({type(_KINDS[kind.name]).__name__})")
    _check_placement(kind)
    _KINDS[kind.name] = kind
    _derived.clear()
    return kind


def _check_placement(kind: Kind) -> None:
    if not kind.symbol:
        if kind.name not in GPT_LAYOUT:
            raise ValueError(f"layer kind {kind.name} has no symbol: a GPT model places only {', '.join(GPT_LAYOUT)} "
                             "(by moe_layer_pattern); give the kind its hybrid layer symbol (Kind.symbol)")
        return
    if len(kind.symbol) != 1 or kind.symbol.isspace():
        raise ValueError(f"layer kind {kind.name}: symbol {kind.symbol!r} must be one character of a layer pattern")
    holder = next((k.name for k in _KINDS.values() if k.symbol == kind.symbol and k.name != kind.name), None)
    if holder:
        raise ValueError(f"layer kind {kind.name}: symbol {kind.symbol!r} already places layer kind {holder}")
    if type(kind).model_macs is Kind.model_macs:
        raise ValueError(f"layer kind {kind.name} (symbol {kind.symbol!r}) gives no model FLOPs: define model_macs")


def unregister(name: str) -> None:
    """Remove the kind called ``name`` (a test's temporary kind); unknown names are ignored."""
    if _KINDS.pop(name, None) is not None:
        _derived.clear()


def _load_builtins() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        import importlib
        import pkgutil
        import sys

        for info in sorted(pkgutil.iter_modules(sys.modules[_PACKAGE].__path__), key=lambda i: i.name):
            if info.name not in _NOT_KINDS:
                for kind in importlib.import_module(f"{_PACKAGE}.{info.name}").KINDS:
                    register(kind)


def _ordered() -> list[Kind]:
    """Every kind in a fixed order, whichever module was imported first: the built-in ones by module name, each
    module's in its own order, then the others (a plugin's, a test's) as registered."""
    _load_builtins()
    rank = {name: k for k, name in enumerate(_KINDS)}

    def key(kind: Kind) -> tuple:
        module = type(kind).__module__
        builtin = module.startswith(_PACKAGE + ".")
        return (not builtin, module if builtin else "", rank[kind.name])

    return sorted(_KINDS.values(), key=key)


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


def symbol_kinds() -> MappingProxyType[str, str]:
    """Hybrid layer symbol -> the kind that prices it (every kind with a ``symbol``), in the registry's fixed order
    (``_ordered``)."""
    found = _derived.get("symbols")
    if found is None:
        found = _derived["symbols"] = MappingProxyType({k.symbol: k.name for k in _ordered() if k.symbol})
    return found  # type: ignore[return-value]


def pattern_kinds(pattern: str) -> MappingProxyType[str, str]:
    """Symbol -> kind for the symbols ``pattern`` holds, in the order they first appear in it: how a model's chunk
    counts, stage sums and memory plans lay out its hybrid layers (``projection.table.chunk_counts``; a GPT
    model's ``""``: none). The order depends on the pattern alone (and a symbol places one kind: ``register``), so
    registering or removing other kinds changes no layout already memoised. ``UnknownKind`` for a symbol no
    registered kind declares."""
    key = ("pattern", pattern)
    found = _derived.get(key)
    if found is None:
        kinds = symbol_kinds()
        unknown = sorted(set(pattern) - set(kinds))
        if unknown:
            raise UnknownKind(f"hybrid layer symbol(s) {cut(''.join(unknown))} have no registered layer kind; "
                              f"known symbols: {' '.join(kinds)}")
        if len(_derived) > _PATTERNS_LIMIT:
            _derived.clear()
        found = _derived[key] = MappingProxyType({s: kinds[s] for s in dict.fromkeys(pattern)})
    return found  # type: ignore[return-value]


def kind_keys() -> frozenset[str]:
    """Every recipe key a registered kind reads for its own hyper-parameters (``Kind.recipe_keys``): modelled keys."""
    found = _derived.get("keys")
    if found is None:
        found = _derived["keys"] = frozenset(key for kind in _ordered() for key in kind.recipe_keys())
    return found  # type: ignore[return-value]


def placed_kinds() -> tuple[Kind, ...]:
    """Every kind in the order ``layers.rank_shapes`` lists a model's: decoder layers, then the edges, each in
    the registry's fixed order (``Kind.present`` says which a model has)."""
    found = _derived.get("placed")
    if found is None:
        found = _derived["placed"] = tuple(sorted(_ordered(), key=lambda k: not k.decoder_layer))
    return found  # type: ignore[return-value]
