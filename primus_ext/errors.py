"""Domain errors: shown to users without a traceback, exit code 2.

A ``Problem`` names one violation: the key path it lives at, the offending value, what is wrong
and how to fix it. ``RecipeError`` carries every problem found at once, never just the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_VALUE_CHARS = 200
"""An offending value is shown up to this many characters (a pasted 10 kB expression would bury the message)."""


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
            shown = repr(self.value)
            if len(shown) > MAX_VALUE_CHARS:
                shown = f"{shown[:MAX_VALUE_CHARS]}... ({len(shown)} characters)"
            text += f" (got {shown})"
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
