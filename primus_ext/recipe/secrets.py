"""Values from the environment are used, never shown: decided by use, not by the variable's name.

    hidden = hidden_values(args)          # {expanded text: "${DATABASE_URL}"} of every EnvText in the arguments
    hide_text("connect to postgres://u:pw@h/db", hidden)   # -> "connect to ${DATABASE_URL}"
    hide_value(args["data_path"])          # -> "${DATABASE_URL}" (an EnvText), any other value as it is

A ``${VAR}`` in a recipe is expanded as Primus expands it, and the value goes where the recipe puts it: a number or
a boolean is a parameter of the run (shown, as every parameter is); text (a path, a URL, a name, an option) is
an ``EnvText``, used as what it is (a data path passed to Megatron, a preset file looked up, an option checked)
and never printed: ``recipe show`` and its JSON, every problem and warning, the launch command printed on stderr
and the experiment folder's name show the template as written. A credential is hidden whatever its variable is
called (``PGPASSWORD``, ``MYSQL_PWD``, ``DATABASE_URL``): a name list always misses one.

A second layer catches what the first misses (a value inside a mapping a check echoes, an ``extends:`` target,
a path built from a value): every expansion is also noted by origin (``errors.note_env_text``), and every way out
(``Problem`` and ``RecipeError`` text, stdout and stderr of a command, ``files.write_output`` and ``open_journal``,
the LLM prompt) passes through ``errors.redact``, which finds the text raw, JSON-, HTML- or ``repr``-escaped or as
a normalised path and writes the template in the same encoding.

A value from the environment used as a folder name (Primus's ``workspace/work_group/user_name/exp_name``) must be
one: a plain name (``folder_name_problem``), else the folder is refused, the variable named and its value not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from primus_ext.recipe.templates import EnvText

MIN_HIDDEN_CHARS = 3
"""Shorter expanded texts are not searched for in messages (``1`` would blank every digit); they are still never
shown as a value (``hide_value``)."""
MAX_WALK = 100_000
"""Nodes visited to collect the hidden values (the YAML bound: ``safe_yaml.MAX_EXPANDED_NODES``)."""

_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+=,-]{0,199}")
"""A folder name as Primus's launch scripts make them (``Llama3.1_8B_MI355X_FP8..._TP1``): no separators, no
``:`` / ``@`` / spaces (a URL, credentials, a command)."""
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./~+=,-]{1,4096}")
"""A workspace path: folders of plain names (no URL scheme, no ``user:password@``, no spaces or controls)."""


def hidden_values(values: Any) -> dict[str, str]:
    """Every ``EnvText`` inside ``values`` (mappings and lists walked, shared nodes once): text -> template."""
    out: dict[str, str] = {}
    seen: set[int] = set()
    stack = [values]
    while stack and len(seen) < MAX_WALK:
        value = stack.pop()
        if isinstance(value, EnvText):
            out.setdefault(str(value), value.template)
        elif isinstance(value, dict | list) and id(value) not in seen:
            seen.add(id(value))
            stack.extend(value.values() if isinstance(value, dict) else value)
    return out


def hide_value(value: Any) -> Any:
    """The template of an ``EnvText`` (what the recipe says), any other value as it is."""
    return value.template if isinstance(value, EnvText) else value


def hide_text(text: str, hidden: Mapping[str, str]) -> str:
    """``text`` with every hidden value in it replaced by its template (longest first)."""
    for value in sorted(hidden, key=len, reverse=True):
        if len(value) >= MIN_HIDDEN_CHARS and value in text:
            text = text.replace(value, hidden[value])
    return text


def hide_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """A mapping's values with each ``EnvText`` (at any depth) replaced by its template, for reports."""
    def walk(value: Any, depth: int) -> Any:
        if isinstance(value, EnvText):
            return value.template
        if depth > 0 and isinstance(value, dict):
            return {k: walk(v, depth - 1) for k, v in value.items()}
        if depth > 0 and isinstance(value, list):
            return [walk(v, depth - 1) for v in value]
        return value

    return {k: walk(v, 8) for k, v in values.items()}


def folder_name_problem(key: str, value: Any, *, path: bool = False) -> str | None:
    """Why a value from the environment cannot name a folder (``path``: the workspace, folders allowed), else
    ``None``; the message names the template, never the value."""
    if not isinstance(value, EnvText):
        return None
    pattern = _PLAIN_PATH if path else _PLAIN_NAME
    if pattern.fullmatch(str(value)) and ".." not in str(value).split("/"):
        return None
    return (f"{key}: {value.template} from the environment is not a plain {'path' if path else 'folder name'} "
            "(it holds a URL, credentials, spaces or separators), so it does not name the experiment folder")


__all__ = ["folder_name_problem", "hidden_values", "hide_mapping", "hide_text", "hide_value"]
