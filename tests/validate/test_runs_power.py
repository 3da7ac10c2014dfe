"""A row whose source states a board power below the profile's rating is projected on a capped GPU."""

import pytest

from primus_ext.validate.archs import read_archs
from primus_ext.validate.runs import board_power_w, read_runs

ARCH = ("name,num_layers,hidden,ffn_hidden,num_heads,num_kv_heads,vocab,num_experts,topk,moe_ffn_hidden,"
        "shared_experts,first_k_dense,mla(yes/no),notes\nM,8,1024,4096,16,4,32000,,,,,,no,\n")
RUNS = ("source,source_date,model,seq_len,precision,gpu,num_gpus,tp,pp,vpp,cp,ep,etp,dp,mbs,gbs,extra_flags,"
        "tokens_per_sec_per_gpu,tflops_per_gpu,mfu,step_time_s,notes\n"
        "torchtitan,2025,M,4096,BF16,H100,8,1,1,,1,,,8,1,64,FSDP2,900,,,,H100 SXM 96GB HBM2e @500W (Grand Teton)\n"
        "NeMo,2025,M,4096,BF16,H100,8,1,1,,1,,,8,1,64,,900,,,,\n")


def test_board_power_parsed_from_notes():
    assert board_power_w("H100 SXM 96GB HBM2e @500W (Grand Teton), 400Gb/s") == 500.0
    assert board_power_w("400Gb/s RDMA per GPU; 8xH200 per host") is None


def test_capped_row_runs_at_lower_peak(tmp_path):
    (tmp_path / "a.csv").write_text(ARCH)
    (tmp_path / "r.csv").write_text(RUNS)
    capped, rated = read_runs(tmp_path / "r.csv", read_archs(tmp_path / "a.csv"))
    ratio = capped.system.gpu.bf16_dense_tflops / rated.system.gpu.bf16_dense_tflops
    assert ratio == pytest.approx((500 / 700) ** (1 / 3), rel=1e-6)
    assert any("500 W" in a for a in capped.assumptions) and not any(" W of " in a for a in rated.assumptions)
