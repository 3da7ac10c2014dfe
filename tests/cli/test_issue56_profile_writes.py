"""Issue 56, part 3: the profile writers (``profile pin --out``, ``validate --write-profiles``) treat every file the
command read as an input. A profile is rewritten on purpose; a measurements CSV or a kernel sweep behind
``DIR/<profile>.yaml`` (a symlink: the write goes through it) is refused with exit 2 and nothing written (before,
``files.replace_all`` wrote through the link and replaced the input)."""

from __future__ import annotations

import json
from pathlib import Path

from primus_ext.cli import main
from primus_ext.files.inputs import forget_inputs
from primus_ext.hardware import load_gpu

ARCH = ("name,num_layers,hidden,ffn_hidden,num_heads,num_kv_heads,vocab,num_experts,topk,moe_ffn_hidden,"
        "shared_experts,first_k_dense,mla(yes/no),notes\nM,8,1024,4096,16,4,32000,,,,,,no,\n")
RUNS = ("source,source_date,model,seq_len,precision,gpu,num_gpus,tp,pp,vpp,cp,ep,etp,dp,mbs,gbs,extra_flags,"
        "tokens_per_sec_per_gpu,tflops_per_gpu,mfu,step_time_s,notes\nS,2025,M,4096,BF16,H100,16,1,1,,1,,,16,1,64,,"
        "20000,,,,\n")


def _sweep(tmp_path: Path) -> Path:
    row = {"op": "attention", "backend": "cudnn", "heads": 32, "kv_heads": 32, "dim": 128, "vdim": 128,
           "seq": 4096, "pass": "fwd+bwd", "ms": 1.0, "tflops": 1000.0}
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"device": "NVIDIA GB200", "attention": [row]}))
    return path


def test_profile_pin_refuses_a_profile_that_leads_to_its_sweep(tmp_path, capsys):
    sweep = _sweep(tmp_path)
    before = sweep.read_bytes()
    out = tmp_path / "profiles"
    out.mkdir()
    (out / "b200.yaml").symlink_to(sweep)
    forget_inputs()
    assert main(["profile", "pin", str(sweep), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "an input of this command" in err and "sweep.json" in err and "Traceback" not in err
    assert sweep.read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["b200.yaml"]  # none of the family written, no temporary file


def test_validate_write_profiles_refuses_a_profile_that_leads_to_its_csv_before_the_fit(tmp_path, capsys):
    (tmp_path / "a.csv").write_text(ARCH)
    runs = tmp_path / "r.csv"
    runs.write_text(RUNS)
    out = tmp_path / "profiles"
    out.mkdir()
    (out / "h100.yaml").symlink_to(runs)
    (out / "b200.yaml").hardlink_to(tmp_path / "a.csv")
    forget_inputs()
    code = main(["validate", str(runs), "--archs", str(tmp_path / "a.csv"), "--fit", "--write-profiles", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "2 problem(s)" in err and "r.csv, an input" in err and "a.csv, an input" in err
    assert "fitting" not in err  # refused before a minute of fitting
    assert runs.read_text() == RUNS and (tmp_path / "a.csv").read_text() == ARCH


def test_a_pinned_profile_folder_is_rewritten_in_place(tmp_path, monkeypatch, capsys):
    """The profiles the command read are what it rewrites on purpose: pinning twice into a folder on
    ``$PRIMUS_EXT_PROFILES`` (the second pin reads the first one's files) is not refused."""
    out = tmp_path / "profiles"
    sweep = _sweep(tmp_path)
    assert main(["profile", "pin", str(sweep), "--out", str(out)]) == 0
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(out))
    load_gpu.cache_clear()
    try:
        forget_inputs()
        assert main(["profile", "pin", str(sweep), "--out", str(out)]) == 0
        assert load_gpu("gb200").efficiency.attention == 0.4
    finally:
        load_gpu.cache_clear()
    assert "an input" not in capsys.readouterr().err


def test_a_profile_behind_another_gpus_profile_is_refused(tmp_path, monkeypatch, capsys):
    """Only a target's own profile is rewritten on purpose: ``DIR/b300.yaml`` leading to ``DIR/b200.yaml`` (both read
    by the pin) would write b300's text into b200's file, and the two targets are one file."""
    out = tmp_path / "profiles"
    sweep = _sweep(tmp_path)
    assert main(["profile", "pin", str(sweep), "--out", str(out)]) == 0
    (out / "b300.yaml").unlink()
    (out / "b300.yaml").symlink_to(out / "b200.yaml")
    before = (out / "b200.yaml").read_bytes()
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(out))
    load_gpu.cache_clear()
    try:
        forget_inputs()
        assert main(["profile", "pin", str(sweep), "--out", str(out)]) == 2
    finally:
        load_gpu.cache_clear()
    err = capsys.readouterr().err
    assert "b300.yaml" in err and "Traceback" not in err
    assert (out / "b200.yaml").read_bytes() == before


def test_the_default_archs_csv_is_an_input_before_the_fit(tmp_path, capsys):
    """Without ``--archs``, validate reads ``model_archs.csv`` beside the measurements: a profile target leading to it
    is refused before the fit, not after it."""
    (tmp_path / "model_archs.csv").write_text(ARCH)
    runs = tmp_path / "r.csv"
    runs.write_text(RUNS)
    out = tmp_path / "profiles"
    out.mkdir()
    (out / "h100.yaml").symlink_to(tmp_path / "model_archs.csv")
    forget_inputs()
    code = main(["validate", str(runs), "--fit", "--write-profiles", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "model_archs.csv, an input" in err and "fitting" not in err
    assert (tmp_path / "model_archs.csv").read_text() == ARCH
