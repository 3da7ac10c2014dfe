"""The reproducers of issue 47 as hostile cases (``hostile_cases.Case``), one folder each: a 10-byte self-referencing
alias in five positions, every output flag the issue names pointed at the recipe, long / endless logs, repeated
``extends``, the tracebacks (symlink loops, ``!!timestamp``, every store failure), secrets under other names and two
``tune --apply`` at once."""

from __future__ import annotations

from pathlib import Path

from hostile_cases import (
    Case,
    _backups_keep_the_original,
    _copy_recipe,
    _db,
    _directive,
    _fifo,
    _override,
    _presets,
    log_text,
)


def corpus(root: Path) -> list[Case]:
    """Every reproducer of issue 47 as a case, each in its own folder under ``root``."""
    cases: list[Case] = []

    def new(name: str, recipe_name: str = "llama3.1_8B-pretrain.yaml") -> tuple[Path, Path]:
        folder = root / name.replace("/", "_")
        folder.mkdir(parents=True)
        return folder, _copy_recipe(folder, recipe_name)

    def add(name: str, folder: Path, argv: list[str], **kw: object) -> None:
        inputs = kw.pop("inputs", None)
        cases.append(Case(name, argv, folder, inputs=inputs if inputs is not None else  # type: ignore[arg-type]
                          [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()], **kw))  # type: ignore[arg-type]

    # 1. a 10-byte self-referencing alias, through the recipe, a preset, key=value, ${VAR} and the comment
    folder, recipe = new("1-alias-recipe")
    (folder / "s.yaml").write_text("a: &a [*a]\n")
    add("1/alias-recipe", folder, ["recipe", "show", str(folder / "s.yaml")])
    folder, recipe = new("1-alias-preset")
    preset = _presets(folder)[0]
    preset.write_text(preset.read_text() + "\nzz: &a [*a]\n")
    add("1/alias-preset", folder, ["project", str(recipe)])
    folder, recipe = new("1-alias-cli")
    add("1/alias-key=value", folder, ["project", str(recipe), "micro_batch_size=&a [*a]"])
    folder, recipe = new("1-alias-env")
    _override(recipe, "micro_batch_size: ${ALIAS_VALUE}")
    add("1/alias-${VAR}", folder, ["recipe", "show", str(recipe)], env={"ALIAS_VALUE": "&a [*a]"})
    folder, recipe = new("1-alias-comment")
    _directive(recipe, "&a [*a]")
    add("1/alias-comment", folder, ["recipe", "show", str(recipe)])
    # 2. outputs pointed at the recipe (directly or through a symlink)
    log = "train.log"
    for command, flag, link in (("project", "--html", False), ("project", "--trace", False),
                                ("project", "--json", True), ("compare", "--html", False), ("train", "--html", False),
                                ("calibrate", "--json", True), ("bench", "--export", False), ("tune", "--log", False)):
        folder, recipe = new(f"2-{command}{flag}")
        (folder / log).write_text(log_text(20))
        out = recipe
        if link:
            out = folder / "out.json"
            out.symlink_to(recipe)
        argv = {"project": ["project", str(recipe)], "compare": ["compare", str(recipe), "micro_batch_size=1"],
                "train": ["train", "--config", str(recipe), "--projection-only", "--analytic"],
                "calibrate": ["calibrate", str(recipe), str(folder / log), "--analytic"],
                "bench": ["bench", str(recipe), "--out", str(folder / "s.sqlite")],
                "tune": ["tune", str(recipe), "--budget", "2", "--no-regret"]}[command]
        add(f"2/{command} {flag} at the recipe", folder, [*argv, flag, str(out)])
    # 4. the log reader: 10^5 iteration lines, a FIFO, /dev/zero, /dev/urandom
    folder, recipe = new("4-long-log")
    (folder / log).write_text(log_text(100_000))
    add("4/100k iteration lines", folder, ["calibrate", str(recipe), str(folder / log), "--analytic", "--dry-run"])
    for device in ("fifo", "/dev/zero", "/dev/urandom"):
        folder, recipe = new(f"4-{device.strip('/').replace('/', '-')}")
        path = _fifo(folder / "log.fifo") if device == "fifo" else Path(device)
        add(f"4/{device} as the log", folder, ["calibrate", str(recipe), str(path), "--analytic", "--dry-run"],
            inputs=[recipe])
    # 5. two files each listing their parent 300 times
    folder, recipe = new("5-extends-repeats")
    (folder / "c.yaml").write_text("zz_c: 1\n")
    (folder / "b.yaml").write_text(f"extends: [{', '.join(['c.yaml'] * 300)}]\nzz_b: 1\n")
    (folder / "a.yaml").write_text(f"extends: [{', '.join(['b.yaml'] * 300)}]\nzz_a: 1\n")
    recipe.write_text("extends: [a.yaml]\n" + recipe.read_text())
    add("5/extends repeated 300 x 300", folder, ["recipe", "show", str(recipe)])
    # 6. tracebacks: extends through a symlink loop, !!timestamp, every store failure
    folder, recipe = new("6-extends-loop")
    (folder / "loop.yaml").symlink_to("loop.yaml")
    recipe.write_text("extends: [loop.yaml]\n" + recipe.read_text())
    add("6/extends symlink loop", folder, ["recipe", "show", str(recipe)])
    folder, recipe = new("6-timestamp")
    _override(recipe, "zz_when: !!timestamp 99999-01-01")
    add("6/!!timestamp in the recipe", folder, ["recipe", "show", str(recipe)])
    folder, recipe = new("6-timestamp-cli")
    add("6/!!timestamp as key=value", folder, ["project", str(recipe), "micro_batch_size=!!timestamp 99999-01-01"])
    for kind in ("read-only", "corrupt-default", "text", "other-layout", "folder", "not-json"):
        folder, recipe = new(f"6-store-{kind}")
        cache = folder / "cache"
        cache.mkdir()
        store = folder / "given.sqlite"
        flag: list[str] = []
        if kind == "read-only":
            _db(cache / "timings.sqlite", ["CREATE TABLE t (x INTEGER)"])
            (cache / "timings.sqlite").chmod(0o444)
            cache.chmod(0o555)
        elif kind == "corrupt-default":
            (cache / "timings.sqlite").write_bytes(b"SQLite format 3\x00" + b"\xee" * 1000)
        elif kind == "text":
            store.write_text("not a store\n")
            flag = ["--store", str(store)]
        elif kind == "other-layout":
            _db(store, ["CREATE TABLE calibrations (x INTEGER)"])
            flag = ["--store", str(store)]
        elif kind == "folder":
            store.mkdir()
            flag = ["--store", str(store)]
        else:
            _db(cache / "timings.sqlite", ["CREATE TABLE calibrations (key TEXT, model TEXT, gpu TEXT, precision "
                                           "TEXT, date TEXT, host TEXT, record TEXT, PRIMARY KEY (key))",
                                           "INSERT INTO calibrations VALUES ('k', 'm', 'g', 'bf16', '', '', '{x')"])
        add(f"6/store {kind}", folder, ["project", str(recipe), *flag],
            inputs=[recipe, *_presets(folder), *([store] if store.is_file() else [])])
    # 8. secrets under other names
    for command in (["recipe", "show"], ["recipe", "show", "--json"], ["train", "--projection-only", "--analytic"]):
        folder, recipe = new(f"8-secrets-{'-'.join(command)}")
        values = {"PGPASSWORD": "pg-S3cret!x", "MYSQL_PWD": "my:S3cret@y", "DATABASE_URL": "postgres://u:S3cret@h/db"}
        text = recipe.read_text().replace("exp_name: ${PRIMUS_EXP_NAME:llama3.1_8B-pretrain}",
                                          "exp_name: ${PGPASSWORD}")
        recipe.write_text(text.replace("workspace: ${PRIMUS_WORKSPACE:./output}", "workspace: ${DATABASE_URL}"))
        _override(recipe, "zz_db: ${MYSQL_PWD}")
        argv = [*command[:2], str(recipe), *command[2:]] if command[0] == "recipe" else \
            ["train", "--config", str(recipe), *command[1:]]
        add(f"8/secrets: {' '.join(command)}", folder, argv, secrets=list(values.values()), env=values)
    # 9. two tune --apply at once
    folder, recipe = new("9-race")
    (folder / ".original").write_text(recipe.read_text())
    add("9/two tune --apply at once", folder, ["tune", str(recipe), "--apply", "--budget", "2", "--no-regret"],
        inputs=_presets(folder), concurrent=2, after=_backups_keep_the_original)
    return cases


__all__ = ["corpus"]
