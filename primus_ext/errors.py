"""Domain errors: shown to users without a traceback, exit code 2.

A ``Problem`` names one violation: the key path it lives at, the offending value, what is wrong
and how to fix it. ``RecipeError`` carries every problem found at once, never just the first.
"""

from __future__ import annotations

import html
import json
import os
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


MIN_REDACTED_CHARS = 6
"""Text from the environment shorter than this is not searched for in every output: Primus's own templates expand
to short common words (``${PRIMUS_USER:root}``, ``${PRIMUS_TEAM:amd}``) that would blank every ``/root/`` path and
``amd`` of a report. A short value is still shown as its template where it is a recipe's value (``EnvText``:
``recipe show``, a problem's value, ``recipe.secrets``). A variable's own value (not the whole text it went into)
is searched for only when it is not a number: ``seq-${PRIMUS_SEQ_LENGTH}`` must not turn every ``8192`` of a report
into the template."""

_FROM_ENV: dict[str, str] = {}
"""Text this process read from the environment into a recipe -> the template it was written as (``${REDIS_URL}``);
every output (messages, stdout / stderr, written files, the trial log, LLM requests) shows the template
(``redact``), whatever the variable is called: secrets by origin, not by name."""
_VARIANTS: list[tuple[str, str]] = []
"""(text as it may appear in an output, its replacement), longest first: raw, JSON-, HTML- and repr-escaped,
path-normalised."""


def note_env_text(value: str, template: str) -> None:
    """Remember that ``value`` came from the environment and is written ``template``: it is never shown."""
    value, template = str(value), str(template)
    if len(value) < MIN_REDACTED_CHARS or value == template or _FROM_ENV.get(value) == template:
        return
    _FROM_ENV[value] = template
    pairs = {value: template, os.path.normpath(value): template}
    for outer in _ENCODINGS:  # one encoding, or one inside another (a page in an HTML page's srcdoc, JSON in HTML)
        for inner in (lambda text: text, *_ENCODINGS):
            pairs.setdefault(outer(inner(value)), outer(inner(template)))
    known = {found for found, _ in _VARIANTS}
    _VARIANTS.extend((k, v) for k, v in pairs.items() if len(k) >= MIN_REDACTED_CHARS and k != v and k not in known)
    _VARIANTS.sort(key=lambda pair: len(pair[0]), reverse=True)


_ENCODINGS = (lambda text: json.dumps(text)[1:-1], lambda text: json.dumps(text, ensure_ascii=False)[1:-1],
              html.escape, lambda text: html.escape(text, quote=False),
              lambda text: html.escape(text, quote=False).replace('"', "&quot;"), lambda text: repr(text)[1:-1])
"""How an output may write a text: JSON (ASCII or not), HTML (attribute or text), XML (ElementTree's attribute:
``"`` escaped, ``'`` not), ``repr``."""


def note_env_value(name: str, value: str) -> None:
    """A variable's own value, read into a recipe's text: shown as ``${NAME}`` (a number is a parameter, shown)."""
    try:
        float(value)
    except ValueError:
        if len(value) >= MIN_REDACTED_CHARS and value.strip().lower() not in ("true", "false", "null", "none"):
            note_env_text(value, f"${{{name}}}")


def forget_env_texts() -> None:
    """Clear what was noted (a new command in the same process)."""
    _FROM_ENV.clear()
    _VARIANTS.clear()


def redact(text: str) -> str:
    """``text`` with every text from the environment (``note_env_text``) replaced by its template."""
    if not _VARIANTS or not isinstance(text, str):
        return text
    for found, template in _VARIANTS:
        if found in text:
            text = text.replace(found, template)
    return text


def _redacted(value: Any, depth: int) -> Any:
    """``value`` with ``redact`` applied to its texts, containers walked ``depth`` levels (as far as shown)."""
    if not _VARIANTS:
        return value
    if isinstance(value, str):
        return redact(str(value))
    if depth > 0 and type(value) is dict:
        return {_redacted(k, 0): _redacted(v, depth - 1) for k, v in list(value.items())[:_SHORT.maxdict + 1]}
    if depth > 0 and type(value) in (list, tuple):
        return type(value)(_redacted(v, depth - 1) for v in value[:_SHORT.maxlist + 1])
    return value


def cut(text: object) -> str:
    """A key or name as written (no quotes), cut to ``MAX_VALUE_CHARS``."""
    text = redact(str(text))
    return text if len(text) <= MAX_VALUE_CHARS else f"{text[:MAX_VALUE_CHARS]}... ({len(text):,} characters)"


def shown(value: Any) -> str:
    """``repr(value)`` cut to ``MAX_VALUE_CHARS``, computed without rendering the whole value."""
    value = _redacted(value, _SHORT.maxlevel)  # before cutting: a cut secret would no longer be found
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        return f"{value[:MAX_VALUE_CHARS]!r}... ({len(value):,} characters)"
    text = redact(_SHORT.repr(value))
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
        return redact(text)


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
        return redact("\n".join(lines))


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
