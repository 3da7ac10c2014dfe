"""``primus-ext profile pin``: a kernel sweep's efficiencies into the GPU family's profiles, end to end."""

import json
from pathlib import Path

import pytest
from fit_rows import fit_inputs

from primus_ext.cli import main
from primus_ext.hardware import load_gpu

H200_SWEEP = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels" / "h200-2026-12-04-sweep.json"


def _sweep(tmp_path: Path, device: str, tflops: float = 1000.0) -> Path:
    row = {"op": "attention", "backend": "cudnn", "heads": 32, "kv_heads": 32, "dim": 128, "vdim": 128,
           "seq": 4096, "pass": "fwd+bwd", "ms": 1.0, "tflops": tflops}
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"device": device, "attention": [row]}))
    return path


def test_dry_run_prints_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["profile", "pin", str(H200_SWEEP)]) == 0
    out = capsys.readouterr().out
    assert "family hopper: h100, h20, h200" in out and "attention  0.4327" in out and "nothing written" in out
    assert list(tmp_path.iterdir()) == []


def test_pin_writes_the_family_and_names_the_next_step(tmp_path, capsys, monkeypatch):
    out_dir = tmp_path / "profiles"
    assert main(["profile", "pin", str(_sweep(tmp_path, "NVIDIA GB200")), "--out", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    assert "validate" in printed and "--fit" in printed
    assert {p.stem for p in out_dir.glob("*.yaml")} >= {"b200", "gb200"}
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(out_dir))
    load_gpu.cache_clear()
    try:
        assert load_gpu("b200").efficiency.attention == load_gpu("gb200").efficiency.attention == 0.4
        assert load_gpu("b200").efficiency.measured == ("attention",)
    finally:
        load_gpu.cache_clear()


@pytest.mark.parametrize("device, extra, message", [
    ("NVIDIA Graphics Device", [], "names no hardware profile"),
    ("NVIDIA Graphics Device", ["--attention-tokens", "2048"], "2 problem(s)"),  # every problem at once
    ("NVIDIA H200", ["--gpu", "b200"], "not on a GPU of family blackwell"),
    ("NVIDIA B200", ["--attention-tokens", "2048"], "no cudnn fwd+bwd row"),
    ("NVIDIA B200", ["--gpu", "tpu-v9"], "unknown GPU"),
])
def test_bad_input_exits_2_without_writing(tmp_path, capsys, device, extra, message):
    out_dir = tmp_path / "profiles"
    assert main(["profile", "pin", str(_sweep(tmp_path, device)), "--out", str(out_dir), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out_dir.exists()


def test_gpu_names_the_profile_of_an_unrecognised_device(tmp_path, capsys):
    assert main(["profile", "pin", str(_sweep(tmp_path, "NVIDIA Graphics Device")), "--gpu", "B200"]) == 0
    assert "family blackwell" in capsys.readouterr().out


def test_an_unwritable_out_exits_2(tmp_path, capsys):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert main(["profile", "pin", str(H200_SWEEP), "--out", str(blocked)]) == 2
    err = capsys.readouterr().err
    assert "cannot write profiles" in err and "Traceback" not in err


def test_a_refit_keeps_the_pinned_value_and_its_source(tmp_path, monkeypatch):
    """pin, then `validate --fit --write-profiles` into the same folder (six H100 rows: a Hopper fit): the value
    stays as measured, its comment stays above the refitted block, and the fit says it did not fit it."""
    out_dir = tmp_path / "profiles"
    assert main(["profile", "pin", str(_sweep(tmp_path, "NVIDIA H200", tflops=400.0)), "--out", str(out_dir)]) == 0
    fit = fit_inputs(tmp_path)
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(out_dir))
    load_gpu.cache_clear()
    try:
        before = load_gpu("h100").efficiency
        assert main([*fit, "--write-profiles", str(out_dir)]) == 0
        load_gpu.cache_clear()
        for name in ("h100", "h200"):
            eff = load_gpu(name).efficiency
            assert eff.attention == round(400 / 989, 4) and eff.measured == ("attention",)
            assert eff.calibration.startswith("fitted ") and "on 6 H100 rows" in eff.calibration
            assert eff.calibration.endswith(f"; attention {eff.attention:.4g} as measured (not fitted)")
            text = (out_dir / f"{name}.yaml").read_text()
            assert text.count(f"# pinned efficiency.attention: {eff.attention:.4g} measured on NVIDIA H200") == 1
        assert load_gpu("h100").efficiency.gemm_max != before.gemm_max  # the rest was refitted
    finally:
        load_gpu.cache_clear()
