"""Issue 56 parts 2 and 3 through the real CLI: secrets shown, and inputs replaced by an output flag.

    PYTHONPATH=$PWD python benchmarks/issue56_probe.py          # ~2 min on 2 cores; prints one line per case
    PYTHONPATH=$PWD python benchmarks/issue56_probe.py --only secrets

Secrets: a credential-shaped value in ``$ZZ_CONN`` (a name no word list catches) interpolated at 12 places of the
Llama-3.1-8B recipe (inside a mapping a check echoes, an ``extends:`` target, a preset name, an unknown key, a data
path, ...) x 6 commands (``recipe show``, its JSON, ``project --json --html``, ``tune --json --log``, ``compare
--json --html``, ``train --projection-only``): a case fails when the value appears in stdout, stderr or any file.
Inputs: an output flag aimed through a symlinked folder or a hard link at a GPU profile of ``$PRIMUS_EXT_PROFILES``,
a suite, a baseline, an entry's recipe, an ``extends`` parent, beside a second output: a case fails when an input
changed or the other output was written although the command was refused.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECRET = "Zq7secretVALUE"
VALUE = f"postgresql://svc_user:{SECRET}@db:5432/x"
TINY = ("tensor_model_parallel_size: 1\nnum_layers: 4\nhidden_size: 1024\nffn_hidden_size: 4096\n"
        "num_attention_heads: 16\nvocab_size: 32000\nseq_length: 2048\nmicro_batch_size: 1\nglobal_batch_size: 64\n")


def _cli(folder: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PRIMUS_EXT_CACHE": str(folder / ".cache"), **env}
    return subprocess.run([sys.executable, "-m", "primus_ext", *argv], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)


def _placements() -> dict[str, str]:
    base = (REPO / "recipes" / "llama3.1_8B-pretrain.yaml").read_text()

    def override(line: str) -> str:
        return base.replace("      train_iters: 50\n", f"      train_iters: 50\n      {line}\n")

    return {
        "mapping-in-key": base.replace("      micro_batch_size: 2\n",
                                       "      micro_batch_size:\n        k: ${ZZ_CONN}\n"),
        "list-unknown": override("zz_list: [${ZZ_CONN}, 2]"), "unknown": override("zz_connection: ${ZZ_CONN}"),
        "data_path": override("data_path: ${ZZ_CONN}"), "tokenizer": override("tokenizer_model: ${ZZ_CONN}"),
        "extends-list": "extends: [${ZZ_CONN}]\n" + base, "extends": "extends: ${ZZ_CONN}\n" + base,
        "model-preset": base.replace("    model: llama3.1_8B.yaml", "    model: ${ZZ_CONN}"),
        "exp_name": base.replace("exp_name: ${PRIMUS_EXP_NAME:llama3.1_8B-pretrain}", "exp_name: ${ZZ_CONN}"),
        "in-a-number": base.replace("      micro_batch_size: 2\n", "      micro_batch_size: x${ZZ_CONN}\n"),
        "option": override("recompute_granularity: ${ZZ_CONN}"), "quoted": override('zz_q: "${ZZ_CONN}"'),
    }


COMMANDS = {
    "recipe-show": ["recipe", "show", "r.yaml"], "recipe-json": ["recipe", "show", "r.yaml", "--json"],
    "project": ["project", "r.yaml", "--analytic", "--json", "p.json", "--html", "p.html"],
    "tune": ["tune", "r.yaml", "--analytic", "--budget", "2", "--no-regret", "--json", "t.json", "--log", "t.jsonl"],
    "compare": ["compare", "r.yaml", "micro_batch_size=1", "--analytic", "--html", "c.html", "--json", "c.json"],
    "train": ["train", "--config", "r.yaml", "--projection-only", "--analytic"],
}


def secrets(scratch: Path) -> int:
    failed = 0
    for (place, text), (name, argv) in itertools.product(_placements().items(), COMMANDS.items()):
        folder = Path(tempfile.mkdtemp(dir=scratch))
        for sub in ("models", "modules"):
            shutil.copytree(REPO / "recipes" / sub, folder / sub)
        (folder / "r.yaml").write_text(text)
        done = _cli(folder, argv, {"ZZ_CONN": VALUE})
        where = [s for s, out in (("stdout", done.stdout), ("stderr", done.stderr)) if SECRET in out]
        where += [f.name for f in folder.rglob("*") if f.is_file() and ".cache" not in f.parts
                  and SECRET.encode() in f.read_bytes()]
        failed += bool(where)
        shown = "SHOWN in " + ", ".join(where) if where else "ok"
        print(f"secret {place:15s} {name:12s} exit {done.returncode}: {shown}")
    return failed


def _ci_folder(scratch: Path) -> tuple[Path, dict[str, str]]:
    folder = Path(tempfile.mkdtemp(dir=scratch))
    (folder / "profiles").mkdir()
    shutil.copy(REPO / "primus_ext" / "hardware" / "profiles" / "h100.yaml", folder / "profiles" / "myh100.yaml")
    (folder / "link").symlink_to(folder / "profiles")
    (folder / "same").symlink_to(folder)
    (folder / "tiny.yaml").write_text(TINY)
    (folder / "parent.yaml").write_text(TINY)
    (folder / "child.yaml").write_text("extends: [parent.yaml]\n")
    (folder / "suite.yaml").write_text("entries:\n  - recipe: tiny.yaml\n    cluster: myh100\n    nodes: 1\n")
    env = {"PRIMUS_EXT_PROFILES": str(folder / "profiles")}
    assert _cli(folder, ["ci", "suite.yaml", "--baseline", "baseline.json", "--update-baseline"], env).returncode == 0
    return folder, env


INPUT_CASES = [  # (name, input, argv with the other output first)
    ("profile via symlinked folder", "profiles/myh100.yaml",
     ["ci", "suite.yaml", "--baseline", "baseline.json", "--junit", "ok.xml", "--markdown", "link/myh100.yaml"]),
    ("baseline to update = profile", "profiles/myh100.yaml",
     ["ci", "suite.yaml", "--baseline", "link/myh100.yaml", "--update-baseline", "--junit", "ok.xml"]),
    ("entry recipe", "tiny.yaml", ["ci", "suite.yaml", "--baseline", "baseline.json", "--junit", "same/tiny.yaml"]),
    ("suite", "suite.yaml", ["ci", "suite.yaml", "--baseline", "baseline.json", "--markdown", "same/suite.yaml"]),
    ("baseline", "baseline.json", ["ci", "suite.yaml", "--baseline", "baseline.json", "--junit",
                                   "same/baseline.json"]),
    ("profile, project", "profiles/myh100.yaml", ["project", "tiny.yaml", "--analytic", "--cluster", "myh100",
                                                  "--json", "ok.json", "--html", "link/myh100.yaml"]),
    ("extends parent", "parent.yaml", ["project", "child.yaml", "--analytic", "--cluster", "h100", "--json",
                                       "ok.json", "--trace", "same/parent.yaml"]),
    ("profile, tune", "profiles/myh100.yaml", ["tune", "tiny.yaml", "--analytic", "--cluster", "myh100", "--budget",
                                               "2", "--no-regret", "--log", "ok.jsonl", "--out", "link/myh100.yaml"]),
]


def inputs(scratch: Path) -> int:
    failed = 0
    for name, victim, argv in INPUT_CASES:
        folder, env = _ci_folder(scratch)
        before = (folder / victim).read_bytes()
        done = _cli(folder, argv, env)
        changed = (folder / victim).read_bytes() != before
        other = [p for p in ("ok.xml", "ok.json", "ok.jsonl") if (folder / p).exists()]
        bad = changed or other or done.returncode != 2 or "Traceback" in done.stderr
        failed += bool(bad)
        print(f"input  {name:30s} exit {done.returncode}: {'input CHANGED ' if changed else ''}"
              f"{'written: ' + ', '.join(other) if other else ''}{'' if bad else 'refused, nothing written'}")
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=("secrets", "inputs"))
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="issue56-"))
    try:
        shown = secrets(scratch) if args.only != "inputs" else 0
        replaced = inputs(scratch) if args.only != "secrets" else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"secret cases failed: {shown} of {len(_placements()) * len(COMMANDS) if args.only != 'inputs' else 0}; "
          f"input cases failed: {replaced} of {len(INPUT_CASES) if args.only != 'secrets' else 0}")
    return 1 if shown or replaced else 0


if __name__ == "__main__":
    sys.exit(main())
