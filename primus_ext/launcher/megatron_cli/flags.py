"""The Megatron-LM command-line options every supported release accepts (``flags.json``, generated).

    options = supported_options()        # {dest: MegatronOption}: in every tag of SUPPORTED_TAGS, defined alike
    options["fp8"].flags                 # ('--fp8-format',): the recipe key is the dest, not the flag

``flags.json`` is written by ``python -m primus_ext.launcher.megatron_cli.upstream --git MEGATRON_LM_CLONE`` from the
parsers of ``SUPPORTED_TAGS`` (tests/launcher/megatron_cli/test_upstream.py regenerates it and compares when a
clone is at hand).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

FLAGS_FILE = Path(__file__).with_name("flags.json")
SUPPORTED_TAGS = ("core_v0.13.1", "core_v0.14.0", "core_v0.15.3", "core_v0.16.1")
"""The newest release of each megatron-core minor from 0.13 to 0.16 (git tags of NVIDIA/Megatron-LM; setup.py
installs megatron-core 0.16.1)."""

MIXED_NARGS = "mixed"
"""``nargs`` of an option that takes one value in some supported releases and a list in others."""
OptionKind = Literal["store", "store_true", "store_false", "BooleanOptionalAction"]


@dataclass(frozen=True, kw_only=True)
class MegatronOption:
    """One argparse action of Megatron-LM's parser, as it is in every supported release."""

    dest: str
    """The argument's name in Megatron's ``args`` (the recipe key)."""
    flags: tuple[str, ...]
    """Its option strings, the preferred first (``--fp8-format``; ``--no-x`` then ``--disable-x``)."""
    kind: OptionKind
    nargs: int | str | None = None
    """argparse's nargs of a ``store`` option (None: one value; ``+``, ``*`` or a count: a list; ``MIXED_NARGS``)."""
    choices: tuple[Any, ...] | None = None
    """The accepted values (an enum's member names), or None when any value of the type is."""
    default: Any = None
    default_known: bool = True
    """False when the releases disagree on the default (a value is then always written)."""


@dataclass(frozen=True, kw_only=True)
class PartialOption:
    """A dest only some supported releases define (or define alike)."""

    tags: tuple[str, ...]
    default: Any = None
    default_known: bool = False
    """True when every release that defines it has the same default."""


@dataclass(frozen=True, kw_only=True)
class FlagTable:
    """``flags.json`` read: the options common to every supported release, and the dests some release lacks."""

    tags: tuple[str, ...]
    options: Mapping[str, tuple[MegatronOption, ...]]
    """dest -> its options (a dest can have a ``--x`` and a ``--no-x`` action)."""
    partial: Mapping[str, PartialOption]
    """dest -> the supported releases that define it (not all of them, or not alike) and its default there."""


def _option(dest: str, entry: Mapping[str, Any]) -> MegatronOption:
    choices = entry.get("choices")
    return MegatronOption(dest=dest, flags=tuple(entry["flags"]), kind=entry["kind"], nargs=entry.get("nargs"),
                          choices=None if choices is None else tuple(choices), default=entry.get("default"),
                          default_known=not entry.get("default_differs", False))


@cache
def flag_table() -> FlagTable:
    """The committed ``flags.json``, split into what every supported release accepts and what only some do."""
    document = json.loads(FLAGS_FILE.read_text(encoding="utf-8"))
    tags = tuple(document["tags"])
    if tags != SUPPORTED_TAGS:
        raise AssertionError(f"{FLAGS_FILE} is for {tags}, not {SUPPORTED_TAGS}: regenerate it")
    common: dict[str, tuple[MegatronOption, ...]] = {}
    partial: dict[str, PartialOption] = {}
    for dest, entries in document["options"].items():
        everywhere = [e for e in entries if set(e["tags"]) == set(tags)]
        if everywhere:
            common[dest] = tuple(_option(dest, e) for e in everywhere)
        else:
            defaults = [(e.get("default"), e.get("default_differs", False)) for e in entries]
            partial[dest] = PartialOption(tags=tuple(t for t in tags if any(t in e["tags"] for e in entries)),
                                          default=defaults[0][0],
                                          default_known=all(d == defaults[0] for d in defaults) and not defaults[0][1])
    return FlagTable(tags=tags, options=MappingProxyType(common), partial=MappingProxyType(partial))
