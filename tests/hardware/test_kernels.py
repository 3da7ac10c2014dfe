"""Kernel efficiencies read from a GPU kernel sweep and pinned into the GPU family's profiles."""

import json
import re
from pathlib import Path

import pytest
import yaml

from primus_ext.errors import PrimusExtError, RecipeError
from primus_ext.hardware import family_profiles, load_gpu
from primus_ext.hardware.kernels import PIN_NOTE, pin_measured, pin_note, read_sweep, sweep_efficiencies

H200_SWEEP = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels" / "h200-2026-12-04-sweep.json"


def _attention_row(tflops: float, seq: int = 4096, backend: str = "cudnn", **over) -> dict:
    return {"op": "attention", "backend": backend, "heads": 32, "kv_heads": 32, "dim": 128, "vdim": 128,
            "seq": seq, "pass": "fwd+bwd", "ms": 1.0, "tflops": tflops, **over}


def _sweep(tmp_path: Path, device: str = "NVIDIA B200", **extra) -> Path:
    rows = [_attention_row(900.0), _attention_row(1100.0, seq=8192), _attention_row(700.0, backend="flash"),
            _attention_row(2000.0, kv_heads=8), _attention_row(1500.0, **{"pass": "fwd"})]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"device": device, "torch": "2.x", "attention": rows, **extra}))
    return path


def test_committed_h200_sweep_gives_hoppers_stated_attention():
    """The shipped Hopper value is what the pin path reads from its cited source: 428 TFLOP/s over 989."""
    (att,) = sweep_efficiencies(read_sweep(H200_SWEEP), load_gpu("h200"))
    assert att.name == "attention" and 420 < att.measured < 440 and att.peak == 989.0
    for name in ("h100", "h200"):
        assert load_gpu(name).efficiency.measured == ("attention",)
        assert load_gpu(name).efficiency.attention == att.value


def test_reads_the_chosen_row_over_the_profiles_peak(tmp_path):
    """MHA, 128-wide, forward + backward rows only: the GQA and forward-only rows are not the profile's kernel."""
    sweep = read_sweep(_sweep(tmp_path, hbm={"bytes": 1, "ms": 1, "tbps_read_plus_write": 6.16}))
    b200 = load_gpu("b200")
    att, hbm = sweep_efficiencies(sweep, b200, ("attention", "hbm"))
    assert att.value == round(900.0 / 2250.0, 4) and att.measured == 900.0
    (longer,) = sweep_efficiencies(sweep, b200, attention_tokens=8192)
    assert longer.value == round(1100.0 / 2250.0, 4)
    (flash,) = sweep_efficiencies(sweep, b200, attention_backend="flash")
    assert flash.value == round(700.0 / 2250.0, 4)
    assert hbm.value == round(6.16 / 7.7, 4)


def test_every_missing_measurement_is_listed_with_what_the_sweep_has(tmp_path):
    sweep = read_sweep(_sweep(tmp_path))
    with pytest.raises(RecipeError) as err:
        sweep_efficiencies(sweep, load_gpu("b200"), ("attention", "hbm"), attention_tokens=2048)
    paths = [p.path for p in err.value.problems]
    assert paths == ["attention", "hbm"]
    assert "cudnn at 4096" in err.value.problems[0].fix and "flash at 4096" in err.value.problems[0].fix


def test_a_value_outside_the_peak_is_refused(tmp_path):
    """A sweep of a faster GPU read against a slower profile: more than its peak, not a fraction."""
    sweep = read_sweep(_sweep(tmp_path))
    with pytest.raises(RecipeError, match="not a fraction"):
        sweep_efficiencies(sweep, load_gpu("cpu"))


@pytest.mark.parametrize("content, message", [
    (None, "cannot read"), ("{not json", "not JSON"), ('{"rows": []}', "no device name"),
    ('{"device": "cpu", "attention": []}', "ran on the CPU"),
])
def test_bad_sweep_files_are_clear_errors(tmp_path, content, message):
    path = tmp_path / "sweep.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(RecipeError, match=message):
        read_sweep(path)


def test_pin_writes_the_family_with_the_source_and_a_second_pin_replaces_it(tmp_path, monkeypatch):
    sweep_path = _sweep(tmp_path)
    sweep = read_sweep(sweep_path)
    found = sweep_efficiencies(sweep, load_gpu("b200"))
    before = {name: load_gpu(name).efficiency for name in family_profiles("blackwell")}
    out = tmp_path / "profiles"
    written = pin_measured(found, device="NVIDIA B200", source="sweep.json", family="blackwell", folder=out)
    assert sorted(p.stem for p in written) == sorted(before)
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(out))
    load_gpu.cache_clear()
    try:
        for name, old in before.items():
            eff = load_gpu(name).efficiency
            assert eff.attention == 0.4 and eff.measured == ("attention",)
            assert eff.gemm_max == old.gemm_max and eff.scaleup_link == old.scaleup_link  # the rest kept
            # an earlier remark on attention (the fit's "as measured (not fitted)") is replaced, not repeated
            earlier = re.sub(r"; attention \S+ as measured \([^)]*\)", "", old.calibration)
            assert eff.calibration == earlier + "; attention 0.4 as measured (pinned after the values above " \
                                                "were fitted)"
            text = (out / f"{name}.yaml").read_text()
            notes = [line for line in text.splitlines() if line.startswith(PIN_NOTE.format(name="attention"))]
            assert notes == [f"{PIN_NOTE.format(name='attention')} 0.4 measured on NVIDIA B200, cudnn causal "
                             "attention fwd+bwd, 128-wide heads, 4096 tokens: 900 TFLOP/s of b200's 2250 (sweep.json)"]
            assert list(yaml.safe_load(text)["efficiency"])[-2:] == ["measured", "calibration"]
        # again, from the written profiles, at 8k tokens: one note, one calibration remark, the new value
        again = sweep_efficiencies(sweep, load_gpu("b200"), attention_tokens=8192)
        pin_measured(again, device="NVIDIA B200", source="sweep.json", family="blackwell", folder=out)
        load_gpu.cache_clear()
        for name in before:
            eff = load_gpu(name).efficiency
            assert eff.attention == round(1100 / 2250, 4) and eff.measured == ("attention",)
            assert eff.calibration.count("as measured") == 1 and "0.4 as" not in eff.calibration
            assert (out / f"{name}.yaml").read_text().count(PIN_NOTE.format(name="attention")) == 1
    finally:
        load_gpu.cache_clear()


def test_repinning_hopper_keeps_one_remark_and_says_when_the_value_moved(tmp_path, monkeypatch):
    """Hopper already states its attention as measured (the fit's remark "as measured (not fitted)"): the same
    value again leaves one such remark; another value replaces it and says the rest was fitted beside the old."""
    sweep = read_sweep(H200_SWEEP)
    out = tmp_path / "profiles"
    same = sweep_efficiencies(sweep, load_gpu("h200"))
    pin_measured(same, device="NVIDIA H200", source="sweep.json", family="hopper", folder=out)
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(out))
    load_gpu.cache_clear()
    try:
        eff = load_gpu("h100").efficiency
        monkeypatch.delenv("PRIMUS_EXT_PROFILES")
        load_gpu.cache_clear()
        assert eff.calibration == load_gpu("h100").efficiency.calibration  # the fit's remark, where it wrote it
        monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(out))
        load_gpu.cache_clear()
        longer = sweep_efficiencies(sweep, load_gpu("h200"), attention_tokens=8192)
        pin_measured(longer, device="NVIDIA H200", source="sweep.json", family="hopper", folder=out)
        load_gpu.cache_clear()
        eff = load_gpu("h100").efficiency
        assert eff.attention == longer[0].value and "0.4327" not in eff.calibration
        assert eff.calibration.endswith(f"; attention {longer[0].value:.4g} as measured (pinned after the values "
                                        "above were fitted)")
    finally:
        load_gpu.cache_clear()


def test_a_boolean_rate_is_not_a_measurement_and_a_device_name_stays_on_its_line(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"device": "NVIDIA B200", "attention": [_attention_row(True)]}))
    with pytest.raises(RecipeError, match="no cudnn fwd"):
        sweep_efficiencies(read_sweep(path), load_gpu("b200"))
    (att,) = sweep_efficiencies(read_sweep(_sweep(tmp_path)), load_gpu("b200"))
    note = pin_note(att, "NVIDIA B200\nefficiency: {gemm_max: 9}", "s.json")
    assert "\n" not in note and note.startswith("# pinned efficiency.attention:")


def test_a_failed_write_leaves_every_profile_as_it_was(tmp_path):
    """The family's profiles are written together or not at all: h200.yaml a folder makes h100.yaml stay absent."""
    out = tmp_path / "profiles"
    (out / "h200.yaml").mkdir(parents=True)
    found = sweep_efficiencies(read_sweep(H200_SWEEP), load_gpu("h200"))
    with pytest.raises(PrimusExtError, match="nothing was written"):
        pin_measured(found, device="NVIDIA H200", source="sweep.json", family="hopper", folder=out)
    assert sorted(p.name for p in out.iterdir()) == ["h200.yaml"]
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(PrimusExtError, match="cannot write profiles"):
        pin_measured(found, device="NVIDIA H200", source="sweep.json", family="hopper", folder=blocked)
