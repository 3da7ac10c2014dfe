"""The launcher patches on the REAL upstream files: apply without fuzz, run --projection-only, compare.

    python benchmarks/upstream_gates.py --primus /work/.mirror/AMD-AGI+Primus/repo \\
        --megatron /work/.mirror/NVIDIA+Megatron-LM/repo [--include-rc] [--all-cases] [--jobs 2] [--json OUT]

``--primus`` / ``--megatron``: git directories, bare or checkouts (either may be left out). For every
version (Primus: the v26.* release tags and HEAD; Megatron-LM: the core_v0.13 .. latest release tags,
the commit Primus's HEAD pins in third_party/Megatron-LM, and HEAD; ``--include-rc`` adds release
candidates; ``--primus-refs`` / ``--megatron-refs`` choose others) it

1. extracts the files the entry point needs (``git ls-tree`` + ``git cat-file``: the mirrors may lack
   their largest blobs, which ``git archive`` refuses) into a temporary folder;
2. runs the entry point WITHOUT the flag, unpatched (the baseline);
3. test-applies the patch with ``patch -p1 -F0 --dry-run``, then applies it (Megatron-LM: the
   ``parse_and_validate_args`` patch when pretrain_gpt.py calls it, else the ``pretrain(...)`` one);
4. runs the patched entry point without the flag (exit code and last output line must equal the
   baseline's) and with ``--projection-only`` (expected exit 0; with ``--all-cases``, and always on
   Primus's HEAD and Megatron-LM's pinned commit and HEAD, also an illegal configuration -> 2 and an
   out-of-memory one -> 3, and Primus's ``train posttrain`` of an SFT experiment -> 0):

   Primus:      python primus/cli/main.py train pretrain --config examples/megatron/configs/MI300X/
                llama3.1_8B-BF16-pretrain.yaml [overrides] --projection-only --projection-cluster mi300x
   Megatron-LM: python pretrain_gpt.py <2-layer Llama-like arguments> --projection-only
                --projection-cluster h100 --projection-nodes 1

and prints a table (version x patch x applies -F0 x case x exit code x seconds) and the counts; exit
status 1 when anything differs from what is expected.

Runs on CPU with what is installed (torch, megatron-core's dependencies, PyYAML): the extracted
tree comes first on PYTHONPATH, so its own ``megatron`` package is used; GPU-only modules are stubbed
by a ``sitecustomize.py`` written into the temporary folder, each only when it is not installed:
``triton`` (imported unconditionally by Megatron-LM), ``einops`` (pure Python, but imported
unconditionally by core_v0.13.0rc0 .. rc2 only; ``pip install einops`` to use the real one), and
``typing.override`` for Python < 3.12 (Megatron-LM main imports it). The gate exits before any of
them is used. ``CUDA_VISIBLE_DEVICES`` is emptied, so nothing trains even on a GPU machine. No upstream
file is copied into this repository.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATCHES = ROOT / "patches"
PRIMUS_PATCH = "primus-train-projection-only.patch"
MEGATRON_PATCH_PRETRAIN = "megatron-lm-pretrain_gpt.core_v0.13-v0.17.patch"
MEGATRON_PATCH_PARSE = "megatron-lm-pretrain_gpt.core_v0.18-main.patch"
PRIMUS_CONFIG = "examples/megatron/configs/MI300X/llama3.1_8B-BF16-pretrain.yaml"
PRIMUS_SFT_CONFIG = "examples/megatron/configs/MI355X/llama3_8B-BF16-sft.yaml"
PRIMUS_PIN_PATH = "third_party/Megatron-LM"
PRIMUS_TAG = re.compile(r"^v(\d+)\.(\d+)(?:\.(\d+))?(rc\d+|-rc\d+)?$")
PRIMUS_FIRST = (26, 2)
"""First Primus release whose train.py dispatches through PrimusRuntime."""
MEGATRON_TAG = re.compile(r"^core_[rv]0\.(\d+)\.(\d+)(rc\d+)?$")
MEGATRON_FIRST_MINOR = 13
RUN_TIMEOUT_S = 300

LLAMA = ["--num-layers", "2", "--hidden-size", "1024", "--ffn-hidden-size", "2816", "--num-attention-heads", "16",
         "--group-query-attention", "--num-query-groups", "4", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16",
         "--swiglu", "--normalization", "RMSNorm", "--disable-bias-linear", "--position-embedding-type", "rope",
         "--untie-embeddings-and-output-weights", "--tokenizer-type", "NullTokenizer", "--vocab-size", "32000"]
"""A 2-layer Llama-like model in Megatron-LM's own argument names (every version in range has them)."""


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    expected: int
    entry: tuple[str, ...] = ()
    """The command instead of the target's entry point (another suite / config)."""


PRIMUS_CASES = (Case("fits", (), 0), Case("illegal", ("--tensor_model_parallel_size", "3"), 2),
                Case("oom", ("--micro_batch_size", "8"), 3),
                Case("posttrain", (), 0, ("primus/cli/main.py", "train", "posttrain", "--config", PRIMUS_SFT_CONFIG)))
"""Llama-3.1-8B on one MI300X node: as shipped; TP=3 (does not divide 32 heads); 8 x 8192 tokens per
micro-batch; and `train posttrain` of Llama-3-8B SFT (module post_trainer; in Primus since v26.4.0)."""
MEGATRON_CASES = (Case("fits", (), 0), Case("illegal", ("--tensor-model-parallel-size", "3"), 2),
                  Case("oom", ("--num-layers", "80", "--hidden-size", "8192", "--ffn-hidden-size", "28672",
                               "--num-attention-heads", "64"), 3))
"""The 2-layer model; TP=3 (does not divide 16 heads); a 70B-like model without model parallelism on 8 x H100."""

SITECUSTOMIZE = '''"""Written by benchmarks/upstream_gates.py (primus-ext): stubs for what a CPU cannot import."""
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import typing

STUBS = {name for name in ("triton", "einops") if importlib.util.find_spec(name) is None}


class _StubMeta(type):
    """Every attribute is another stub class; calling one with a function returns it (a decorator)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubMeta(f"{cls.__name__}.{name}", (), {})

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _StubMeta(f"{cls.__name__}()", (), {})

    def __getitem__(cls, key):
        return cls


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0"

        def attribute(name, _prefix=spec.name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _StubMeta(f"{_prefix}.{name}", (), {})

        module.__getattr__ = attribute
        return module

    def exec_module(self, module):
        return None


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in STUBS:
            return importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)
        return None


if STUBS:
    sys.meta_path.insert(0, _StubFinder())
if not hasattr(typing, "override"):  # Python < 3.12
    import typing_extensions

    typing.override = typing_extensions.override
'''


@dataclass
class Row:
    repo: str
    ref: str
    patch: str
    applies: str
    case: str
    exit_code: int | None
    expected: int | None
    seconds: float
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.applies.startswith("yes") and self.exit_code == self.expected


class UsageError(Exception):
    """Bad command-line input: printed without a traceback, exit status 2."""


def git_dir(path: str) -> Path:
    """The git directory of a bare repository or of a checkout."""
    done = subprocess.run(["git", "-C", path, "rev-parse", "--absolute-git-dir"], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise UsageError(f"{path}: not a git directory or checkout ({done.stderr.strip()})")
    return Path(done.stdout.strip())


def git(gd: Path, *args: str, data: bytes | None = None) -> bytes:
    done = subprocess.run(["git", f"--git-dir={gd}", *args], input=data, capture_output=True, check=False)
    if done.returncode != 0:
        raise UsageError(f"git {' '.join(args[:3])}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def short(gd: Path, ref: str) -> str:
    return git(gd, "rev-parse", "--short=7", f"{ref}^{{commit}}").decode().strip()


def primus_refs(gd: Path, include_rc: bool) -> list[tuple[str, str]]:
    """(label, ref): the v26.2+ release tags (+ candidates), oldest first, then HEAD."""
    tags = []
    for tag in git(gd, "tag").decode().split():
        m = PRIMUS_TAG.match(tag)
        if m and (int(m[1]), int(m[2])) >= PRIMUS_FIRST and (include_rc or not m[4]):
            tags.append(((int(m[1]), int(m[2]), int(m[3] or 0), 0 if m[4] else 1), tag))
    return [(tag, tag) for _, tag in sorted(tags)] + [(f"HEAD {short(gd, 'HEAD')}", "HEAD")]


def megatron_refs(gd: Path, include_rc: bool, pin: str | None) -> list[tuple[str, str]]:
    """(label, ref): core_v0.13+ release tags (+ candidates), Primus's pinned commit, HEAD."""
    tags = []
    for tag in git(gd, "tag").decode().split():
        m = MEGATRON_TAG.match(tag)
        if m and int(m[1]) >= MEGATRON_FIRST_MINOR and (include_rc or not m[3]):
            rc = int(m[3][2:]) if m[3] else 1 << 30
            tags.append(((int(m[1]), int(m[2]), rc), tag))
    refs = [(tag, tag) for _, tag in sorted(tags)]
    if pin:
        refs.append((f"{pin[:7]} (Primus pin)", pin))
    return [*refs, (f"HEAD {short(gd, 'HEAD')}", "HEAD")]


def primus_pin(gd: Path) -> str | None:
    """The Megatron-LM commit Primus's HEAD pins as its submodule."""
    line = git(gd, "ls-tree", "HEAD", PRIMUS_PIN_PATH).decode().split()
    return line[2] if len(line) >= 3 and line[1] == "commit" else None


def extract(gd: Path, ref: str, dest: Path, keep: Callable[[str], bool]) -> int:
    """Write the blobs of ``ref`` whose path ``keep`` accepts under ``dest``; returns how many were missing."""
    entries = []
    for item in git(gd, "ls-tree", "-r", "-z", "--full-tree", ref).split(b"\0"):
        if not item:
            continue
        meta, path = item.decode().split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob" and keep(path):
            entries.append((mode, sha, path))
    out = git(gd, "cat-file", "--batch", data="".join(f"{sha}\n" for _, sha, _ in entries).encode())
    missing, pos = 0, 0
    for mode, _sha, path in entries:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        pos = end + 1
        if header[-1] == b"missing":
            missing += 1
            continue
        size = int(header[2])
        data, pos = out[pos:pos + size], pos + size + 1
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            target.symlink_to(data.decode())
        else:
            target.write_bytes(data)
            if mode == "100755":
                target.chmod(0o755)
    return missing


def apply_patch(tree: Path, patch: str) -> str:
    """``yes`` / ``yes (offsets)`` / ``NO: <why>``: ``patch -p1 -F0 --dry-run``, then the real apply."""
    cmd = ["patch", "-p1", "-F0", "--batch", "--forward", "-i", str(PATCHES / patch)]
    dry = subprocess.run([*cmd, "--dry-run"], cwd=tree, capture_output=True, text=True, check=False)
    if dry.returncode != 0 or "FAILED" in dry.stdout or "fuzz" in dry.stdout:
        return "NO: " + " ".join((dry.stdout + dry.stderr).split())[:120]
    real = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, check=False)
    if real.returncode != 0:
        return "NO: " + " ".join((real.stdout + real.stderr).split())[:120]
    return "yes (offsets)" if "offset" in real.stdout else "yes"


@dataclass
class Outcome:
    code: int
    seconds: float
    last: str
    output: str


def run(cmd: Sequence[str], cwd: Path, env: dict[str, str], timeout: float) -> Outcome:
    start = time.perf_counter()
    try:
        done = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return Outcome(124, time.perf_counter() - start, f"timed out after {timeout:.0f} s", "")
    output = done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()] or [
        line for line in done.stdout.splitlines() if line.strip()]
    return Outcome(done.returncode, time.perf_counter() - start, lines[-1].strip() if lines else "", output)


def environment(tree: Path, stubs: Path, cache: Path) -> dict[str, str]:
    drop = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "NNODES", "SLURM_PROCID", "PRIMUS_EXT_CLUSTER", "PYTHONPATH"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "PYTHONPATH": os.pathsep.join([str(tree), str(stubs), str(ROOT)]), "CUDA_VISIBLE_DEVICES": "",
            "PYTHONWARNINGS": "ignore", "PRIMUS_EXT_CACHE": str(cache)}


@dataclass(frozen=True)
class Target:
    """One upstream repository: what to extract, which patch, how to run its entry point."""

    repo: str
    keep: Callable[[str], bool]
    entry: tuple[str, ...]
    cases: tuple[Case, ...]
    gate: tuple[str, ...]

    def patch_for(self, tree: Path) -> str:
        if self.repo == "Primus":
            return PRIMUS_PATCH
        text = (tree / "pretrain_gpt.py").read_text() if (tree / "pretrain_gpt.py").is_file() else ""
        return MEGATRON_PATCH_PARSE if "parse_and_validate_args(" in text else MEGATRON_PATCH_PRETRAIN


PRIMUS = Target("Primus", lambda p: p.startswith(("primus/", "examples/megatron/")),
                ("primus/cli/main.py", "train", "pretrain", "--config", PRIMUS_CONFIG), PRIMUS_CASES,
                ("--projection-only", "--projection-cluster", "mi300x"))
MEGATRON = Target("Megatron-LM", lambda p: p.startswith("megatron/") or ("/" not in p and p.endswith(".py")),
                  ("pretrain_gpt.py", *LLAMA), MEGATRON_CASES,
                  ("--projection-only", "--projection-cluster", "h100", "--projection-nodes", "1"))


def check(target: Target, gd: Path, label: str, ref: str, work: Path, stubs: Path, *, all_cases: bool,
          timeout: float) -> list[Row]:
    """Extract, baseline, patch, run: the rows of one version."""
    tree = work / re.sub(r"[^A-Za-z0-9_.-]", "_", f"{target.repo}-{label}")
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    missing = extract(gd, ref, tree, target.keep)
    env = environment(tree, stubs, work / "cache")
    python = [sys.executable, *target.entry]
    before = run(python, tree, env, timeout)
    patch = target.patch_for(tree)
    applies = apply_patch(tree, patch)
    note = f"{missing} blob(s) absent from the mirror" if missing else ""
    if not applies.startswith("yes"):
        return [Row(target.repo, label, patch, applies, "-", None, 0, 0.0, note)]
    after = run(python, tree, env, timeout)
    same = (after.code, after.last) == (before.code, before.last)
    rows = [Row(target.repo, label, patch, applies, "no flag", after.code, before.code if same else None,
                after.seconds, (f"= unpatched ({before.last[:60]})" if same else
                                f"unpatched: {before.code} {before.last[:50]} / patched: {after.last[:50]}"))]
    wanted = target.cases if all_cases or ref == "HEAD" or "pin" in label else target.cases[:1]
    for case in wanted:
        out = work / "reports" / tree.name / case.name
        extra = ("--projection-out", str(out)) if target.repo == "Megatron-LM" else ()
        absent = [a for a in case.entry if a.endswith(".yaml") and not (tree / a).is_file()]
        if absent:
            rows.append(Row(target.repo, label, patch, applies, case.name, None, None, 0.0,
                            f"skipped: {absent[0]} is not in this version"))
            continue
        command = [sys.executable, *case.entry] if case.entry else python
        got = run([*command, *case.args, *target.gate, *extra], tree, env, timeout)
        shown = note if got.code == case.expected else got.last[:100]
        rows.append(Row(target.repo, label, patch, applies, case.name, got.code, case.expected, got.seconds, shown))
    return rows


def table(rows: Sequence[Row]) -> str:
    head = ("repo", "version", "patch", "applies -F0", "case", "exit", "expected", "s", "note")
    body = [(r.repo, r.ref, r.patch.removeprefix("megatron-lm-pretrain_gpt.").removesuffix(".patch"), r.applies,
             r.case, "-" if r.exit_code is None else str(r.exit_code), "-" if r.expected is None else str(r.expected),
             f"{r.seconds:.1f}", ("" if r.ok else "MISMATCH ") + r.note) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip() for line in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def counts(rows: Sequence[Row]) -> str:
    out = []
    for repo in sorted({r.repo for r in rows}):
        mine = [r for r in rows if r.repo == repo]
        versions = sorted({r.ref for r in mine})
        applied = sorted({r.ref for r in mine if r.applies.startswith("yes")})
        gated = [r for r in mine if r.case not in ("no flag", "-") and not r.note.startswith("skipped")]
        same = [r for r in mine if r.case == "no flag"]
        out.append(f"{repo}: {len(versions)} versions, patch applies -F0 to {len(applied)}; "
                   f"--projection-only exit as expected {sum(r.ok for r in gated)}/{len(gated)} runs; "
                   f"without the flag same exit and last line as unpatched {sum(r.ok for r in same)}/{len(same)}")
    return "\n".join(out)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--primus", metavar="GITDIR", help="AMD-AGI/Primus git directory (bare or checkout)")
    p.add_argument("--megatron", metavar="GITDIR", help="NVIDIA/Megatron-LM git directory (bare or checkout)")
    p.add_argument("--primus-refs", help="comma-separated refs instead of the v26.* releases + HEAD")
    p.add_argument("--megatron-refs", help="comma-separated refs instead of core_v0.13+ releases + Primus pin + HEAD")
    p.add_argument("--include-rc", action="store_true", help="also the release candidates")
    p.add_argument("--all-cases", action="store_true", help="exit 2 / 3 cases on every version, not only the pins")
    p.add_argument("--jobs", type=int, default=1, help="versions checked at once (the seconds grow with them)")
    p.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds per run")
    p.add_argument("--work", metavar="DIR", help="keep the extracted trees here (default: a temporary folder)")
    p.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    args = p.parse_args(argv)
    if not (args.primus or args.megatron):
        p.error("give --primus and/or --megatron")
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    if shutil.which("patch") is None:
        p.error("GNU patch is not installed (apt-get install patch)")
    return args


def plan(args: argparse.Namespace) -> list[tuple[Target, Path, str, str]]:
    """(target, git dir, label, ref) of every version to check."""
    jobs: list[tuple[Target, Path, str, str]] = []
    pin = None
    if args.primus:
        gd = git_dir(args.primus)
        refs = ([(r, r) for r in args.primus_refs.split(",")] if args.primus_refs
                else primus_refs(gd, args.include_rc))
        jobs += [(PRIMUS, gd, label, ref) for label, ref in refs]
        pin = primus_pin(gd)
    if args.megatron:
        gd = git_dir(args.megatron)
        if args.megatron_refs:
            refs = [(r, r) for r in args.megatron_refs.split(",")]
        else:
            if pin and subprocess.run(["git", f"--git-dir={gd}", "cat-file", "-e", f"{pin}^{{commit}}"],
                                      capture_output=True, check=False).returncode != 0:
                print(f"note: Primus's pinned Megatron-LM commit {pin[:7]} is not in {args.megatron}", file=sys.stderr)
                pin = None
            refs = megatron_refs(gd, args.include_rc, pin)
        jobs += [(MEGATRON, gd, label, ref) for label, ref in refs]
    return jobs


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        jobs = plan(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="upstream-gates-"))
    work.mkdir(parents=True, exist_ok=True)
    stubs = work / "stubs"
    stubs.mkdir(exist_ok=True)
    (stubs / "sitecustomize.py").write_text(SITECUSTOMIZE)
    print(f"{len(jobs)} versions; trees under {work}", file=sys.stderr)
    start = time.perf_counter()

    def one(job: tuple[Target, Path, str, str]) -> list[Row]:
        target, gd, label, ref = job
        try:
            rows = check(target, gd, label, ref, work, stubs, all_cases=args.all_cases, timeout=args.timeout)
        except UsageError as err:
            rows = [Row(target.repo, label, "-", f"NO: {err}", "-", None, 0, 0.0)]
        print(f"  {target.repo} {label}: {'ok' if all(r.ok for r in rows) else 'MISMATCH'}", file=sys.stderr)
        return rows

    try:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            rows = [row for rows in pool.map(one, jobs) for row in rows]
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(table(rows))
    print()
    print(counts(rows))
    print(f"({time.perf_counter() - start:.0f} s on {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"--jobs {args.jobs})")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
