"""Issue 57, parts 1-3: nothing written through a planted symlink, over a GPU profile the command reads, or over
what ``/dev/stdout`` leads to; a write cut short by a size limit leaves nothing behind.

Each test is a reproducer of the issue run as the issue ran it: real symlinks, a real ``RLIMIT_FSIZE`` in a child
process, a real ``>> build.log`` redirection through ``sh -c``."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fit_rows import fit_inputs

from primus_ext.cli import main
from primus_ext.hardware import PROFILE_DIR, load_gpu

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "llama3.1_8B-pretrain.yaml"
TINY = ("tensor_model_parallel_size: 1\npipeline_model_parallel_size: 1\nnum_layers: 4\nhidden_size: 1024\n"
        "ffn_hidden_size: 4096\nnum_attention_heads: 16\nvocab_size: 32000\nseq_length: 2048\nmicro_batch_size: 1\n"
        "global_batch_size: 64\n")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


# --- part 1: every file created with O_EXCL, at an unpredictable name, swept after a crash -----------------------

def test_write_profiles_never_follows_a_link_planted_at_its_temporary_name(tmp_path: Path) -> None:
    out_dir = tmp_path / "profiles"
    out_dir.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    for name in ("h100", "h200", "h800"):  # the fixed names the old writer used
        (out_dir / f"{name}.yaml.tmp").symlink_to(victim)
    load_gpu.cache_clear()
    try:
        assert main([*fit_inputs(tmp_path), "--write-profiles", str(out_dir)]) == 0
    finally:
        load_gpu.cache_clear()
    assert victim.read_text() == "precious\n"
    written = sorted(out_dir.glob("*.yaml"))
    assert written and all(p.is_file() and not p.is_symlink() for p in written)
    assert not [p for p in out_dir.iterdir() if ".primus-ext-" in p.name]


def test_write_profiles_cut_short_by_a_size_limit_leaves_nothing_and_the_next_run_sweeps(tmp_path: Path) -> None:
    """A real RLIMIT_FSIZE in the child: the first profile's write fails (EFBIG, as a full disk's ENOSPC)."""
    out_dir = tmp_path / "profiles"
    out_dir.mkdir()
    shutil.copy(PROFILE_DIR / "h100.yaml", out_dir / "h100.yaml")
    before = (out_dir / "h100.yaml").read_bytes()
    args = [*fit_inputs(tmp_path), "--write-profiles", str(out_dir)]

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    run = subprocess.run([sys.executable, "-m", "primus_ext", *args], capture_output=True, text=True, env=_env(),
                         preexec_fn=limit, timeout=300)
    assert run.returncode == 2, run.stderr
    assert "nothing was written" in run.stderr and "Traceback" not in run.stderr
    assert (out_dir / "h100.yaml").read_bytes() == before
    assert sorted(p.name for p in out_dir.iterdir()) == ["h100.yaml"]  # no temporary file left
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = out_dir / f".h200.yaml.primus-ext-{int(dead.stdout)}-0123456789abcdef.tmp"  # a SIGKILLed run's
    stale.write_text("half a profile")
    load_gpu.cache_clear()
    try:
        assert main(args) == 0
    finally:
        load_gpu.cache_clear()
    assert not stale.exists()


def test_tune_out_never_writes_through_a_link_at_its_check_copy(tmp_path: Path) -> None:
    """`tune --out B/tuned.yaml`: the pre-check copy (another folder) and the reload probe (beside the output) were
    named `.tuned.yaml.primus-ext-<pid>.check.yaml` and written without O_EXCL; links planted at those names (this
    process's pid) must not be followed."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shutil.copy(RECIPE, a / "recipe.yaml")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (b / f".tuned.yaml.primus-ext-{os.getpid()}.check.yaml").symlink_to(victim)
    code = main(["tune", str(a / "recipe.yaml"), "--cluster", "h100", "--nodes", "1", "--budget", "4",
                 "--no-regret", "--pin", "pp=1", "--out", str(b / "tuned.yaml")])
    assert code == 0
    assert victim.read_text() == "precious\n"
    assert (b / "tuned.yaml").is_file() and not (b / "tuned.yaml").is_symlink()


# --- part 2: a GPU profile (and a suite, a baseline) read by the command is an input no output replaces ----------

@pytest.fixture
def own_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    profile = profiles / "myx.yaml"
    profile.write_text((PROFILE_DIR / "h100.yaml").read_text())
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(profiles))
    load_gpu.cache_clear()
    yield profile
    load_gpu.cache_clear()


@pytest.mark.parametrize("flag", ["--html", "--trace"])
def test_project_output_never_replaces_the_profile_it_read(tmp_path: Path, own_profile: Path, flag: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TINY)
    before = own_profile.read_bytes()
    (tmp_path / "link.out").symlink_to(own_profile)
    for out in (own_profile, tmp_path / "link.out"):
        assert main(["project", str(recipe), "--cluster", "myx", flag, str(out)]) == 2
        assert "an input of this command" in capsys.readouterr().err
    assert own_profile.read_bytes() == before


def test_tune_log_never_appends_into_the_profile(tmp_path: Path, own_profile: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TINY)
    before = own_profile.read_bytes()
    assert main(["tune", str(recipe), "--cluster", "myx", "--budget", "2", "--no-regret",
                 "--log", str(own_profile)]) == 2
    assert "an input of this command" in capsys.readouterr().err
    assert own_profile.read_bytes() == before


@pytest.mark.parametrize("flag", ["--junit", "--markdown", "--baseline"])
def test_ci_outputs_never_replace_the_profile(tmp_path: Path, own_profile: Path, flag: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tiny.yaml").write_text(TINY)
    suite = tmp_path / "suite.yaml"
    suite.write_text("suite: unit\nentries:\n  - recipe: tiny.yaml\n    cluster: myx\n    nodes: 1\n")
    before = own_profile.read_bytes()
    extra = ["--update-baseline"] if flag == "--baseline" else ["--baseline", str(tmp_path / "none.json"),
                                                                "--update-baseline"]
    assert main(["ci", str(suite), flag, str(own_profile), *extra]) == 2
    assert "an input of this command" in capsys.readouterr().err
    assert own_profile.read_bytes() == before


# --- part 3: /dev/stdout is the stream, never the file behind it -------------------------------------------------

def test_json_to_dev_stdout_appends_to_the_log_stdout_leads_to(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TINY)
    log = tmp_path / "build.log"
    log.write_text("step 1 of the build\n")
    cmd = f"{sys.executable} -m primus_ext project {recipe} --cluster h100 --json /dev/stdout >> {log}"
    run = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, env=_env(), timeout=300)
    assert run.returncode == 0, run.stderr
    text = log.read_text()
    assert text.startswith("step 1 of the build\n")
    assert json.loads(text[len("step 1 of the build\n"):])["kind"] == "projection"


def test_json_to_dev_stdout_through_a_pipe(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TINY)
    cmd = f"{sys.executable} -m primus_ext project {recipe} --cluster h100 --json /dev/stdout | cat"
    run = subprocess.run(["sh", "-c", "set -e; " + cmd], capture_output=True, text=True, env=_env(), timeout=300)
    assert run.returncode == 0 and "pipe:[" not in run.stderr, run.stderr
    assert json.loads(run.stdout)["kind"] == "projection"


def test_html_to_dev_stdout_is_written_to_the_stream(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(TINY)
    log = tmp_path / "build.log"
    log.write_text("before\n")
    script = textwrap.dedent(f"""
        {sys.executable} -m primus_ext project {recipe} --cluster h100 --html /dev/stdout >> {log}
    """)
    run = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=_env(), timeout=300)
    assert run.returncode == 0, run.stderr
    text = log.read_text()
    assert text.startswith("before\n") and "<html" in text
