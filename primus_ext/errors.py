"""Domain errors: shown to users without a traceback, exit code 2.

A ``Problem`` names one violation: the key path it lives at, the offending value, what is wrong
and how to fix it. ``RecipeError`` carries every problem found at once, never just the first.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass, field
from typing import Any

MAX_VALUE_CHARS = 200
"""An offending value is shown up to this many characters (a pasted 10 kB expression would bury the message)."""

class _ShortRepr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        # an int of thousands of digits would raise (Python's int-to-str limit) or cost quadratic time
        return super().repr_int(x, level) if x.bit_length() <= 200 else f"<an integer of {x.bit_length()} bits>"


_SHORT = _ShortRepr()
"""Renders a bounded prefix of any value: a value of 10^9 characters costs what 200 do."""
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxset = 3, 8, 8, 8, 8
_SHORT.maxstring = _SHORT.maxother = MAX_VALUE_CHARS
_SHORT.maxlong = 60


def cut(text: object) -> str:
    """A key or name as written (no quotes), cut to ``MAX_VALUE_CHARS``."""
    text = str(text)
    return text if len(text) <= MAX_VALUE_CHARS else f"{text[:MAX_VALUE_CHARS]}... ({len(text):,} characters)"


def shown(value: Any) -> str:
    """``repr(value)`` cut to ``MAX_VALUE_CHARS``, computed without rendering the whole value."""
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        return f"{value[:MAX_VALUE_CHARS]!r}... ({len(value):,} characters)"
    text = _SHORT.repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else f"{text[:MAX_VALUE_CHARS]}..."


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One violation found in user input."""

    path: str
    """Dotted key path, e.g. ``modules.pre_trainer.overrides.tensor_model_parallel_size``."""
    message: str
    """What is wrong, with the numbers involved."""
    fix: str = ""
    """What the user can change to make it legal."""
    value: Any = None
    """The offending value (``None`` when the problem is an absent key)."""

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}"
        if self.value is not None:
            text += f" (got {shown(self.value)})"
        if self.fix:
            text += f"; fix: {self.fix}"
        return text


class PrimusExtError(Exception):
    """Base of every error the CLI reports without a traceback (exit code 2)."""

    exit_code = 2


@dataclass
class RecipeError(PrimusExtError):
    """A recipe (or a configuration built from one) is invalid; lists every problem."""

    problems: list[Problem] = field(default_factory=list)
    source: str = ""

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def __str__(self) -> str:
        head = f"invalid recipe {self.source}" if self.source else "invalid recipe"
        lines = [f"{head}: {len(self.problems)} problem(s)"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


class InfeasibleConfig(RecipeError):
    """A configuration is well-formed but cannot run (illegal parallel layout, out of memory)."""
