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


def is_argument(path: str) -> bool:
    """A problem at a command-line flag (``--nodes``) or ``key=value`` item (``cli``), not in a file."""
    return path.startswith("--") or path == "cli"


def header(problems: list[Problem], source: str, what: str | None) -> str:
    """What the problems are in: ``invalid arguments`` (every path a flag), ``invalid environment`` (every path a
    ``$VAR``), both, else ``{what} {source}`` (``what``: ``invalid recipe`` where a source is named, else ``invalid
    configuration``)."""
    paths = [str(p.path) for p in problems]
    flags, env = sum(map(is_argument, paths)), sum(p.startswith("$") for p in paths)
    if paths and flags + env == len(paths):
        return ("invalid arguments" if not env else "invalid environment" if not flags
                else "invalid arguments and environment")
    what = what or ("invalid recipe" if source else "invalid configuration")
    return f"{what} {source}" if source else what


@dataclass
class RecipeError(PrimusExtError):
    """User input is invalid (a recipe, a configuration built from one, flags, a file read); lists every problem."""

    problems: list[Problem] = field(default_factory=list)
    source: str = ""
    """The file or thing the problems are in (named in the header)."""
    what: str | None = None
    """The header's words before ``source`` (``invalid CI suite``, ``cannot read recipe``); default ``header``'s."""

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def __str__(self) -> str:
        head = header(self.problems, self.source, self.what)
        lines = [f"{head}: {len(self.problems)} problem(s)"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


MAX_PROBLEMS = 50
"""Problems listed one by one in an error; past these, one line counts the rest (30 000 unknown keys are not read
one by one, and cost the check no more than linear time)."""


def capped(problems: list[Problem], limit: int = MAX_PROBLEMS) -> list[Problem]:
    """``problems``, the first ``limit`` of them and one line counting the rest when there are more."""
    if len(problems) <= limit:
        return problems
    rest = problems[limit:]
    return [*problems[:limit], Problem(path=rest[0].path, message=f"... and {len(rest):,} more problem(s) like "
                                       "these (the first shown)", fix="fix those above and run again")]


INTERNAL_ERRORS = (ArithmeticError, AttributeError, LookupError, TypeError, ValueError, RecursionError)
"""A row (``validate``) or suite entry (``ci``) the projection fails on with one of these (a bug in a model part for
that row's features, not a refusal) is one skipped row with the error named, and the others go on (issue 56)."""


class InfeasibleConfig(RecipeError):
    """A configuration is well-formed but cannot run (illegal parallel layout, out of memory)."""
