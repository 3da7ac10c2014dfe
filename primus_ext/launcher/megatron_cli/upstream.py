"""Megatron-LM's own argument parser, release by release, from a git clone: the source of ``flags.json``.

    python -m primus_ext.launcher.megatron_cli.upstream --git MEGATRON_LM_CLONE          # rewrite flags.json
    python -m primus_ext.launcher.megatron_cli.upstream --git MEGATRON_LM_CLONE --check  # compare, exit 1 if stale

    reports = probe_releases(git_dir, SUPPORTED_TAGS, argvs=[["--fp8-format", "hybrid"]])
    reports["core_v0.16.1"].parsed[0]       # None (accepted) or argparse's error line

Each release's ``megatron/`` folder is extracted (``git archive TAG megatron``) into a temporary folder and
``probe.py`` runs there in a fresh interpreter: it imports that release's ``megatron/training/arguments.py`` (with
that release's ``megatron.core``), captures the parser ``parse_args`` builds, and calls ``parse_args`` itself on each
command line (argparse exits on an unknown flag or a value outside ``choices``). Needs ``git`` and torch (which
``megatron.core`` imports); no GPU, no network.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primus_ext.launcher.megatron_cli.flags import FLAGS_FILE, MIXED_NARGS, SUPPORTED_TAGS

PROBE = Path(__file__).with_name("probe.py")
PROBE_TIMEOUT_S = 600
"""One release's import and parses take ~10 s on a CPU core; the bound only catches a hung interpreter."""


@dataclass(frozen=True, kw_only=True)
class ReleaseParser:
    """What one release's parser defines and what it said of the command lines it was given."""

    tag: str
    commit: str
    options: tuple[Mapping[str, Any], ...]
    """Every optional action: ``flags``, ``dest``, ``kind``, ``nargs``, ``const``, ``choices``, ``default``."""
    parsed: tuple[str | None, ...]
    """Per command line: None when ``parse_args`` accepted it, else argparse's error line."""

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(f for o in self.options for f in o["flags"])


def _git(git_dir: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(git_dir), *args], check=True, capture_output=True).stdout


def probe_release(git_dir: str | Path, tag: str, argvs: Sequence[Sequence[str]] = ()) -> ReleaseParser:
    """``tag``'s parser and its verdict on ``argvs`` (see the module docstring)."""
    git_dir = Path(git_dir)
    commit = _git(git_dir, "rev-parse", f"{tag}^{{commit}}").decode().strip()
    with tempfile.TemporaryDirectory(prefix=f"megatron-{tag}-") as tree:
        archive = Path(tree) / "megatron.tar"
        archive.write_bytes(_git(git_dir, "archive", "--format=tar", commit, "megatron"))
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        archive.unlink()
        env = {**os.environ, "PYTHONPATH": tree, "PYTHONWARNINGS": "ignore"}
        done = subprocess.run([sys.executable, str(PROBE), tree], input=json.dumps({"argvs": [list(a) for a in argvs]}),
                              capture_output=True, text=True, env=env, cwd=tree, timeout=PROBE_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"Megatron-LM {tag}: the parser probe failed (exit {done.returncode}): "
                           f"{done.stderr.strip()[-2000:]}")
    reply = json.loads(done.stdout)
    return ReleaseParser(tag=tag, commit=commit, options=tuple(reply["options"]),
                         parsed=tuple(p["error"] for p in reply["parsed"]))


def probe_releases(git_dir: str | Path, tags: Sequence[str] = SUPPORTED_TAGS,
                   argvs: Sequence[Sequence[str]] = ()) -> dict[str, ReleaseParser]:
    return {tag: probe_release(git_dir, tag, argvs) for tag in tags}


def _merge(flag: str, entries: list[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """One option string of a dest's action as several releases define it: the choices all of them accept, the
    nargs and default when they agree."""
    first = entries[-1][1]
    choices = first["choices"]
    if choices is not None:
        choices = [c for c in choices if all(o["choices"] is not None and c in o["choices"] for _, o in entries)]
    nargs = {str(o["nargs"]): o["nargs"] for _, o in entries}
    defaults = [o["default"] for _, o in entries]
    same = all(d == defaults[0] for d in defaults)
    out = {"flags": [flag], "kind": first["kind"], "nargs": first["nargs"] if len(nargs) == 1 else MIXED_NARGS,
           "choices": choices, "default": defaults[0] if same else None}
    if not same:
        out["default_differs"] = True
    return {**out, "tags": [t for t, _ in entries]}


def flags_document(releases: Mapping[str, ReleaseParser]) -> dict[str, Any]:
    """The ``flags.json`` document of ``releases``: per dest, each option string of each argparse action kind and
    the releases that define it (``tags``), so a launch can keep what every release accepts; the newest release's
    preferred spelling first."""
    tags = list(releases)
    dests: dict[str, dict[tuple[str, str], list[tuple[str, Mapping[str, Any]]]]] = {}
    for tag in reversed(tags):  # the newest first: its order of the option strings
        for option in releases[tag].options:
            for flag in option["flags"]:
                dests.setdefault(option["dest"], {}).setdefault((option["kind"], flag), []).insert(0, (tag, option))
    options = {dest: [_merge(flag, entries) for (_, flag), entries in by_flag.items()]
               for dest, by_flag in sorted(dests.items())}
    return {"source": "NVIDIA/Megatron-LM megatron/training/arguments.py: the parser parse_args() builds, read by "
                      "primus_ext/launcher/megatron_cli/probe.py",
            "regenerate": "python -m primus_ext.launcher.megatron_cli.upstream --git MEGATRON_LM_CLONE",
            "tags": {tag: releases[tag].commit for tag in tags}, "options": options}


def render(document: Mapping[str, Any]) -> str:
    """The document as committed: one line per dest (a regenerated file diffs line by line)."""
    head = {k: v for k, v in document.items() if k != "options"}
    lines = [json.dumps(head)[:-1] + ', "options": {']
    items = list(document["options"].items())
    lines += [f" {json.dumps(dest)}: {json.dumps(entries)}{',' if i < len(items) - 1 else ''}"
              for i, (dest, entries) in enumerate(items)]
    return "\n".join([*lines, "}}"]) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate (or --check) flags.json from Megatron-LM's releases.")
    parser.add_argument("--git", required=True, help="a Megatron-LM git clone holding the release tags")
    parser.add_argument("--check", action="store_true", help="compare with the committed file; exit 1 if it differs")
    args = parser.parse_args(argv)
    text = render(flags_document(probe_releases(args.git)))
    if args.check:
        same = FLAGS_FILE.read_text(encoding="utf-8") == text
        print(f"{FLAGS_FILE}: {'current' if same else 'stale: regenerate it'}")
        return 0 if same else 1
    FLAGS_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {FLAGS_FILE} ({len(text)} bytes, tags {', '.join(SUPPORTED_TAGS)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
