"""Hot-path helpers of the search space: a configuration's stable key and a fast dataclass copy.

    >>> config_key({"recompute": "none", "micro_batch_size": 2})      # '{"micro_batch_size":2,"recompute":"none"}'
    >>> fast_replace(execution, {"tensor_model_parallel_size": 4})

Both run once per candidate the tuner visits (tens of thousands per exhaustive search), hence the
direct constructions; each falls back to the plain library call when its shortcut does not apply
(``tests/tune/test_space.py`` checks both against the plain calls over a whole space).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

_PLAIN_FIELDS: dict[type, tuple[str, ...] | None] = {}


def fast_replace(base: Any, changes: Mapping[str, Any]) -> Any:
    """``dataclasses.replace(base, **changes)`` without the generated ``__init__`` (~25x faster), for a
    dataclass whose ``__init__`` only stores its fields (no ``__post_init__``, no init=False field);
    otherwise, or for an unknown field, ``dataclasses.replace`` itself. Only the fields are copied (a
    ``cached_property`` value of ``base`` would not hold for the copy)."""
    cls = type(base)
    if cls not in _PLAIN_FIELDS:
        fields = dataclasses.fields(cls)
        plain = not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__") and all(f.init for f in fields)
        _PLAIN_FIELDS[cls] = tuple(f.name for f in fields) if plain else None
    names = _PLAIN_FIELDS[cls]
    if names is None or not changes.keys() <= set(names):
        return dataclasses.replace(base, **changes)
    values = base.__dict__
    new = object.__new__(cls)
    state = new.__dict__
    for name in names:
        state[name] = values[name]
    state.update(changes)
    return new


_PLAIN_TEXT = re.compile(r"[A-Za-z0-9_+.\-]*\Z")


def config_key(config: Mapping[str, Any]) -> str:
    """Stable identifier of a configuration (cache and log key): its JSON with sorted keys, no spaces.
    Built directly for the usual axis names and int / bool / None / plain-string values (it is asked
    once per trial); anything else goes through ``json.dumps``."""
    parts = []
    for k in sorted(config):
        v = config[k]
        kind = type(v)
        if type(k) is not str or not _PLAIN_TEXT.match(k):
            return _json_key(config)
        if kind is bool:
            text = "true" if v else "false"
        elif v is None:
            text = "null"
        elif kind is int:
            text = str(v)
        elif kind is str and _PLAIN_TEXT.match(v):
            text = f'"{v}"'
        else:
            return _json_key(config)
        parts.append(f'"{k}":{text}')
    return "{" + ",".join(parts) + "}"


def _json_key(config: Mapping[str, Any]) -> str:
    return json.dumps({k: config[k] for k in sorted(config)}, sort_keys=True, separators=(",", ":"))


__all__ = ["config_key", "fast_replace"]
