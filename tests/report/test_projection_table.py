"""The terminal projection report says where its efficiency parameters come from."""

from primus_ext.hardware import load_gpu
from primus_ext.report.projection_table import calibration_label


def test_calibration_label_says_whose_runs_the_efficiencies_come_from():
    assert calibration_label(load_gpu("h100").efficiency.calibration).startswith("calibrated on 51 H100/H200 rows")
    assert calibration_label(load_gpu("mi300x").efficiency.calibration) == (
        "calibrated on 7 MI300X rows (1 configuration, AMD runs only) of published runs")
    assert calibration_label("pooled prior (fewer than 6 usable rows)").startswith("pooled prior")
    assert calibration_label("uncalibrated defaults") == "uncalibrated defaults"


def test_stage_table_shows_every_stage_idle_time(deepseek_v3):
    """The breakdown is the busiest rank's; the stage table names each stage's idle share (stage 0 ~18 %)."""
    from primus_ext.report.projection_table import format_projection
    from primus_ext.report.timeline import stage_idle

    text = format_projection(deepseek_v3)
    header = next(line for line in text.splitlines() if line.startswith("rank "))
    assert header.split()[4:7] == ["busy", "idle", "idle%"]
    rows = [line.split() for line in text.splitlines() if line[:1].isdigit() and "%" in line]
    shares = [float(next(c for c in row if c.endswith("%"))[:-1]) for row in rows]
    assert shares == [round(s.idle_fraction * 100, 1) for s in stage_idle(deepseek_v3)]
    assert max(shares) > 15
