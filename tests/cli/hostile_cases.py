"""Hostile inputs (issue 47): generated cases and the fixed corpus of the issue's reproducers, run through the real
CLI in a forked child with bounds on time and memory, checked for what must never happen.

    case = generate(random.Random(seed), folder)        # one generated case, its files written into ``folder``
    cases = corpus(folder)                              # the issue's reproducers (hostile_corpus.py)
    result = run_case(case, limit_s=5.0, limit_bytes=1 << 30)    # hostile_run.py
    result.failures                                     # [] or what went wrong (traceback, time, memory, ...)

A case is built from the files it writes into its own folder (a shipped recipe and its presets copied there, so
every input is the case's own) and an argv; it names its inputs (digested before and compared after: an input
changed, truncated or replaced is a failure), the secrets that must not appear in stdout, stderr or any file the
command wrote, and the environment of the child (``PRIMUS_EXT_CACHE`` always points into the folder: the user's
cache is never touched). Families (``FAMILIES``): YAML features (an alias inside its own node in every position,
tags, merge keys, anchors across documents), file-system shapes (FIFOs, devices, folders, symlink loops, huge
sparse files, read-only folders), every output flag pointed at every input (directly, through a symlink, through
a hard link), ``extends`` trees (repeats, cycles, loops, depth), stores (corrupt, text, folder, other layout, read
only, records that are not JSON), training logs (long, restarts, long lines, CR endings, bytes), secrets in every
position of a recipe, and two ``tune --apply`` at once on one recipe.

The campaign is ``benchmarks/hostile_campaign.py``; ``tests/cli/test_hostile.py`` runs the corpus and a dozen
generated cases in CI.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
BASE_RECIPES = ("llama3.1_8B-pretrain.yaml", "mixtral_8x7B-pretrain.yaml", "llama3.1_70B-pretrain.yaml")
SELF_ALIAS = "&a [*a]"


@dataclass
class Case:
    """One command on hostile input."""

    name: str
    argv: list[str]
    folder: Path
    inputs: list[Path] = field(default_factory=list)
    """Files whose bytes must be the same after the command (symlinks followed)."""
    secrets: list[str] = field(default_factory=list)
    """Values that must not appear in stdout, stderr or any file the command wrote."""
    env: dict[str, str] = field(default_factory=dict)
    concurrent: int = 1
    """Run this many copies of the command at once (``tune --apply`` races)."""
    after: Callable[[Case], list[str]] | None = None
    """An extra check after the run: what went wrong, [] when nothing did."""
    streams: tuple[str, str] = ("file", "file")
    """The shapes of stdout and stderr: ``file``, ``closed``, ``full`` or ``pipe-gone`` (``run_cli_child``)."""
    encoding: str = "utf-8"
    """Their encoding: ``utf-8``, ``ascii`` (``PYTHONIOENCODING=ascii``) or ``ascii-c-locale`` (``LC_ALL=C``)."""
    exits: tuple[int, ...] = ()
    """Exit codes allowed beside 0 to 4 (74: a standard stream refused a write)."""


# ------------------------------------------------------------------------------------------------- building blocks
def _copy_recipe(folder: Path, name: str = "llama3.1_8B-pretrain.yaml") -> Path:
    """A shipped recipe and the presets it names, copied into ``folder`` (``models/``, ``modules/``)."""
    text = (RECIPES / name).read_text()
    for sub in ("models", "modules"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for line in text.splitlines():
        stripped = line.strip()
        for key, sub in (("model:", "models"), ("config:", "modules")):
            if stripped.startswith(key):
                preset = stripped.split(":", 1)[1].strip()
                if (RECIPES / sub / preset).is_file():
                    shutil.copy(RECIPES / sub / preset, folder / sub / preset)
    path = folder / "recipe.yaml"
    path.write_text(text)
    return path


def _presets(folder: Path) -> list[Path]:
    return sorted(p for sub in ("models", "modules") for p in (folder / sub).glob("*.yaml"))


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    path.write_text(text.replace(old, new, 1) if old in text else text + new.split("\n", 1)[-1])


def _override(path: Path, line: str) -> None:
    """Set ``line`` (``key: value``, maybe more lines) under the recipe's overrides, replacing the key's own line."""
    key = line.split(":", 1)[0].strip()
    lines = path.read_text().splitlines()
    own = [i for i, text in enumerate(lines) if text.startswith(f"      {key}:")]
    if own:
        lines[own[0]] = f"      {line}"
    else:
        at = next((i for i, text in enumerate(lines) if text.strip() == "overrides:"), len(lines) - 1)
        lines.insert(at + 1, f"      {line}")
    path.write_text("\n".join(lines) + "\n")


def _directive(path: Path, body: str) -> None:
    """Make ``# primus-ext: body`` the recipe's target comment (replacing its own)."""
    lines = [text for text in path.read_text().splitlines() if not text.startswith("# primus-ext:")]
    path.write_text(f"# primus-ext: {body}\n" + "\n".join(lines) + "\n")


def log_text(n: int, *, gbs: int = 512, ms: float = 9000.0, rng: random.Random | None = None) -> str:
    rng = rng or random.Random(0)
    return "".join(f" [2026-01-01 00:00:00] iteration {i:8d}/{n:8d} | consumed samples: {i * gbs:12d} | elapsed time "
                   f"per iteration (ms): {ms * (1 + rng.random() / 100):.1f} | throughput per GPU (TFLOP/s/GPU): "
                   f"400.0 | learning rate: 1.0E-05 | global batch size: {gbs:5d} | lm loss: 1.0E+01 |\n"
                   for i in range(1, n + 1))


def _secret(rng: random.Random) -> str:
    """A credential-shaped value (a URL with a password, or a password with punctuation)."""
    word = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(12))
    return rng.choice((f"postgres://svc:{word}@db.internal:5432/prod", f"{word}!@#$", f"mysql://root:{word}@h/x",
                       f"S3cr3t-{word}:{word[::-1]}"))


def _variable(rng: random.Random) -> str:
    """A variable name no credential word list would catch."""
    return rng.choice(("PGPASSWORD", "MYSQL_PWD", "DATABASE_URL", "REDIS_URI", "CONN", "DSN", "ZK_AUTHZ")) + \
        rng.choice(("", "_2", "_X"))


# ------------------------------------------------------------------------------------------------------- families
def yaml_features(rng: random.Random, folder: Path) -> Case:
    recipe = _copy_recipe(folder, rng.choice(BASE_RECIPES))
    where = rng.choice(("recipe", "override", "preset", "cli", "env", "comment", "merge", "tag", "documents",
                        "implicit-date", "bomb"))
    argv = [rng.choice(("recipe", "project", "compare")), str(recipe)]
    env: dict[str, str] = {}
    if where == "recipe":
        recipe.write_text(f"a: {SELF_ALIAS}\n" + recipe.read_text())
    elif where == "override":
        _override(recipe, f"{rng.choice(('micro_batch_size', 'foo', 'num_layers'))}: {SELF_ALIAS}")
    elif where == "preset":
        preset = rng.choice(_presets(folder))
        preset.write_text(preset.read_text() + f"\nzz_alias: {SELF_ALIAS}\n")
    elif where == "cli":
        argv.append(f"{rng.choice(('micro_batch_size', 'foo'))}={rng.choice((SELF_ALIAS, '&a {b: *a}', '*a'))}")
    elif where == "env":
        env["HOSTILE_V"] = rng.choice((SELF_ALIAS, "&a {<<: *a}", "!!timestamp 99999-01-01", "[" * 500))
        _override(recipe, f"{rng.choice(('micro_batch_size', 'seq_length', 'foo'))}: ${{HOSTILE_V}}")
    elif where == "comment":
        _directive(recipe, rng.choice((SELF_ALIAS, "{<<: *x}", "!!binary ===", "{", "{cluster: &c [*c]}")))
    elif where == "merge":
        _override(recipe, rng.choice(("base: &b {x: 1}\n      merged: {<<: *b, y: 2}", "m: &m {<<: *m}",
                                      "m: {<<: [*nope]}", "m: {<<: 3}")))
    elif where == "tag":
        value = rng.choice(("!!timestamp 99999-01-01", "!!timestamp 2024-13-45", "!!binary ===", "!!set {a, b}",
                            "!!omap [a: 1]", "!!python/object:os.system {}", "!!float abc", "!!int 0xzz",
                            f"!!int {'9' * 5000}", "!!str 3", "!!null x", "!!bool maybe"))
        if rng.random() < 0.5:
            _override(recipe, f"{rng.choice(('micro_batch_size', 'exp_tag', 'train_iters'))}: {value}")
        else:
            argv.append(f"{rng.choice(('micro_batch_size', 'foo'))}={value}")
    elif where == "documents":
        recipe.write_text(recipe.read_text() + rng.choice(("\n---\nb: *a\n", "\n---\n", "\n...\n---\nx: 1\n")))
    elif where == "implicit-date":
        _replace(recipe, "exp_name:", "exp_name: 2024-01-01\nold_exp_name:")
    else:
        levels = rng.randint(3, 9)
        chain = "l0: &l0 [a, a, a, a, a, a, a, a, a, a]\n" + "".join(
            f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, levels + 1))
        recipe.write_text(chain + recipe.read_text())
    if argv[0] == "recipe":
        argv.insert(1, "show")
    elif argv[0] == "compare":
        argv = ["compare", str(recipe), "micro_batch_size=1", *argv[2:]]
    return Case(f"yaml/{where}", argv, folder, inputs=[recipe, *_presets(folder)], env=env)


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


def fs_shapes(rng: random.Random, folder: Path) -> Case:
    recipe = _copy_recipe(folder)
    shape = rng.choice(("fifo", "dev", "folder", "loop", "dangling", "empty", "sparse", "binary"))
    target = rng.choice(("recipe", "preset", "extends", "log", "store", "suite", "resume", "baseline"))
    odd = folder / f"odd-{shape}.yaml"
    if shape == "fifo":
        _fifo(odd)
    elif shape == "dev":
        odd = Path(rng.choice(("/dev/zero", "/dev/urandom", "/dev/null")))
    elif shape == "folder":
        odd.mkdir()
    elif shape == "loop":
        odd.symlink_to(odd.name)
    elif shape == "dangling":
        odd.symlink_to("nowhere/at/all.yaml")
    elif shape == "empty":
        odd.write_text("")
    elif shape == "sparse":
        _sparse(odd, rng.choice((5 << 20, 1 << 30, 1 << 40)))
    else:
        odd.write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    inputs = [recipe, *_presets(folder)]
    if target == "recipe":
        argv = [rng.choice(("project", "recipe")), str(odd)]
        if argv[0] == "recipe":
            argv.insert(1, "show")
    elif target == "preset":
        preset = _presets(folder)[0]
        preset.unlink()
        preset.symlink_to(odd)
        argv = ["project", str(recipe)]
        inputs = [recipe]
    elif target == "extends":
        recipe.write_text(f"extends: [{odd.name if odd.parent == folder else odd}]\n" + recipe.read_text())
        argv = ["recipe", "show", str(recipe)]
    elif target == "log":
        argv = ["calibrate", str(recipe), str(odd), "--analytic", "--dry-run"]
    elif target == "store":
        argv = ["project", str(recipe), "--store", str(odd)]
    elif target == "suite":
        argv = ["ci", str(odd)]
    elif target == "resume":
        argv = ["tune", str(recipe), "--resume", str(odd), "--budget", "2", "--no-regret"]
    else:
        suite = folder / "suite.yaml"
        suite.write_text(f"suite: s\nentries:\n  - recipe: {recipe.name}\n")
        argv = ["ci", str(suite), "--baseline", str(odd)]
    return Case(f"fs/{shape}-as-{target}", argv, folder, inputs=inputs)


OUTPUT_FLAGS = (
    ("project", "--html"), ("project", "--trace"), ("project", "--json"), ("compare", "--html"),
    ("train", "--html"), ("calibrate", "--json"), ("bench", "--export"), ("tune", "--log"), ("tune", "--out"),
    ("tune", "--json"), ("ci", "--junit"), ("ci", "--markdown"), ("ci", "--json"), ("bench", "--out"),
)


def outputs_at_inputs(rng: random.Random, folder: Path) -> Case:
    recipe = _copy_recipe(folder)
    log = folder / "train.log"
    log.write_text(log_text(20, rng=rng))
    suite = folder / "suite.yaml"
    suite.write_text(f"suite: s\nentries:\n  - recipe: {recipe.name}\n")
    command, flag = rng.choice(OUTPUT_FLAGS)
    victims = {"recipe": recipe, "preset": rng.choice(_presets(folder)), "log": log, "suite": suite}
    readable = {"calibrate": ("recipe", "preset", "log"), "ci": ("suite", "recipe", "preset")}.get(
        command, ("recipe", "preset"))  # what each command reads
    victim_name = rng.choice(readable)
    victim = victims[victim_name]
    how = rng.choice(("direct", "symlink", "hardlink", "relative"))
    if how == "symlink":
        out = folder / "out.link"
        out.symlink_to(victim)
    elif how == "hardlink":
        out = folder / "out.hard"
        os.link(victim, out)
    elif how == "relative":
        out = folder / "models" / ".." / victim.relative_to(folder)
    else:
        out = victim
    argv = {
        "project": ["project", str(recipe), flag, str(out)],
        "compare": ["compare", str(recipe), "micro_batch_size=1", flag, str(out)],
        "train": ["train", "--config", str(recipe), "--projection-only", "--analytic", flag, str(out)],
        "calibrate": ["calibrate", str(recipe), str(log), "--analytic", "--dry-run", flag, str(out)],
        "bench": ["bench", str(recipe), flag, str(out), *(["--out", str(folder / "s.sqlite")] if flag == "--export"
                                                           else [])],
        "tune": ["tune", str(recipe), flag, str(out), "--budget", "2", "--no-regret"],
        "ci": ["ci", str(suite), flag, str(out), "--update-baseline", "--baseline", str(folder / "b.json")],
    }[command]
    return Case(f"out/{command}{flag}-at-{victim_name}-{how}", argv, folder,
                inputs=[recipe, log, suite, *_presets(folder)])


def extends_trees(rng: random.Random, folder: Path) -> Case:
    recipe = _copy_recipe(folder)
    kind = rng.choice(("repeats", "diamond", "cycle", "self", "loop", "deep", "bad-entry", "absolute"))
    n = rng.choice((2, 50, 300, 3000))
    if kind == "repeats":
        (folder / "c.yaml").write_text("zz_c: 1\n")
        (folder / "b.yaml").write_text(f"extends: [{', '.join(['c.yaml'] * n)}]\nzz_b: 1\n")
        (folder / "a.yaml").write_text(f"extends: [{', '.join(['b.yaml'] * n)}]\nzz_a: 1\n")
        head = "extends: [a.yaml]\n"
    elif kind == "diamond":
        for i in range(12):
            (folder / f"d{i}.yaml").write_text(f"extends: [d{i + 1}.yaml, d{i + 1}.yaml]\nzz{i}: 1\n")
        (folder / "d12.yaml").write_text("zz12: 1\n")
        head = "extends: [d0.yaml]\n"
    elif kind == "cycle":
        (folder / "a.yaml").write_text("extends: [b.yaml]\n")
        (folder / "b.yaml").write_text("extends: [a.yaml]\n")
        head = "extends: [a.yaml]\n"
    elif kind == "self":
        head = "extends: [recipe.yaml]\n"
    elif kind == "loop":
        (folder / "l1.yaml").symlink_to("l2.yaml")
        (folder / "l2.yaml").symlink_to("l1.yaml")
        head = "extends: [l1.yaml]\n"
    elif kind == "deep":
        for i in range(min(n, 400)):
            (folder / f"c{i}.yaml").write_text(f"extends: [c{i + 1}.yaml]\n")
        head = "extends: [c0.yaml]\n"
    elif kind == "bad-entry":
        head = rng.choice(("extends: 3\n", "extends: [1, 2]\n", "extends: {a: b}\n", "extends: [null]\n",
                           "extends: ['']\n", f"extends: ['{'x' * 5000}']\n", "extends: ['\\0']\n"))
    else:
        head = rng.choice(("extends: [/dev/zero]\n", "extends: [/]\n", "extends: [/etc/passwd]\n"))
    recipe.write_text(head + recipe.read_text())
    argv = [*rng.choice((["recipe", "show"], ["project"])), str(recipe)]
    inputs = [recipe, *_presets(folder), *(p for p in folder.glob("*.yaml") if p.is_file() and not p.is_symlink())]
    return Case(f"extends/{kind}", argv, folder, inputs=inputs)


def _db(path: Path, statements: list[str]) -> None:
    db = sqlite3.connect(path)
    for sql in statements:
        db.execute(sql)
    db.commit()
    db.close()


def stores(rng: random.Random, folder: Path) -> Case:
    recipe = _copy_recipe(folder)
    kind = rng.choice(("corrupt-default", "text-default", "text", "folder", "other-layout", "not-json",
                       "truncated", "read-only"))
    cache = folder / "cache"
    cache.mkdir()
    default = cache / "timings.sqlite"
    given = folder / "given.sqlite"
    env = {"PRIMUS_EXT_CACHE": str(cache)}
    inputs = [recipe, *_presets(folder)]
    store_flag: list[str] = []
    if kind == "corrupt-default":
        default.write_bytes(b"SQLite format 3\x00" + bytes(rng.randrange(256) for _ in range(2048)))
    elif kind == "text-default":
        default.write_text("not a database\n")
    elif kind == "text":
        given.write_text(rng.choice(("not a database\n", '{"table": "layer_costs"}\n', "\x00" * 100)))
        store_flag, inputs = ["--store", str(given)], [*inputs, given]
    elif kind == "folder":
        given.mkdir()
        store_flag = ["--store", str(given)]
    elif kind == "other-layout":
        _db(given, ["CREATE TABLE calibrations (x INTEGER)", "INSERT INTO calibrations VALUES (1)"])
        store_flag, inputs = ["--store", str(given)], [*inputs, given]
    elif kind == "not-json":
        _db(default, ["CREATE TABLE calibrations (key TEXT, model TEXT, gpu TEXT, precision TEXT, date TEXT, "
                      "host TEXT, record TEXT, PRIMARY KEY (key))",
                      "INSERT INTO calibrations VALUES ('k', 'm', 'g', 'bf16', '', '', '{cut')"])
    elif kind == "truncated":
        _db(given, ["CREATE TABLE layer_costs (kind TEXT)"] + [f"INSERT INTO layer_costs VALUES ('{i}')"
                                                               for i in range(200)])
        data = given.read_bytes()
        given.write_bytes(data[: len(data) // 2])
        store_flag, inputs = ["--store", str(given)], [*inputs, given]
    else:
        _db(given, ["CREATE TABLE t (x INTEGER)"])
        given.chmod(0o444)
        store_flag, inputs = ["--store", str(given)], [*inputs, given]
    log = folder / "train.log"
    log.write_text(log_text(20, rng=rng))
    command = rng.choice(("project", "calibrate", "calibrate-list", "tune", "compare"))
    argv = {"project": ["project", str(recipe), *store_flag],
            "calibrate": ["calibrate", str(recipe), str(log), *store_flag],
            "calibrate-list": ["calibrate", "--list", *store_flag],
            "tune": ["tune", str(recipe), "--budget", "2", "--no-regret", *store_flag],
            "compare": ["compare", str(recipe), "micro_batch_size=1", *store_flag]}[command]
    if command == "calibrate" and kind in ("text", "other-layout", "truncated", "read-only"):
        inputs = [p for p in inputs if p != given]  # calibrate writes its record into the store it was given
    return Case(f"store/{kind}-{command}", argv, folder, inputs=[*inputs, log], env=env)


def logs(rng: random.Random, folder: Path) -> Case:
    recipe = _copy_recipe(folder)
    log = folder / "train.log"
    kind = rng.choice(("long", "restarts", "long-lines", "mfu", "pipes", "cr", "bytes", "slow-half", "sparse-tail",
                       "ranks"))
    n = rng.choice((100, 5_000, 50_000, 150_000))
    if kind == "long":
        log.write_text(log_text(n, rng=rng))
    elif kind == "restarts":
        log.write_text("".join(log_text(3, rng=rng) for _ in range(n // 3)))
    elif kind == "long-lines":
        log.write_text(log_text(10, rng=rng) + ("x" * rng.choice((70_000, 3_000_000)) + "\n") * 3 + log_text(10))
    elif kind == "mfu":
        log.write_text(log_text(5, rng=rng) + (" iteration 6/9 | elapsed time per iteration (ms): 1.0 | x: "
                                               + "MFU " * 4000 + "\n") * 200)
    elif kind == "pipes":
        log.write_text(log_text(5, rng=rng) + (" iteration 6/9 | elapsed time per iteration (ms): 1.0 "
                                               + "| a: 1 " * 3000 + "\n") * 200)
    elif kind == "cr":
        log.write_text(log_text(min(n, 20_000), rng=rng).replace("\n", "\r"))
    elif kind == "bytes":
        log.write_bytes(log_text(200, rng=rng).encode() + bytes(rng.randrange(256) for _ in range(100_000)))
    elif kind == "slow-half":
        log.write_text(log_text(n // 2, ms=30000.0, rng=rng) + log_text(n // 2, rng=rng).replace(
            f"/{n // 2:8d}", f"/{n // 2:8d}"))
    elif kind == "sparse-tail":
        log.write_text(log_text(50, rng=rng))
        with open(log, "ab") as fh:
            fh.truncate(log.stat().st_size + rng.choice((1 << 30, 1 << 36)))
    else:
        log.write_text("".join(f"[rank-{r}/8] " + line + "\n" for line in log_text(min(n, 20_000)).splitlines()
                               for r in range(rng.choice((1, 8)))))
    argv = ["calibrate", str(recipe), str(log), "--analytic", "--dry-run"]
    return Case(f"log/{kind}", argv, folder, inputs=[recipe, log, *_presets(folder)])


def secrets(rng: random.Random, folder: Path) -> Case:
    recipe = _copy_recipe(folder, rng.choice(BASE_RECIPES))
    name, value = _variable(rng), _secret(rng)
    ref = rng.choice((f"${{{name}}}", f"${{{name}:fallback}}", f"pre-${{{name}}}-post"))
    where = rng.choice(("exp_name", "workspace", "work_group", "data_path", "unknown", "number", "preset",
                        "comment", "tokenizer"))
    if where in ("exp_name", "workspace", "work_group"):
        text = recipe.read_text()
        lines = [f"{where}: {ref}" if line.startswith(f"{where}:") else line for line in text.splitlines()]
        recipe.write_text("\n".join(lines) + "\n")
    elif where == "data_path":
        _override(recipe, f"data_path: {ref}")
    elif where == "unknown":
        _override(recipe, f"zz_connection: {ref}")
    elif where == "number":
        _override(recipe, f"micro_batch_size: {ref}")
    elif where == "preset":
        _replace(recipe, "    model: ", f"    model: {ref}\n    old_model: ")
    elif where == "comment":
        _directive(recipe, f"{{cluster: {ref}}}")
    else:
        _override(recipe, f"tokenizer_model: {ref}")
    command = rng.choice(("recipe-show", "recipe-json", "project", "project-json", "train", "tune", "compare",
                          "memory"))
    out = folder / "out.json"
    argv = {"recipe-show": ["recipe", "show", str(recipe)], "recipe-json": ["recipe", "show", str(recipe), "--json"],
            "project": ["project", str(recipe)], "project-json": ["project", str(recipe), "--json", str(out)],
            "train": ["train", "--config", str(recipe), "--projection-only", "--analytic"],
            "tune": ["tune", str(recipe), "--budget", "2", "--no-regret", "--json", str(out)],
            "compare": ["compare", str(recipe), "micro_batch_size=1", "--html", str(folder / "c.html")],
            "memory": ["project", str(recipe), "--memory-only", "--json", "-"]}[command]
    return Case(f"secret/{where}-{command}", argv, folder, inputs=[recipe, *_presets(folder)], secrets=[value],
                env={name: value})


def _backups_keep_the_original(case: Case) -> list[str]:
    recipe = case.folder / "recipe.yaml"
    original = (case.folder / ".original").read_text()
    backups = sorted(case.folder.glob("recipe.yaml.bak*"))
    texts = [b.read_text() for b in backups]
    problems = []
    if original not in texts and recipe.read_text() != original:
        problems.append("the original recipe is in no backup")
    if len(set(map(str, backups))) != len(backups):
        problems.append("two applies shared a backup name")
    return problems


def concurrency(rng: random.Random, folder: Path) -> Case:
    recipe = _copy_recipe(folder)
    (folder / ".original").write_text(recipe.read_text())
    argv = ["tune", str(recipe), "--apply", "--budget", str(rng.choice((2, 4))), "--no-regret",
            "--seed", str(rng.randrange(100))]
    return Case("race/tune-apply", argv, folder, inputs=[*_presets(folder)], concurrent=2,
                after=_backups_keep_the_original)


FAMILIES: dict[str, Callable[[random.Random, Path], Case]] = {
    "yaml": yaml_features, "fs": fs_shapes, "out": outputs_at_inputs, "extends": extends_trees, "store": stores,
    "log": logs, "secret": secrets, "race": concurrency,
}
WEIGHTS = {"yaml": 3, "fs": 2, "out": 3, "extends": 2, "store": 2, "log": 2, "secret": 3, "race": 1}


def generate(rng: random.Random, folder: Path) -> Case:
    """One generated case, its files in ``folder`` (empty, created by the caller)."""
    family = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    return FAMILIES[family](rng, folder)


__all__ = ["FAMILIES", "Case", "generate", "log_text"]
