"""Known-key catalogue and did-you-mean hints for unknown recipe keys.

Unknown keys are kept and passed through to Megatron, but named in the recipe's warnings::

    >>> did_you_mean("tensor_parallel_sise")
    'tensor_model_parallel_size'
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from functools import cache, lru_cache

from primus_ext.errors import MAX_PROBLEMS, Problem, cut
from primus_ext.model.kinds.registry import kind_keys
from primus_ext.recipe.catalogue_data import MCORE_CONFIG_KEYS, NO_EFFECT, PRIMUS_PRESET_KEYS
from primus_ext.recipe.key_effects import ARCHITECTURE_KEYS, ARCHITECTURE_PARAMS, UNMODELLED
from primus_ext.recipe.releases import RELEASE_KEYS
from primus_ext.recipe.resolve import READ_KEYS

SIMILARITY_CUTOFF = 0.75
"""difflib ratio above which a known key is offered as the likely intended one (tuned by hand on
typos such as ``tensor_parallel_sise`` -> ``tensor_model_parallel_size``)."""


def key_class(key: str) -> str | None:
    """``modelled``, ``architecture``, ``architecture parameter``, ``not modelled``, ``no effect`` or
    ``earlier release`` (a key an earlier Primus release had);
    ``None`` for an unknown key."""
    if key in READ_KEYS or key in kind_keys():
        return "modelled"
    if key in ARCHITECTURE_KEYS:
        return "architecture"
    if key in ARCHITECTURE_PARAMS:
        return "architecture parameter"
    if key in UNMODELLED:
        return "not modelled"
    if key in NO_EFFECT:
        return "no effect"
    if key in RELEASE_KEYS:
        return "earlier release"
    return None


def known_keys() -> frozenset[str]:
    """Megatron / Primus arguments: every key with a class (modelled, refused, not modelled, no effect), the keys
    the registered layer kinds read included (``Kind.recipe_keys``)."""
    return _with_kinds(kind_keys())


@cache
def _with_kinds(kinds: frozenset[str]) -> frozenset[str]:
    return _fixed_keys() | kinds


@cache
def _fixed_keys() -> frozenset[str]:
    return (READ_KEYS | ARCHITECTURE_KEYS | ARCHITECTURE_PARAMS | frozenset(UNMODELLED) | NO_EFFECT
            | frozenset(RELEASE_KEYS))


@cache
def catalogued_keys() -> frozenset[str]:
    """The keys collected from Primus's presets and megatron-core's configs (each must have a class)."""
    return PRIMUS_PRESET_KEYS | MCORE_CONFIG_KEYS


@cache
def _sorted_keys() -> tuple[str, ...]:
    return tuple(sorted(known_keys()))


@lru_cache(maxsize=1024)
def did_you_mean(key: str) -> str | None:
    """The closest known key, when one is close enough to be a typo of ``key``."""
    if key in RELEASE_KEYS and RELEASE_KEYS[key].reads_as:
        return RELEASE_KEYS[key].reads_as
    matches = difflib.get_close_matches(key, _sorted_keys(), n=1, cutoff=SIMILARITY_CUTOFF)
    return matches[0] if matches else None


def unknown_key_warning(key: str, where: str) -> str:
    """``unknown key `x` in <where>; did you mean `y`? (kept, passed through to Megatron)``."""
    text = f"unknown key `{cut(key)}` in {where}"
    hint = did_you_mean(key) if len(key) <= 100 else None  # difflib on a 100 kB key costs seconds
    if hint:
        text += f"; did you mean `{hint}`?"
    return text + " (kept, passed through to Megatron)"


def unknown_key_notes(keys: Sequence[str], origins: Mapping[str, str],
                      where: Callable[[str], str]) -> tuple[list[str], list[Problem]]:
    """The warnings and typo problems of the unknown ``keys`` (``origins``: each key's path; ``where``: a path in
    words): the first ``MAX_PROBLEMS`` named one by one and checked for typos, the rest counted in one warning (a
    typo search costs ~15 ms a key: 30 000 unknown keys took 130 CPU-s)."""
    named = keys[:MAX_PROBLEMS]
    warnings = [unknown_key_warning(k, where(origins[k])) for k in named]
    typos = [Problem(path=origins[k], value=k, message="unknown key (kept, passed through to Megatron)",
                     fix=f"did you mean {hint}?") for k in named if (hint := did_you_mean(k))]
    if len(keys) > len(named):
        warnings.append(f"... and {len(keys) - len(named):,} more unknown keys, the first `{cut(keys[len(named)])}` "
                        "(kept, passed through to Megatron; not listed one by one nor checked for typos)")
    return warnings, typos
