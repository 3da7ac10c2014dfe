"""model_archs.csv notes -> group-limited routing (megatron-core moe_router_num_groups / group_topk)."""

from pathlib import Path

import pytest
from validate_rows import ARCH_HEADER

from primus_ext.validate.archs import read_archs

VALIDATION = Path(__file__).resolve().parents[3] / "shared" / "validation"


def test_shared_deepseek_v3_row_is_node_limited():
    csv = VALIDATION / "model_archs.csv"
    if not csv.is_file():
        pytest.skip("shared/validation/model_archs.csv not present")
    archs = read_archs(csv)
    m = archs["DeepSeek-V3"].model
    # the row's note: "router sigmoid, group-limited (8 groups, top-4 groups)" (HF n_group 8, topk_group 4)
    assert (m.moe_router_num_groups, m.moe_router_group_topk) == (8, 4)
    others = [n for n, a in archs.items() if a.model and n != "DeepSeek-V3" and a.model.moe_router_group_topk]
    assert others == []  # no other row states group-limited routing


def test_note_patterns(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text(ARCH_HEADER
                    + 'G,4,512,1024,8,8,1000,64,6,256,,,no,"Group-limited (16 groups, top-2 groups), expert bias"\n'
                    + 'D,4,512,1024,8,8,1000,,,,,,no,"group-limited (8 groups, top-4 groups)"\n'
                    + 'F,4,512,1024,8,8,1000,64,6,256,,,no,"8 groups mentioned elsewhere"\n')
    archs = read_archs(path)
    assert (archs["G"].model.moe_router_num_groups, archs["G"].model.moe_router_group_topk) == (16, 2)
    assert archs["D"].model.moe_router_group_topk is None  # dense: no router to limit
    assert archs["F"].model.moe_router_num_groups is None
