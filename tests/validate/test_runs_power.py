"""A row whose source states a board power below the profile's rating is projected on a capped GPU."""

import pytest
from validate_rows import runs_of

from primus_ext.validate.runs import board_power_w

ROWS = ("torchtitan,2025,M,4096,BF16,H100,8,1,1,,1,,,8,1,64,FSDP2,900,,,,H100 SXM 96GB HBM2e @500W (Grand Teton)\n"
        "NeMo,2025,M,4096,BF16,H100,8,1,1,,1,,,8,1,64,,900,,,,\n")


def test_board_power_parsed_from_notes():
    assert board_power_w("H100 SXM 96GB HBM2e @500W (Grand Teton), 400Gb/s") == 500.0
    assert board_power_w("400Gb/s RDMA per GPU; 8xH200 per host") is None


def test_capped_row_runs_at_lower_peak(tmp_path):
    capped, rated = runs_of(tmp_path, ROWS)
    ratio = capped.system.gpu.bf16_dense_tflops / rated.system.gpu.bf16_dense_tflops
    assert ratio == pytest.approx((500 / 700) ** (1 / 3), rel=1e-6)
    assert any("500 W" in a for a in capped.assumptions) and not any(" W of " in a for a in rated.assumptions)
