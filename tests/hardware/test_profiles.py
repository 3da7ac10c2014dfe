"""Hardware profiles: every shipped profile loads, and its figures match the validation CSV."""

import csv
from pathlib import Path

import pytest

from primus_ext.errors import RecipeError
from primus_ext.hardware import canonical_name, family_profiles, list_profiles, load_gpu, load_system, profile_of_device

SPECS = Path(__file__).resolve().parents[3] / "shared" / "validation" / "hardware_specs.csv"
MYBOX = ("bf16_dense_tflops: 100\nfp8_dense_tflops: 200\nhbm_gb: 10\nhbm_tbps: 1\n"
         "scaleup_gbps_per_direction: 50\nscaleup_domain: 4\nnic_gbit_per_gpu: 100\n")
"""The datasheet part of a user's profile (every required field)."""


def test_all_profiles_load():
    names = list_profiles()
    for expected in ("mi300x", "mi325x", "mi355x", "h100", "h200", "b200", "gb200", "b300", "gb300", "cpu"):
        assert expected in names
    for name in names:
        gpu = load_gpu(name)
        assert gpu.bf16_dense_tflops > 0 and gpu.hbm_bytes > 0


@pytest.mark.skipif(not SPECS.exists(), reason="shared/validation not present")
def test_profiles_match_datasheet_csv():
    for row in csv.DictReader(SPECS.open()):
        if row["gpu"] == "H100_DGX_H100":
            continue  # same GPU as H100_SXM5_80GB
        gpu = load_gpu(canonical_name(row["gpu"]))
        assert gpu.bf16_dense_tflops == pytest.approx(float(row["bf16_dense_tflops"]))
        assert gpu.fp8_dense_tflops == pytest.approx(float(row["fp8_dense_tflops"]))
        assert gpu.fp4_dense_tflops == pytest.approx(float(row["fp4_dense_tflops"] or 0))  # blank: no FP4
        assert gpu.hbm_bytes == pytest.approx(float(row["hbm_gb"]) * 1e9)
        assert gpu.scaleup_domain == int(row["scaleup_domain"])
        # NIC column is in Gb/s (bits): 400 Gb/s = 50 GB/s
        assert gpu.nic_bandwidth_bytes_per_s == pytest.approx(float(row["nic_gbps_per_gpu"]) * 1e9 / 8)


def test_nvl72_domain_spans_nodes():
    system = load_system("gb200", num_nodes=18)
    assert system.world_size == 72 and system.scaleup_domain == 72
    assert load_system("gb200", num_nodes=2).scaleup_domain == 8  # capped by the world


def test_unknown_profile_is_a_clean_error():
    with pytest.raises(RecipeError) as err:
        load_gpu("tpu-v9")
    assert "mi300x" in str(err.value)
    with pytest.raises(RecipeError):
        load_system("mi300x", num_nodes=0)


def test_user_profiles_take_precedence(tmp_path, monkeypatch):
    (tmp_path / "mybox.yaml").write_text(MYBOX + "efficiency: {gemm_max: 0.5}\n")
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(tmp_path))
    load_gpu.cache_clear()
    gpu = load_gpu("mybox")
    assert gpu.efficiency.gemm_max == 0.5 and gpu.scaleup_domain == 4
    (tmp_path / "bad.yaml").write_text("bf16_dense_tflops: 1\nefficiency: {gemm_maxx: 1}\n")
    with pytest.raises(RecipeError) as err:
        load_gpu("bad")
    assert "gemm_maxx" in str(err.value) and "hbm_gb" in str(err.value)
    load_gpu.cache_clear()


def test_written_efficiency_reads_back_as_numbers(tmp_path, monkeypatch):
    """``5e+10`` is a string to YAML 1.1: the writer must give the mantissa a dot, the loader must refuse a string."""
    from dataclasses import replace

    from primus_ext.hardware import profile_text, write_profiles, yaml_number

    assert yaml_number(5e10) == "5.0e+10" and yaml_number(4.99e10) == "4.99e+10"
    assert yaml_number(1e-5) == "1.0e-05" and yaml_number(0.6) == "0.6" and yaml_number(1.0) == "1"
    with pytest.raises(ValueError):
        yaml_number(float("nan"))
    efficiency = replace(load_gpu("h100").efficiency, gemm_half_size_flops=5e10, moe_layer_overhead_s=1e-5)
    fields = ["gemm_half_size_flops", "moe_layer_overhead_s", "gemm_max"]
    write_profiles({"h100": profile_text("h100", efficiency, fields)}, tmp_path)
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(tmp_path))
    load_gpu.cache_clear()
    try:
        back = load_gpu("h100").efficiency
        assert back.gemm_half_size_flops == 5e10 and back.moe_layer_overhead_s == 1e-5
        text = (tmp_path / "h100.yaml").read_text().replace("5.0e+10", "5e+10")
        (tmp_path / "h100.yaml").write_text(text)
        load_gpu.cache_clear()
        with pytest.raises(RecipeError) as err:
            load_gpu("h100")
        assert "efficiency.gemm_half_size_flops" in str(err.value) and "not a number" in str(err.value)
    finally:
        load_gpu.cache_clear()


def test_writer_replaces_a_hand_written_efficiency_block(tmp_path, monkeypatch):
    """A user's profile with its own ``efficiency:`` block gets one block back (no duplicate key), with the fitted
    values and the user's other settings."""
    from dataclasses import replace

    from primus_ext.hardware import profile_text, write_profiles

    mine, out = tmp_path / "mine", tmp_path / "out"
    mine.mkdir()
    (mine / "mybox.yaml").write_text(MYBOX + "efficiency:\n  gemm_max: 0.5\n  hbm: 0.9\ntdp_w: 300\n")
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(mine))
    load_gpu.cache_clear()
    try:
        fitted = replace(load_gpu("mybox").efficiency, gemm_max=0.6)
        text = write_profiles({"mybox": profile_text("mybox", fitted, ["gemm_max"])}, out)[0].read_text()
        assert text.count("efficiency:") == 1 and "tdp_w: 300" in text
        monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(out))
        load_gpu.cache_clear()
        back = load_gpu("mybox")
        assert (back.efficiency.gemm_max, back.efficiency.hbm, back.tdp_w) == (0.6, 0.9, 300.0)
        (out / "mybox.yaml").write_text(text.replace("hbm_tbps: 1\n", "hbm_tbps: 1e+3\n"))
        load_gpu.cache_clear()
        with pytest.raises(RecipeError) as err:
            load_gpu("mybox")
        assert "hbm_tbps" in str(err.value) and "not a number" in str(err.value)
    finally:
        load_gpu.cache_clear()


def test_measured_efficiency_names_read_back_and_bad_ones_are_listed(tmp_path, monkeypatch):
    from dataclasses import replace

    from primus_ext.hardware import profile_text, write_profiles

    efficiency = replace(load_gpu("h100").efficiency, attention=0.41, measured=("attention",))
    write_profiles({"h100": profile_text("h100", efficiency, ["gemm_max", "attention"])}, tmp_path)
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(tmp_path))
    load_gpu.cache_clear()
    try:
        back = load_gpu("h100").efficiency
        assert back.measured == ("attention",) and back.attention == 0.41
        text = (tmp_path / "h100.yaml").read_text()
        cases = {'"attention"': ("efficiency.measured:", "not a list"),
                 '["atention"]': ("efficiency.measured[0]", "not an efficiency parameter name"),
                 '["calibration"]': ("efficiency.measured[0]", "not an efficiency parameter name"),
                 '["attention", "attention"]': ("efficiency.measured[1]", "listed twice"),
                 '["attention", "hbm"]': ("efficiency.measured[1]", "hbm is listed as measured but its value is not")}
        for bad, (path, message) in cases.items():
            (tmp_path / "h100.yaml").write_text(text.replace('["attention"]', bad))
            load_gpu.cache_clear()
            with pytest.raises(RecipeError) as err:
                load_gpu("h100")
            assert path in str(err.value) and message in str(err.value), (bad, str(err.value))
        for empty in ("[]", ""):  # nothing measured
            (tmp_path / "h100.yaml").write_text(text.replace('["attention"]', empty))
            load_gpu.cache_clear()
            assert load_gpu("h100").efficiency.measured == ()
    finally:
        load_gpu.cache_clear()


def test_profiles_of_a_family_state_the_same_measured_values():
    """The calibration fits one block per GPU family from its first row's profile: what a family's profiles
    state as measured must agree."""
    by_family: dict[str, set] = {}
    for name in list_profiles():
        eff = load_gpu(name).efficiency
        stated = tuple((m, getattr(eff, m)) for m in eff.measured)
        by_family.setdefault(load_gpu(name).family or name, set()).add(stated)
    assert all(len(v) == 1 for v in by_family.values()), by_family


def test_profile_of_a_device_name():
    assert profile_of_device("NVIDIA H200") == "h200" and profile_of_device("NVIDIA H100 80GB HBM3") == "h100"
    assert profile_of_device("NVIDIA GB200") == "gb200" and profile_of_device("AMD Instinct MI300X") == "mi300x"
    assert profile_of_device("Some GPU") is None
    assert set(family_profiles("hopper")) == {"h100", "h20", "h200", "h800"}
    assert profile_of_device("NVIDIA A100-SXM4-40GB") == "a100_40gb"  # the most specific profile's words
    assert profile_of_device("NVIDIA A100-SXM4-80GB") == "a100"
    assert profile_of_device("NVIDIA H20") == "h20" and profile_of_device("AMD Instinct MI250X / MI250") == "mi250x"
