"""The recipe's target cluster, written where Primus's own checks do not see it: a ``# primus-ext:`` comment.

Primus's loader keeps a top-level ``primus_ext:`` block silently, but Primus's config schema check
(``tools/ci/check_config_schema.py``, ``primus/core/config/schema_check.py``) reports it as an unknown key. The
comment form carries the same mapping and is invisible to every YAML reader::

    # primus-ext: {cluster: mi300x, nodes: 4}

``target_of(text)`` reads it (the block, when a file has one, wins key by key: it is the older spelling);
``with_target(text, mapping)`` writes or updates it (``tune --apply`` / ``--out`` record what they tuned for).

The target GPU, one rule for every command and the launcher (``resolve_target``; the first that states it wins)::

    --cluster (the launcher: --projection-cluster)
    the recipe's ``# primus-ext: {cluster: ...}`` comment (or ``primus_ext:`` block)
    $PRIMUS_EXT_CLUSTER
    a Primus recipe's folder: examples/megatron/configs/MI355X/... names its GPU
    the GPUs visible on this machine (torch.cuda device names)

Nothing stating it is an error naming ``--cluster`` and the profiles, never a silent default; ``Target.source`` says
which one it was (the reports print it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from primus_ext.errors import Problem
from primus_ext.files import safe_yaml

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


CLUSTER_ENV = "PRIMUS_EXT_CLUSTER"
"""Hardware profile of every projection in this shell when neither ``--cluster`` nor the recipe names one."""
CONFIGS_FOLDER = "configs"
"""Primus keeps its examples per GPU: ``examples/<backend>/configs/<GPU>/<recipe>.yaml`` (MI300X, MI325X, MI355X;
the MLPerf GPT-OSS example writes ``MI355``)."""


@dataclass(frozen=True, kw_only=True)
class Target:
    """The target GPU profile of a projection and where it was stated."""

    cluster: str
    """The profile name as stated (``load_system`` resolves aliases)."""
    source: str
    """Where it came from, for people: ``--cluster``, ``the recipe's # primus-ext comment``, ..."""

    def describe(self, system: Any = None, nodes_source: str | None = None) -> str:
        """``target: 1 node x 8 mi355x (from the recipe's folder configs/MI355X; --cluster to change)``, and where the
        node count came from when given (``...; nodes from $NNODES``: ``Recipe.nodes_source``)."""
        where = self.cluster
        if system is not None:
            where = (f"{system.num_nodes} node{'s' if system.num_nodes != 1 else ''} x {system.gpu.gpus_per_node} "
                     f"{system.gpu.name}" + (f" ({self.cluster})" if system.gpu.name != self.cluster else ""))
        change = "" if self.source.startswith("--") else "; --cluster to change"
        nodes = "" if nodes_source is None else f"; nodes from {nodes_source}"
        return f"target: {where} (from {self.source}{change}){nodes}"


def _profile_named(folder: str) -> str | None:
    """The profile a Primus GPU folder names (``MI355X`` -> ``mi355x``; ``MI355`` -> ``mi355x``, its one extension)."""
    from primus_ext.hardware import canonical_name, list_profiles

    key, names = canonical_name(folder), list_profiles()
    if key in names:
        return key
    longer = [n for n in names if n.startswith(key) and len(n) == len(key) + 1 and n[-1].isalpha()]
    return longer[0] if len(longer) == 1 and key[-1].isdigit() else None


def folder_target(path: str | os.PathLike[str]) -> Target | None:
    """The GPU a recipe's folder names: the folder right under a ``configs`` folder (nearest to the file)."""
    parts = Path(os.path.abspath(path)).parts[:-1]
    for i in range(len(parts) - 1, 0, -1):
        if parts[i - 1] == CONFIGS_FOLDER:
            name = _profile_named(parts[i])
            if name is not None:
                return Target(cluster=name, source=f"the recipe's folder {CONFIGS_FOLDER}/{parts[i]}")
    return None


def visible_target(gpus: Sequence[str], problems: list[Problem]) -> Target | None:
    """The profile of the GPUs this machine shows (all one kind), else ``None`` (a problem when they name none)."""
    from primus_ext.hardware import list_profiles, profile_of_device

    if not gpus:
        return None
    found = {profile_of_device(name) for name in gpus}
    if len(found) == 1 and None not in found:
        [name] = found
        return Target(cluster=name, source=f"this machine's GPUs ({len(gpus)} x {gpus[0]})")
    problems.append(Problem(
        path="--cluster", value=None,
        message=f"no target GPU is stated, and this machine's GPUs ({', '.join(sorted(set(gpus)))}) "
                + ("are of several kinds" if len(found) > 1 else "name no hardware profile"),
        fix=f"pass --cluster with one of: {', '.join(list_profiles())}"))
    return None


def resolve_target(path: str | os.PathLike[str] | None, *, cluster: str | None, block: Mapping[str, Any],
                   env: Mapping[str, str], problems: list[Problem],
                   gpus: Callable[[], Sequence[str]] | None = None) -> Target | None:
    """The one rule (module docstring): the target, or ``None`` with the reason appended to ``problems``.
    ``gpus``: the visible GPUs' device names (default ``hardware.visible.visible_gpus``, asked last)."""
    from primus_ext.hardware import list_profiles

    if cluster is not None:
        return Target(cluster=cluster, source="--cluster")
    if "cluster" in block:
        return Target(cluster=block["cluster"], source="the recipe's # primus-ext: target")
    if env.get(CLUSTER_ENV, "").strip():
        return Target(cluster=env[CLUSTER_ENV].strip(), source=f"${CLUSTER_ENV}")
    found = folder_target(path) if path is not None else None
    if found is not None:
        return found
    if gpus is None:
        from primus_ext.hardware.visible import visible_gpus

        gpus = visible_gpus
    unknown: list[Problem] = []
    found = visible_target(tuple(gpus()), unknown)
    problems += unknown
    if found is not None or unknown:
        return found
    problems.append(Problem(
        path="--cluster", value=None,
        message="no target GPU: neither --cluster, the recipe's `# primus-ext: {cluster: ...}` comment, "
                f"${CLUSTER_ENV}, a Primus {CONFIGS_FOLDER}/<GPU>/ folder nor a GPU of this machine names it",
        fix=f"pass --cluster with one of: {', '.join(list_profiles())} (or write `# primus-ext: {{cluster: NAME, "
            "nodes: N}` at the top of the recipe)"))
    return None


__all__ = ["CLUSTER_ENV", "DIRECTIVE", "Target", "folder_target", "resolve_target", "target_block", "target_of",
           "with_target"]
