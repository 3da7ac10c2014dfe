"""Line-level edits of a YAML file: set keys of block mappings and keep every other byte as it was.

ruamel.yaml parses the file for positions only (the line and column of each key and value); the edit is made on
the text. Comments, quoting, indentation, ``~`` nulls, document markers, line endings and the order of every
untouched line stay exactly as written; a changed key keeps its line, its trailing comment and its quoting of a
``${VAR:default}`` template; a new key goes after the last entry of its mapping, with that mapping's
indentation; missing mappings on the way (``modules.pre_trainer.overrides``) are created.

    text = edit_text(original, [(("modules", "pre_trainer", "overrides"), "micro_batch_size", "2")])

Each assignment is (mapping path, key, the value's YAML text). ``edit_text`` returns ``None`` for shapes it does
not edit line by line (a flow-style mapping on the path, a key that is not a plain word, line breaks other than
LF / CRLF, a result that does not read back as intended); the caller then falls back to a ruamel dump.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml as pyyaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from primus_ext.files import safe_yaml

Assignment = tuple[tuple[str, ...], str, str]
"""(path of the mapping, key, new value as YAML text)."""

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_ODD_BREAKS = ("\x85", "\u2028", "\u2029")
"""Line breaks ruamel counts as lines that ``str.split("\\n")`` does not: such files take the fallback."""


def render(value: Any) -> str:
    """``value`` as one-line YAML (flow style for lists): ``2``, ``true``, ``null``, ``[core_attn, mlp]``."""
    text = pyyaml.safe_dump(value, default_flow_style=True, width=1 << 30, allow_unicode=True)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def comment_start(line: str) -> int:
    """Index of the ``#`` that starts a comment on ``line`` (outside quotes, after a blank), else ``len(line)``."""
    quote = ""
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if quote == '"' and ch == "\\":
                i += 2
                continue
            if ch == quote:
                if quote == "'" and line[i + 1:i + 2] == "'":
                    i += 2
                    continue
                quote = ""
        elif ch in "'\"" and (i == 0 or line[i - 1] in " \t:[{,"):
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return i
        i += 1
    return len(line)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


@dataclass
class _Text:
    lines: list[str]
    eol: str
    final_eol: bool
    ops: list[tuple[int, int, list[str]]] = field(default_factory=list)
    """(start, end, new lines): lines[start:end] replaced; applied bottom-up."""

    def continues(self, j: int, col: int, sequence: bool) -> bool:
        s = self.lines[j].strip()
        if not s or s.startswith("#") or s in ("---", "..."):
            return False
        ind = _indent(self.lines[j])
        return ind > col or (sequence and ind == col and s.startswith("-"))

    def region_end(self, line: int, col: int, bound: int, sequence: bool) -> int:
        """Last line of the value of the key at (``line``, ``col``), looking no further than ``bound``."""
        last = line
        for j in range(line + 1, bound):
            if self.continues(j, col, sequence):
                last = j
        return last

    def result(self) -> str:
        """The text with every op made. Inserts at one position keep a nested mapping's new keys above a new
        block of an outer one (deeper indentation first), else their order; they go before a replacement
        starting there."""
        merged: dict[int, list[tuple[int, int, list[str]]]] = {}
        ops = []
        for i, (start, end, new) in enumerate(self.ops):
            if start == end:
                merged.setdefault(start, []).append((-_indent(new[0]) if new else 0, i, new))
            else:
                ops.append((start, end, new))
        ops += [(at, at, [line for *_, new in sorted(group) for line in new]) for at, group in merged.items()]
        lines = list(self.lines)
        for start, end, new in sorted(ops, key=lambda op: (op[0], op[1]), reverse=True):
            lines[start:end] = new
        text = self.eol.join(lines)
        return text + self.eol if self.final_eol else text


def _split(text: str) -> _Text | None:
    if any(ch in text for ch in _ODD_BREAKS) or "\r" in text.replace("\r\n", ""):
        return None
    eol = "\r\n" if "\r\n" in text else "\n"
    body = text.replace("\r\n", "\n")
    final = body.endswith("\n")
    lines = (body[:-1] if final else body).split("\n")
    return _Text(lines=lines, eol=eol, final_eol=final or not body)


@dataclass(frozen=True)
class _Place:
    """A block mapping of the file: the node, the column of its keys and the line its region must end before."""

    node: CommentedMap
    col: int
    bound: int

    def end(self, text: _Text) -> int:
        """Last line of the mapping (its last key's value)."""
        last = list(self.node)[-1]
        line, col = self.node.lc.key(last)
        return text.region_end(line, col, self.bound, isinstance(self.node[last], CommentedSeq))

    def key_bound(self, key: str) -> int:
        keys = list(self.node)
        i = keys.index(key)
        return self.node.lc.key(keys[i + 1])[0] if i + 1 < len(keys) else self.bound


def _step(root: CommentedMap) -> int:
    """Indentation step of the file: the column of the first nested block mapping's keys (2 without one)."""
    for value in root.values():
        if isinstance(value, CommentedMap) and value and not value.fa.flow_style():
            col = value.lc.key(next(iter(value)))[1]
            if col > 0:
                return col
    return 2


def _value_text(text: _Text, place: _Place, key: str) -> tuple[int, int, int, str, str]:
    """(key line, value column or -1, last line of the value, text before the value, trailing comment)."""
    line, col = place.node.lc.key(key)
    value = place.node[key]
    end = text.region_end(line, col, place.key_bound(key), isinstance(value, CommentedSeq))
    raw = text.lines[line]
    cut = comment_start(raw)
    comment = raw[cut:]
    vline, vcol = place.node.lc.value(key)
    if value is not None and vline == line and not isinstance(value, CommentedMap | CommentedSeq):
        return line, vcol, end, raw[:vcol], comment
    if isinstance(value, CommentedMap | CommentedSeq) and vline == line:
        return line, vcol, end, raw[:vcol], comment  # a flow collection on the key line
    head = re.match(r"\s*(?:'[^']*'|\"[^\"]*\"|[^:#]+?)\s*:", raw)
    if head is None:
        raise ValueError(key)
    return line, -1, end, raw[:head.end()] + " ", comment


def _replace(text: _Text, place: _Place, key: str, new: str) -> None:
    line, vcol, end, head, comment = _value_text(text, place, key)
    raw = text.lines[line]
    body = new
    if vcol >= 0:
        old = raw[vcol:comment_start(raw)].rstrip()
        template = place.node[key]
        if isinstance(template, str) and "${" in new and template in old:
            body = old.replace(template, new)  # keep the quotes around a template
    if comment:
        pad = comment_start(raw) - len(head) - len(body) if vcol >= 0 else 1
        body += " " * max(1, pad) + comment
    text.ops.append((line, end + 1, [head + body]))


def _open(text: _Text, place: _Place, key: str) -> tuple[int, int] | None:
    """Make the null / empty value of ``key`` able to take children: (line to insert after, key column)."""
    line, col = place.node.lc.key(key)
    value = place.node[key]
    if isinstance(value, CommentedMap) and not value and place.node.lc.value(key)[0] == line:
        raw = text.lines[line]
        head = re.match(r"(\s*(?:'[^']*'|\"[^\"]*\"|[^:#]+?)\s*:)", raw)
        if head is None:
            return None
        comment = raw[comment_start(raw):]
        text.ops.append((line, line + 1, [head.group(1) + (" " + comment if comment else "")]))
        return line, col
    if value is None:
        _, _, end, head, comment = _value_text(text, place, key)
        if end != line:
            return None
        text.ops.append((line, line + 1, [head.rstrip() + (" " + comment if comment else "")]))
        return line, col
    return None


def _plain_key(key: str) -> bool:
    return bool(_WORD.fullmatch(key)) and key not in ("null", "true", "false", "yes", "no", "on", "off", "~")


def edit_text(original: str, assignments: Sequence[Assignment]) -> str | None:
    """``original`` with ``assignments`` made line by line, or ``None`` when it cannot be done that way."""
    text = _split(original)
    if text is None:
        return None
    try:
        root = YAML().load(original)
    except Exception:  # any parse failure: the caller's own parse reports it
        return None
    if not isinstance(root, CommentedMap) or not all(_plain_key(k) for _, k, _ in assignments):
        return None
    if root.fa.flow_style():
        return None  # a flow mapping at the top
    step = _step(root)
    groups: dict[tuple[str, ...], list[tuple[str, str]]] = {}
    for path, key, new in assignments:
        groups.setdefault(path, []).append((key, new))
    try:
        for path, items in groups.items():
            if not _edit_mapping(text, root, path, items, step):
                return None
    except (ValueError, KeyError, IndexError):
        return None
    result = text.result()
    return result if _reads_back(result, assignments) else None


def _edit_mapping(text: _Text, root: CommentedMap, path: tuple[str, ...], items: list[tuple[str, str]],
                  step: int) -> bool:
    place = _Place(node=root, col=0, bound=len(text.lines))
    depth = 0
    for name in path:  # walk down while the mappings exist in block style
        child = place.node.get(name)
        if not isinstance(child, CommentedMap) or not child:
            break
        line, col = place.node.lc.key(name)
        first = next(iter(child))
        if child.fa.flow_style() or child.lc.key(first)[0] == line:
            return False  # flow style: not edited line by line
        place = _Place(node=child, col=child.lc.key(first)[1], bound=place.key_bound(name))
        depth += 1
    missing = path[depth:]
    new_lines: list[str] = []
    if not missing:
        for key, new in items:
            if key in place.node:
                _replace(text, place, key, new)
            else:
                new_lines.append(" " * place.col + f"{key}: {new}")
        if new_lines:
            at = place.end(text) + 1 if place.node else place.bound
            text.ops.append((at, at, new_lines))
        return True
    head = missing[0]
    if head in place.node:  # `overrides:` with a null or `{}` value
        opened = _open(text, place, head)
        if opened is None:
            return False
        at, col = opened[0] + 1, opened[1] + step
        missing = missing[1:]
    else:
        at = place.end(text) + 1 if place.node else place.bound
        col = place.col if place.node else 0
    for name in missing:
        new_lines.append(" " * col + f"{name}:")
        col += step
    new_lines += [" " * col + f"{key}: {new}" for key, new in items]
    text.ops.append((at, at, new_lines))
    return True


def _reads_back(result: str, assignments: Sequence[Assignment]) -> bool:
    """Whether every assigned key reads back as its new value (and the file is still one YAML mapping)."""
    try:
        data = safe_yaml.load(result)
        for path, key, new in assignments:
            node = data
            for name in path:
                node = node.get(name) if isinstance(node, dict) else None
            if not isinstance(node, dict) or key not in node or node[key] != safe_yaml.load(f"v: {new}")["v"]:
                return False
    except pyyaml.YAMLError:
        return False
    return True


__all__ = ["Assignment", "comment_start", "edit_text", "render"]
