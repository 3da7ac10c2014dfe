"""Unknown flags and ``parse_args``'s verdict, per supported Megatron-LM release, for the Megatron-LM lines of
``launch.sh`` files written by ``primus-ext tune RECIPE --verify-top K`` (issue 53 part 4).

    python benchmarks/megatron_launch_flags.py --git /work/.mirror/NVIDIA+Megatron-LM/repo DIR/launch.sh [...]

For each ``pretrain_gpt.py`` line of the ``megatron)`` branch and each tag of ``megatron_cli.SUPPORTED_TAGS``: the
number of ``--flags``, those the release's parser does not define, and what its ``parse_args`` says
(``megatron_cli.upstream.probe_releases``: the release's own arguments.py, run in a fresh interpreter).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from primus_ext.launcher.megatron_cli.flags import SUPPORTED_TAGS
from primus_ext.launcher.megatron_cli.upstream import probe_releases


def megatron_lines(script: Path) -> dict[str, list[str]]:
    """``candidate-N.log`` -> the pretrain_gpt.py arguments of each Megatron-LM line of ``script``."""
    text = script.read_text(encoding="utf-8")
    out = {}
    for line in text[text.index("  megatron)"):].splitlines():
        line = line.strip()
        if "pretrain_gpt.py" in line and not line.startswith(("#", "echo")):
            words = shlex.split(line.split(" 2>&1 ")[0])
            start = next(i for i, w in enumerate(words) if w.endswith("pretrain_gpt.py")) + 1
            out[f"{script}:{line.rsplit('tee ', 1)[-1]}"] = words[start:]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git", required=True, help="a Megatron-LM git clone holding the release tags")
    parser.add_argument("scripts", nargs="+", type=Path, help="launch.sh files")
    args = parser.parse_args()
    lines = {k: v for s in args.scripts for k, v in megatron_lines(s).items()}
    releases = probe_releases(args.git, SUPPORTED_TAGS, argvs=list(lines.values()))
    for tag, release in releases.items():
        for (name, argv), error in zip(lines.items(), release.parsed, strict=True):
            flags = [a for a in argv if a.startswith("--")]
            unknown = [f for f in flags if f not in release.flags]
            shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
            print(f"{tag}  {name}: {len(flags)} flags, {len(unknown)} unknown{f' ({shown})' if unknown else ''}; "
                  f"parse_args: {(error or 'accepted')[:160]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
