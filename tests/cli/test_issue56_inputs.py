"""Issue 56 part 3: every file a command reads is an input no output flag may replace, through symlinked folders and
hard links, and a refusal writes nothing at all (not the outputs before the refused one either).

    PYTHONPATH=$PWD python -m pytest -q tests/cli/test_issue56_inputs.py

One test per surface: a GPU profile in ``$PRIMUS_EXT_PROFILES`` (through a symlinked folder), a suite, a baseline,
a validation CSV, a training log, an ``extends:`` parent, a hard link. Each refusal: exit 2, a sentence naming the
flag and the input, the input's bytes unchanged, no output file created.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from tiny import tiny_recipe

from primus_ext.cli import main

REPO = Path(__file__).resolve().parents[2]
RECIPE = tiny_recipe(micro_batch_size=1, global_batch_size=64, tensor_model_parallel_size=1)


@pytest.fixture
def ci_folder(tmp_path, monkeypatch):
    """A suite of one entry on the profile ``myh100`` of ``$PRIMUS_EXT_PROFILES`` (``link`` -> that folder), and
    its recorded baseline."""
    monkeypatch.chdir(tmp_path)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    shutil.copy(REPO / "primus_ext" / "hardware" / "profiles" / "h100.yaml", profiles / "myh100.yaml")
    (tmp_path / "link").symlink_to(profiles)
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(profiles))
    (tmp_path / "tiny.yaml").write_text(RECIPE)
    (tmp_path / "suite.yaml").write_text("suite: unit\nentries:\n  - recipe: tiny.yaml\n    cluster: myh100\n"
                                         "    nodes: 1\n")
    assert main(["ci", "suite.yaml", "--baseline", "baseline.json", "--update-baseline"]) == 0
    return tmp_path


def _refused(capsys, victim: Path, before: bytes, flag: str, *unwritten: Path) -> None:
    err = capsys.readouterr().err
    assert f"{flag}: is " in err and "an input of this command" in err and "Traceback" not in err
    assert victim.read_bytes() == before
    for path in unwritten:
        assert not path.exists(), f"{path} written although the command was refused"


def test_a_profile_through_a_symlinked_folder_refuses_every_output(ci_folder, capsys):
    """The profile is read only when the entry runs: --junit (fine) must not be written before --markdown (the
    profile) is refused."""
    profile = ci_folder / "profiles" / "myh100.yaml"
    before = profile.read_bytes()
    assert main(["ci", "suite.yaml", "--baseline", "baseline.json", "--junit", "ok.xml",
                 "--markdown", "link/myh100.yaml"]) == 2
    _refused(capsys, profile, before, "--markdown", ci_folder / "ok.xml")


def test_a_baseline_to_update_that_is_an_input_is_named_by_its_flag(ci_folder, capsys):
    profile = ci_folder / "profiles" / "myh100.yaml"
    before = profile.read_bytes()
    assert main(["ci", "suite.yaml", "--baseline", "link/myh100.yaml", "--update-baseline",
                 "--junit", "ok.xml"]) == 2
    _refused(capsys, profile, before, "--baseline", ci_folder / "ok.xml")


def test_a_suite_through_a_hard_link(ci_folder, capsys):
    os.link(ci_folder / "suite.yaml", ci_folder / "same.md")
    before = (ci_folder / "suite.yaml").read_bytes()
    assert main(["ci", "suite.yaml", "--baseline", "baseline.json", "--markdown", "same.md"]) == 2
    _refused(capsys, ci_folder / "suite.yaml", before, "--markdown")


def test_a_baseline_through_a_hard_link(ci_folder, capsys):
    os.link(ci_folder / "baseline.json", ci_folder / "same.xml")
    before = (ci_folder / "baseline.json").read_bytes()
    assert main(["ci", "suite.yaml", "--baseline", "baseline.json", "--junit", "same.xml"]) == 2
    _refused(capsys, ci_folder / "baseline.json", before, "--junit")


ARCH = ("name,num_layers,hidden,ffn_hidden,num_heads,num_kv_heads,vocab,num_experts,topk,moe_ffn_hidden,"
        "shared_experts,first_k_dense,mla(yes/no),notes\nM,8,1024,4096,16,4,32000,,,,,,no,\n")
RUNS = ("source,source_date,model,seq_len,precision,gpu,num_gpus,tp,pp,vpp,cp,ep,etp,dp,mbs,gbs,extra_flags,"
        "tokens_per_sec_per_gpu,tflops_per_gpu,mfu,step_time_s,notes\nS,2025,M,4096,BF16,H100,16,1,1,,1,,,16,1,64,,"
        "20000,,,,\n")


def _log_line(i: int, total: int = 20, gbs: int = 64) -> str:
    """One iteration line as Megatron prints it (megatron/training/training.py, core_v0.16.1)."""
    return (f" [2025-01-01 00:00:{i:02d}.000000] iteration {i:8d}/{total:8d} | consumed samples: {i * gbs:12d} |"
            f" elapsed time per iteration (ms): 900.0 | learning rate: 1.000000E-05 | global batch size: {gbs:5d} |"
            " lm loss: 1.000000E+01 | loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:   0 |"
            " number of nan iterations:   0 |\n")


def test_a_validation_csv_through_a_symlinked_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "archs.csv").write_text(ARCH)
    (tmp_path / "data" / "runs.csv").write_text(RUNS)
    (tmp_path / "alias").symlink_to(tmp_path / "data")
    before = (tmp_path / "data" / "archs.csv").read_bytes()
    assert main(["validate", "data/runs.csv", "--archs", "data/archs.csv", "--json", "alias/archs.csv"]) == 2
    _refused(capsys, tmp_path / "data" / "archs.csv", before, "--json")


def test_a_training_log_through_a_hard_link(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(RECIPE)
    (tmp_path / "run.log").write_text("".join(_log_line(i) for i in range(1, 21)))
    os.link(tmp_path / "run.log", tmp_path / "result.json")
    before = (tmp_path / "run.log").read_bytes()
    assert main(["calibrate", "tiny.yaml", "run.log", "--analytic", "--cluster", "h100", "--json",
                 "result.json"]) == 2
    _refused(capsys, tmp_path / "run.log", before, "--json")


@pytest.mark.parametrize("flag", ["--html", "--trace"])
def test_an_extends_parent_through_a_hard_link(tmp_path, monkeypatch, capsys, flag):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "parent.yaml").write_text(RECIPE)
    (tmp_path / "child.yaml").write_text("extends: [parent.yaml]\nmicro_batch_size: 2\n")
    os.link(tmp_path / "parent.yaml", tmp_path / "report.out")
    before = (tmp_path / "parent.yaml").read_bytes()
    assert main(["project", "child.yaml", "--analytic", "--cluster", "h100", "--json", "ok.json",
                 flag, "report.out"]) == 2
    _refused(capsys, tmp_path / "parent.yaml", before, flag, tmp_path / "ok.json")


def test_a_profile_is_the_one_of_this_command_not_of_an_earlier_one_in_the_process(tmp_path, monkeypatch, capsys):
    """Two commands in one process (the tests, a campaign), each with its own ``$PRIMUS_EXT_PROFILES``: the second
    reads, projects with and protects its own ``myh100.yaml``, not the file the first one read."""
    import json
    import re

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(RECIPE)
    text = (REPO / "primus_ext" / "hardware" / "profiles" / "h100.yaml").read_text()
    step = {}
    for name, tflops in (("one", 989), ("two", 400)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "myh100.yaml").write_text(re.sub(r"bf16_dense_tflops: *[0-9.]+",
                                                            f"bf16_dense_tflops: {tflops}", text))
        monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(tmp_path / name))
        assert main(["project", "tiny.yaml", "--analytic", "--cluster", "myh100", "--json", "-"]) == 0
        step[name] = json.loads(capsys.readouterr().out)["step_time_s"]
    assert step["two"] > step["one"]  # the slower GPU of the second folder
    before = (tmp_path / "two" / "myh100.yaml").read_bytes()
    assert main(["project", "tiny.yaml", "--analytic", "--cluster", "myh100", "--html", "two/myh100.yaml"]) == 2
    _refused(capsys, tmp_path / "two" / "myh100.yaml", before, "--html")


@pytest.mark.parametrize(("flag", "name"), [("--html", "kernel_curves.yaml"), ("--trace", "host_time.yaml"),
                                            ("--html", "families.yaml")])
def test_the_shipped_data_a_projection_reads_is_an_input(tmp_path, monkeypatch, capsys, flag, name):
    """The kernel curves, host times and GPU families a projection reads (parsed once per process, and the parts
    of a projection memoised: a second command may not read them at all), through a symlinked folder; noted by every
    command that loads a GPU profile."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(RECIPE)
    (tmp_path / "data").symlink_to(REPO / "primus_ext" / "hardware")
    shipped = REPO / "primus_ext" / "hardware" / name
    before = shipped.read_bytes()
    try:
        assert main(["project", "tiny.yaml", "--analytic", "--cluster", "mi300x", flag, f"data/{name}"]) == 2
        _refused(capsys, shipped, before, flag)
    finally:  # a failure must not leave the checkout's data replaced
        if shipped.read_bytes() != before:
            shipped.write_bytes(before)
