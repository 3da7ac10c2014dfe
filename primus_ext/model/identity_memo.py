"""A memo found by model identity: hashing a whole ``ModelSpec`` (its per-layer patterns included) on every call
would dominate the tuner's hot path, so callers key on ``id(model)`` plus the fields the value depends on, and an
entry answers only for the very model object it was computed for (it keeps that object alive, so its id is not
reused while the entry lives).

    >>> plans = IdentityMemo(limit=4096)
    >>> plans.get((id(model), split_fields), model, lambda: build(model, split_fields))
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class IdentityMemo:
    """``key -> (model, value)``, cleared whole when it reaches ``limit`` entries (bounded whatever the input)."""

    __slots__ = ("_entries", "limit")

    def __init__(self, limit: int) -> None:
        self._entries: dict[Hashable, tuple[Any, Any]] = {}
        self.limit = limit

    def get(self, key: Hashable, model: object, compute: Callable[[], T]) -> T:
        entry = self._entries.get(key)
        if entry is not None and entry[0] is model:
            return entry[1]
        if len(self._entries) >= self.limit:
            self._entries.clear()
        value = compute()
        self._entries[key] = (model, value)
        return value

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
