"""The terminal projection report says where its efficiency parameters come from."""

from primus_ext.hardware import load_gpu
from primus_ext.report.projection_table import calibration_label


def test_calibration_label_says_whose_runs_the_efficiencies_come_from():
    assert calibration_label(load_gpu("h100").efficiency.calibration).startswith("calibrated on 49 H100/H200 rows")
    assert calibration_label(load_gpu("mi300x").efficiency.calibration).startswith("pooled prior")
    assert calibration_label("uncalibrated defaults") == "uncalibrated defaults"
