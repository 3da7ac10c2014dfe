"""DeepSeek-V3's node-limited routing reaches the flex dispatcher's EP volume end to end.

Model from the shipped preset (``recipes/models/deepseek_v3.yaml``: 8 groups, top-4, as the Hugging
Face config's ``n_group`` / ``topk_group``); H100, EP64 over 8 nodes of 8. Expected times are written
out by hand from the hierarchical all-to-all (``(n - k) / n`` of the bytes over the NIC, ``(k - 1) / n``
over NVLink) and the distinct-domain count ``D' (1 - (1 - 1/D')^k) / k`` with ``D' = 4`` reachable nodes
(arXiv:2412.19437 sec. 2.1.2: each token's experts on at most M = 4 nodes).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from primus_ext.hardware import load_system
from primus_ext.model.layers import rank_shapes
from primus_ext.model.placement import group_placements
from primus_ext.projection.comm import layer_comm
from primus_ext.recipe import load_recipe
from primus_ext.specs import ExecutionSpec

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "deepseek_v3-pretrain.yaml"
EP, NODES, TOKENS = 64, 8, 4096


def _ep_seconds(model, system):
    ex = ExecutionSpec(expert_model_parallel_size=EP, data_parallel_size=EP, expert_tensor_parallel_size=1,
                       moe_token_dispatcher_type="flex", seq_length=TOKENS, global_batch_size=EP)
    shape = rank_shapes(model, ex)["moe"]
    comm = layer_comm(shape, ex, group_placements(ex, system), system, fwd_s=1.0, bwd_s=1.0)
    return comm.fwd["ep"][0]


def _hand(model, system, reachable: float) -> float:
    topk, h = model.moe_router_topk, model.hidden_size
    distinct = reachable * (1 - (1 - 1 / reachable) ** topk)
    nbytes = TOKENS * topk * h * 2 * min(1.0, distinct / topk)  # bf16 token copies, once per node
    g, eff = system.gpu, system.gpu.efficiency
    k = EP // NODES
    intra = (k - 1) / EP * nbytes / (g.scaleup_bandwidth_bytes_per_s * eff.scaleup_link)
    inter = (EP - k) / EP * nbytes / (g.nic_bandwidth_bytes_per_s * eff.scaleout_link)
    return 2 * (eff.collective_latency_s + eff.network_latency_s + max(intra, inter))  # dispatch + combine


def test_deepseek_v3_node_limited_routing_cuts_cross_node_volume():
    model = load_recipe(RECIPE).model
    assert (model.moe_router_num_groups, model.moe_router_group_topk) == (8, 4)
    system = load_system("h100", NODES)
    assert system.gpu.gpus_per_node == EP // NODES
    limited = _ep_seconds(model, system)
    free = _ep_seconds(replace(model, moe_router_num_groups=None, moe_router_group_topk=None), system)
    assert limited < free
    assert limited == pytest.approx(_hand(model, system, reachable=4))  # 4 of 8 nodes
    assert free == pytest.approx(_hand(model, system, reachable=8))
