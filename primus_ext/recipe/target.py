"""The recipe's target cluster, written where Primus's own checks do not see it: a ``# primus-ext:`` comment.

Primus's loader keeps a top-level ``primus_ext:`` block silently, but Primus's config schema check
(``tools/ci/check_config_schema.py``, ``primus/core/config/schema_check.py``) reports it as an unknown key. The
comment form carries the same mapping and is invisible to every YAML reader::

    # primus-ext: {cluster: mi300x, nodes: 4}

``target_of(text)`` reads it (the block, when a file has one, wins key by key: it is the older spelling);
``with_target(text, mapping)`` writes or updates it (``tune --apply`` / ``--out`` record what they tuned for).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from primus_ext.errors import Problem
from primus_ext.recipe import safe_yaml

DIRECTIVE = re.compile(r"^#\s*primus-ext:\s*(?P<body>.*?)\s*$")
MAX_LINES = 200
"""The directive is looked for in the first lines only (bounded work on any file)."""
MAX_HEAD_CHARS = 64 * 1024
"""Characters of a recipe read to find it (the directive sits in the header comments)."""


def target_of(text: str, problems: list[Problem]) -> dict[str, Any]:
    """The ``# primus-ext: {...}`` mapping of a recipe's text (``{}`` when absent; a malformed one is a problem)."""
    for line in text.splitlines()[:MAX_LINES]:
        found = DIRECTIVE.match(line.strip())
        if found is None:
            continue
        try:
            value = safe_yaml.load(found["body"]) if len(found["body"]) < 400 else None
        except yaml.YAMLError:
            value = None
        if not isinstance(value, dict):
            problems.append(Problem(path="# primus-ext", value=found["body"][:60],
                                    message="expected a YAML mapping after '# primus-ext:'",
                                    fix="write it as: # primus-ext: {cluster: mi300x, nodes: 4}"))
            return {}
        return value
    return {}


def target_block(path: Path, block: Any, primus: bool, problems: list[Problem], warnings: list[str]) -> Any:
    """The recipe's target: its ``# primus-ext: {...}`` comment, under the older top-level ``primus_ext:`` block
    (``block``; a Primus experiment that has one is warned: Primus's schema check refuses it)."""
    from primus_ext.files import InputRefused, open_input

    try:
        with open_input(path, max_bytes=safe_yaml.MAX_TEXT_BYTES, what="recipe") as fh:
            text = fh.read(MAX_HEAD_CHARS).decode("utf-8", errors="replace")
    except (OSError, InputRefused):
        text = ""  # read_yaml said why
    directive = target_of(text, problems)
    if block is not None and primus:
        warnings.append("the top-level `primus_ext:` block fails Primus's config schema check "
                        "(tools/ci/check_config_schema.py: unknown key); write it as a comment instead: "
                        "# primus-ext: {cluster: ..., nodes: ...}")
    if block is None:
        return directive
    return {**directive, **block} if isinstance(block, dict) else block


def _render(mapping: Mapping[str, Any]) -> str:
    inner = ", ".join(f"{k}: {v}" for k, v in mapping.items())
    return f"# primus-ext: {{{inner}}}"


def with_target(text: str, mapping: Mapping[str, Any]) -> str:
    """``text`` with its directive set to ``mapping`` (updated in place, else added after the leading comments)."""
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(newline)
    for i, line in enumerate(lines[:MAX_LINES]):
        if DIRECTIVE.match(line.strip()):
            current = target_of(line, [])
            lines[i] = _render({**current, **mapping})
            return newline.join(lines)
    at = 0
    while at < len(lines) and lines[at].lstrip().startswith("#"):
        at += 1
    lines.insert(at, _render(mapping))
    return newline.join(lines)


__all__ = ["DIRECTIVE", "target_block", "target_of", "with_target"]
