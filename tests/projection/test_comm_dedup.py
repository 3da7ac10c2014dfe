"""Flex-dispatcher (DeepEP) cross-domain volume: distinct destination domains per token, with and
without DeepSeek-V3's node-limited routing (hand-derived expectations)."""

import math

import pytest

from primus_ext.projection.comm import flex_dedup


def test_uniform_routing_distinct_domains():
    # 8 experts uniform over 8 domains: 8 * (1 - (7/8)^8) = 5.251 distinct domains of 8 copies
    assert flex_dedup(8, 8) == pytest.approx(8 * (1 - (7 / 8) ** 8) / 8)
    assert flex_dedup(8, 1) == 1.0 and flex_dedup(1, 8) == 1.0


def test_node_limited_routing_bounds_the_domains():
    # DeepSeek-V3 on 8 nodes: 8 groups = 8 domains, top-4 groups -> 4 reachable domains,
    # 4 * (1 - (3/4)^8) = 3.60 distinct of 8 copies (arXiv:2412.19437 sec. 2.1.2: at most M = 4 nodes)
    assert flex_dedup(8, 8, groups=8, group_topk=4) == pytest.approx(4 * (1 - 0.75**8) / 8)
    # 16 domains, 8 groups: each selected group spans 2 domains -> 8 reachable
    assert flex_dedup(8, 16, groups=8, group_topk=4) == pytest.approx(8 * (1 - (7 / 8) ** 8) / 8)
    # 4 domains, 8 groups (2 per domain), top-4 groups: E[domains holding a selected group]
    reachable = 4 * (1 - math.comb(6, 4) / math.comb(8, 4))
    assert flex_dedup(8, 4, groups=8, group_topk=4) == pytest.approx(reachable * (1 - (1 - 1 / reachable) ** 8) / 8)
    assert flex_dedup(8, 8, groups=8, group_topk=4) < flex_dedup(8, 8)
    assert flex_dedup(8, 8, groups=8, group_topk=8) == flex_dedup(8, 8)  # no limit when all groups allowed
