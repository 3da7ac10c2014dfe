"""Issue 56 part 1: hostile GPU profiles on $PRIMUS_EXT_PROFILES found by ``benchmarks/hostile_campaign.py --surface
profiles`` (seeds 1052, 1100, 1021, 1134, 1059): each is refused with the file and the key, exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus_ext.cli import main

REPO = Path(__file__).resolve().parents[2]
H100 = (REPO / "primus_ext" / "hardware" / "profiles" / "h100.yaml").read_text().replace("name: h100", "name: zz")


@pytest.mark.parametrize(("edit", "said"), [
    (lambda t: t.replace("hbm_gb: 80.0", "hbm_gb: " + "9" * 5001), "cannot construct"),
    (lambda t: "x: " + "[" * 10_000 + "]" * 10_000 + "\n" + t, "YAML"),
    (lambda t: t + "efficiency: [1]\n", "efficiency"),
    (lambda t: t.replace("efficiency:", "efficiency: 3\nold:"), "efficiency"),
    (lambda t: t.replace("hbm_tbps: 3.35", "hbm_tbps: 0"), "hbm_tbps"),
    (lambda t: t.replace("hbm_gb: 80.0", "hbm_gb: -0.0"), "hbm_gb"),
    # the --surface every campaign, seeds 630 / 2297 / 1326: ZeroDivisionError, TypeError, ValueError before
    (lambda t: t.replace("  attention: 0.4327", "  attention: 0"), "efficiency.attention"),
    (lambda t: t.replace("gpus_per_node: 8 ", "gpus_per_node: 2024-01-01 "), "gpus_per_node"),
    (lambda t: t.replace("scaleup_gbps_per_direction: 450.0", "scaleup_gbps_per_direction: 0"),
     "scaleup_gbps_per_direction"),
])
def test_a_hostile_profile_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str], edit, said: str) -> None:
    (tmp_path / "zz.yaml").write_text(edit(H100))
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(tmp_path))
    monkeypatch.setenv("PRIMUS_EXT_CACHE", str(tmp_path / "cache"))
    code = main(["project", str(REPO / "recipes" / "llama3.1_8B-pretrain.yaml"), "--cluster", "zz", "--nodes", "1"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "zz.yaml" in err and said in err, err
