"""Output files: checked before the work, atomic, backups that keep the original, no temporary files left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from primus_ext import files
from primus_ext.errors import RecipeError


def test_backups_keep_the_first_generation(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("v: 0\n")
    for n in range(1, 4):
        files.atomic_write(recipe, f"v: {n}\n")
    assert (tmp_path / "r.yaml.bak").read_text() == "v: 0\n"  # the original, never overwritten
    assert (tmp_path / "r.yaml.bak.2").read_text() == "v: 1\n"
    assert (tmp_path / "r.yaml.bak.3").read_text() == "v: 2\n"
    assert recipe.read_text() == "v: 3\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml", "r.yaml.bak", "r.yaml.bak.2", "r.yaml.bak.3"]


def test_read_only_file_refused_unless_forced(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("v: 0\n")
    recipe.chmod(0o444)
    problem = files.output_problem(recipe, "--apply")
    assert problem is not None and "read-only" in problem.message and "--force" in problem.fix
    assert files.output_problem(recipe, "--apply", replace_read_only=True) is None


def test_names_the_file_system_refuses_are_problems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "too long" in files.output_problem(tmp_path / ("x" * 300)).message
    assert "null byte" in files.output_problem("a\0b").message  # os.path refuses it: a problem, not a ValueError
    assert "does not exist" in files.output_problem(tmp_path / "no" / "x.json").message
    real_access = os.access
    monkeypatch.setattr(files.os, "access", lambda p, mode: False if Path(p) == tmp_path else real_access(p, mode))
    assert "not writable" in files.output_problem(tmp_path / "x.json", "--json").message
    with pytest.raises(RecipeError) as err:
        files.check_outputs(("--json", tmp_path / "x.json"), ("--html", tmp_path / "y.html"), ("--trace", "-"))
    assert [p.path for p in err.value.problems] == ["--json", "--html"]  # every problem at once


def test_temporary_files_of_dead_processes_are_swept(tmp_path: Path) -> None:
    target = tmp_path / "r.yaml"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".r.yaml.primus-ext-{int(dead.stdout)}.check.yaml"
    stale.write_text("left by a SIGKILL")
    mine = files.temp_path(target, "check.yaml")
    mine.write_text("this process's (a live pid)")
    files.atomic_write(target, "v: 1\n")
    assert not stale.exists() and mine.exists()


def test_sigterm_during_a_write_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "r.yaml"
    target.write_text("v: 0\n")
    script = textwrap.dedent(f"""
        import os, time
        from pathlib import Path
        from primus_ext import files
        files.install_signal_exit()
        def slow(fd):
            print("writing", flush=True)
            time.sleep(30)
        os.fsync = slow
        files.atomic_write(Path({str(target)!r}), "v: 1\\n", backup=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    assert any(p.name.startswith(".r.yaml.primus-ext-") for p in tmp_path.iterdir())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM
    time.sleep(0.05)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"] and target.read_text() == "v: 0\n"


# --- issue 47: one output check, one atomic writer, one bounded reader, backups claimed atomically -------------

def test_outputs_refuse_every_input_through_symlinks_and_hard_links(tmp_path: Path) -> None:
    files.forget_inputs()
    recipe = tmp_path / "r.yaml"
    recipe.write_text("v: 0\n")
    (tmp_path / "link.json").symlink_to(recipe)
    os.link(recipe, tmp_path / "hard.html")
    for out in ("r.yaml", "link.json", "hard.html"):
        with pytest.raises(RecipeError, match="an input of this command"):
            files.check_outputs(("--html", tmp_path / out), inputs=[recipe])
    with pytest.raises(RecipeError, match="also the --json output"):
        files.check_outputs(("--json", tmp_path / "a.out"), ("--html", tmp_path / "a.out"))
    files.check_outputs(("--html", tmp_path / "report.html"), inputs=[recipe])  # a new file is fine
    with pytest.raises(RecipeError, match="an input"):  # the writer checks again (presets noted after the check)
        files.write_output(tmp_path / "link.json", "{}")
    assert recipe.read_text() == "v: 0\n"
    files.forget_inputs()


def test_write_output_is_atomic_and_keeps_the_old_file_on_failure(tmp_path: Path) -> None:
    files.forget_inputs()
    out = tmp_path / "report.html"
    out.write_text("good report\n")
    with pytest.raises(RuntimeError), files.atomic_output(out) as fh:
        fh.write("half a rep")
        raise RuntimeError("a full disk, say")
    assert out.read_text() == "good report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # no temporary file left
    files.write_output(out, "new report\n")
    assert out.read_text() == "new report\n"
    target = tmp_path / "real.json"
    target.write_text("old")
    (tmp_path / "via.json").symlink_to(target)
    files.write_output(tmp_path / "via.json", "new")  # written through the link; the link stays a link
    assert target.read_text() == "new" and (tmp_path / "via.json").is_symlink()


def test_devices_and_pipes_are_neither_read_nor_written(tmp_path: Path) -> None:
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero"), tmp_path):
        with pytest.raises(files.InputRefused):
            files.read_input(path, max_bytes=10)
    big = tmp_path / "big"
    with open(big, "wb") as fh:
        fh.truncate(1 << 40)  # sparse: refused by its size, not read
    with pytest.raises(files.InputRefused, match="more than"):
        files.read_input(big, max_bytes=1 << 20)
    assert files.output_problem("/dev/null", "--html") is not None  # a replace would swap the device node


def test_concurrent_backups_never_share_a_name(tmp_path: Path) -> None:
    import threading

    recipe = tmp_path / "r.yaml"
    recipe.write_text("original\n")
    taken: list[Path] = []
    barrier = threading.Barrier(8)

    def back_up() -> None:
        barrier.wait()
        taken.append(files.take_backup(recipe))

    threads = [threading.Thread(target=back_up) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(taken)) == 8 and all(p.read_text() == "original\n" for p in taken)
    assert (tmp_path / "r.yaml.bak") in taken
