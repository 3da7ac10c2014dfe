"""Group placement: Megatron's rank order decides which groups leave the scale-up domain."""

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.placement import group_placements, place_group
from primus_ext.specs import ExecutionSpec


def ex(tp=1, pp=1, cp=1, dp=1, ep=1, etp=None):
    return ExecutionSpec(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=cp,
                         data_parallel_size=dp, expert_model_parallel_size=ep, expert_tensor_parallel_size=etp)


def test_tp8_intra_dp_crosses_on_hgx():
    p = group_placements(ex(tp=8, dp=16), load_system("h100", 16))
    assert not p.tp.crosses
    assert p.dp.crosses and p.dp.domains == 16 and p.dp.per_domain == 1


def test_ep64_crosses_on_8gpu_nodes_but_not_on_nvl72():
    e = ex(tp=1, dp=128, ep=64, etp=1)
    hgx = group_placements(e, load_system("h100", 16))
    assert hgx.ep.crosses and (hgx.ep.domains, hgx.ep.per_domain) == (8, 8)
    nvl = group_placements(e, load_system("gb200", 32))  # 128 GPUs, NVLink domains of 72
    assert not nvl.ep.crosses


def test_pipeline_boundaries_and_cp():
    p = group_placements(ex(tp=2, pp=4), load_system("h100", 1))
    assert p.pp_boundary_crosses == (False, False, False)
    p = group_placements(ex(tp=8, pp=4), load_system("h100", 4))
    assert p.pp_boundary_crosses == (True, True, True)
    p = group_placements(ex(tp=4, cp=4, dp=2), load_system("h100", 4))
    assert p.cp.crosses and p.cp.per_domain == 2  # CP stride 4 over 8-GPU domains
    assert p.dp_cp.size == 8


@pytest.mark.parametrize("tp,cp,ep,dp,pp,kind,domain", [
    (2, 1, 1, 8, 2, "dp", 8), (4, 2, 1, 4, 2, "cp", 8), (1, 1, 1, 16, 4, "pp", 8),
    (8, 1, 1, 4, 2, "dp", 8), (2, 2, 1, 4, 4, "tp-cp", 8),
])
def test_matches_megatron_rank_generator(tp, cp, ep, dp, pp, kind, domain):
    """Domains spanned by the group holding rank 0 == what megatron-core's RankGenerator builds."""
    from megatron.core.parallel_state import RankGenerator

    groups = RankGenerator(tp=tp, ep=ep, dp=dp, pp=pp, cp=cp, order="tp-cp-ep-dp-pp").get_ranks(kind)
    group = next(g for g in groups if 0 in g)
    domains = {r // domain for r in group}
    stride = group[1] - group[0]
    ours = place_group(len(group), stride, domain)
    assert ours.domains == len(domains)
    assert ours.per_domain == max(sum(1 for r in group if r // domain == d) for d in domains)
