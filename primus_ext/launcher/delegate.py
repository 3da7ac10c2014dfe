"""Hand real training to an installed upstream launcher: Primus, else Megatron-LM's ``pretrain_gpt.py``.

    from primus_ext.launcher.delegate import find_launcher, launch_command
    found = find_launcher()                 # Launcher(kind="primus", how="primus-cli on PATH", ...) | None
    cmd = launch_command(found, recipe, overrides, nproc=8)
    subprocess.run(cmd.argv, env={**os.environ, **cmd.env})

Discovery (first match wins, and ``Launcher.how`` says which):

1. Primus: ``primus-cli`` on ``PATH``, else the ``primus`` package importable (``python -m primus.cli.main``).
   Command: ``primus-cli train pretrain --config EXP.yaml`` followed by the overrides as ``--key value``
   (Primus's documented form of command-line overrides of the experiment's Megatron arguments).
2. Megatron-LM: ``$MEGATRON_LM_PATH/pretrain_gpt.py``, ``pretrain_gpt.py`` on ``PATH``, or next to an
   importable ``megatron.training`` (a Megatron-LM checkout; the megatron-core wheel has no
   ``megatron.training``). Command: ``torchrun --nproc-per-node N pretrain_gpt.py --mock-data`` +
   the recipe's merged Megatron arguments as the flags Megatron-LM's own parser accepts at every supported
   release (``launcher.megatron_cli.megatron_argv``: ``fp8`` -> ``--fp8-format``, ``False`` -> ``--no-x`` where
   that is the flag); the keys it has no flag for (Primus's) are left out and listed in ``LaunchCommand.dropped``.

Nothing is faked: when neither is found, ``find_launcher`` returns ``None`` and the CLI says so (the
built-in trainer is the remaining option).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

MEGATRON_PATH_ENV = "MEGATRON_LM_PATH"

LauncherKind = Literal["primus", "megatron-lm"]


@dataclass(frozen=True, kw_only=True)
class Launcher:
    kind: LauncherKind
    how: str
    """How it was found, e.g. ``primus-cli on PATH (/usr/local/bin/primus-cli)``."""
    entry: tuple[str, ...]
    """The command prefix (``primus-cli`` or ``python -m primus.cli.main``; the pretrain_gpt.py path)."""


@dataclass(frozen=True, kw_only=True)
class LaunchCommand:
    launcher: Launcher
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    dropped: tuple[Any, ...] = ()
    """Recipe keys left off a Megatron-LM command line (``megatron_cli.Dropped``: key, value, reason)."""

    def shell(self) -> str:
        import shlex

        return " ".join(shlex.quote(a) for a in self.argv)


def _pretrain_gpt(env: Mapping[str, str]) -> tuple[Path, str] | None:
    root = env.get(MEGATRON_PATH_ENV)
    if root and (Path(root) / "pretrain_gpt.py").is_file():
        return Path(root) / "pretrain_gpt.py", f"${MEGATRON_PATH_ENV}={root}"
    on_path = shutil.which("pretrain_gpt.py", path=env.get("PATH"))
    if on_path:
        return Path(on_path), f"pretrain_gpt.py on PATH ({on_path})"
    spec = importlib.util.find_spec("megatron.training") if importlib.util.find_spec("megatron") else None
    if spec is not None and spec.origin:
        candidate = Path(spec.origin).parent.parent.parent / "pretrain_gpt.py"
        if candidate.is_file():
            return candidate, f"next to the importable megatron.training ({candidate})"
    return None


def find_launcher(prefer: str = "auto", *, env: Mapping[str, str] | None = None) -> Launcher | None:
    """The upstream launcher to delegate to (``prefer``: auto | primus | megatron), or ``None``."""
    env = os.environ if env is None else env
    if prefer in ("auto", "primus"):
        cli = shutil.which("primus-cli", path=env.get("PATH"))
        if cli:
            return Launcher(kind="primus", how=f"primus-cli on PATH ({cli})", entry=(cli,))
        if importlib.util.find_spec("primus") is not None and importlib.util.find_spec("primus.cli") is not None:
            return Launcher(kind="primus", how="importable primus package (python -m primus.cli.main)",
                            entry=(sys.executable, "-m", "primus.cli.main"))
        if prefer == "primus":
            return None
    found = _pretrain_gpt(env)
    if found is not None:
        path, how = found
        return Launcher(kind="megatron-lm", how=how, entry=(str(path),))
    return None


def _override_pairs(overrides: Sequence[str]) -> list[str]:
    out: list[str] = []
    for item in overrides:
        key, _, value = item.partition("=")
        out += [f"--{key.strip()}", value.strip()]
    return out


def launch_command(launcher: Launcher, recipe: Any, overrides: Sequence[str] = (), *, nproc: int = 8,
                   nnodes: int = 1) -> LaunchCommand:
    """The command that trains ``recipe`` (+ overrides) through ``launcher``."""
    if launcher.kind == "primus":
        argv = (*launcher.entry, "train", "pretrain", "--config", str(recipe.source), *_override_pairs(overrides))
        return LaunchCommand(launcher=launcher, argv=argv, env={"NNODES": str(nnodes)})
    from primus_ext.launcher.megatron_cli import megatron_argv

    built = megatron_argv({k: v for k, v in recipe.megatron_args.items() if k not in recipe.unknown_keys})
    flags = [f for f in built.argv if f != "--mock-data"]  # written once, first
    torchrun = shutil.which("torchrun") or "torchrun"
    argv = (torchrun, f"--nproc-per-node={nproc}", f"--nnodes={nnodes}", *launcher.entry, "--mock-data", *flags)
    return LaunchCommand(launcher=launcher, argv=argv, dropped=built.dropped)
