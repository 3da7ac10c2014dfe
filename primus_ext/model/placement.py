"""Where each parallel group lands: Megatron's rank order decides which groups cross scale-up domains.

    >>> from primus_ext.model.placement import group_placements
    >>> p = group_placements(execution, system)
    >>> p.tp.crosses, p.dp.domains, p.ep.per_domain

Megatron-core ``parallel_state.RankGenerator`` numbers ranks with TP innermost, then CP, (EP), DP,
and PP outermost (default ``order="tp-cp-ep-dp-pp"``). Under MoE parallel folding the expert layers
use a second generator over the same ranks with order ``tp-ep-dp-pp`` for (ETP, EP, expert-DP, PP).
A group of one kind is the set of ranks that differ only in that coordinate: members
``base + i * stride`` with ``stride`` the product of the inner sizes. Scale-up domains are blocks of
``system.scaleup_domain`` consecutive ranks (8 for HGX boards, 72 for NVL72), so a group crosses a
domain boundary when its members fall in more than one block. Pure and torch-free; memoised.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from primus_ext.specs import ExecutionSpec, SystemSpec


@dataclass(frozen=True, kw_only=True)
class GroupPlacement:
    """One communication group as the fabric sees it."""

    size: int
    """Ranks in the group."""
    domains: int = 1
    """Scale-up domains its members span."""
    per_domain: int = 0
    """Most members inside one domain (the intra-domain part of a hierarchical collective)."""

    @property
    def crosses(self) -> bool:
        return self.domains > 1

    @property
    def local(self) -> int:
        return self.per_domain or self.size


@lru_cache(maxsize=4096)
def place_group(size: int, stride: int, domain: int) -> GroupPlacement:
    """Placement of the group ``{i * stride : i < size}`` over domains of ``domain`` ranks.

    Every group of a kind is a translate of this one by an offset smaller than ``stride`` (or a
    multiple of the outer block), so the group containing rank 0 is representative when the domain
    size and the strides are powers of two (all shipped profiles, Megatron's usual sizes).
    """
    if size <= 1:
        return GroupPlacement(size=max(size, 1), domains=1, per_domain=1)
    counts: dict[int, int] = {}
    for i in range(size):
        block = (i * stride) // domain
        counts[block] = counts.get(block, 0) + 1
    return GroupPlacement(size=size, domains=len(counts), per_domain=max(counts.values()))


@dataclass(frozen=True, kw_only=True)
class Placements:
    """Every group kind of one execution on one system."""

    tp: GroupPlacement
    cp: GroupPlacement
    dp: GroupPlacement
    """Pure data-parallel group (without CP)."""
    dp_cp: GroupPlacement
    """Data-parallel x context-parallel group: dense gradients are reduced over it."""
    ep: GroupPlacement
    etp: GroupPlacement
    edp: GroupPlacement
    """Expert-data-parallel group: expert gradients are reduced over it."""
    pp: GroupPlacement
    pp_boundary_crosses: tuple[bool, ...]
    """Per pipeline boundary (rank i -> i+1): whether that send/recv leaves the scale-up domain."""
    domain: int
    """Scale-up domain size used."""


@lru_cache(maxsize=4096)
def _placements(tp: int, cp: int, dp: int, pp: int, ep: int, etp: int, domain: int) -> Placements:
    inner_dp = tp * cp
    edp = max(1, (tp * cp * dp) // (etp * ep))
    pp_stride = tp * cp * dp
    crossings = tuple((i * pp_stride) // domain != ((i + 1) * pp_stride) // domain for i in range(pp - 1))
    return Placements(
        tp=place_group(tp, 1, domain),
        cp=place_group(cp, tp, domain),
        dp=place_group(dp, inner_dp, domain),
        dp_cp=_merged(cp, dp, tp, domain),
        ep=place_group(ep, etp, domain),
        etp=place_group(etp, 1, domain),
        edp=place_group(edp, etp * ep, domain),
        pp=place_group(pp, pp_stride, domain),
        pp_boundary_crosses=crossings,
        domain=domain,
    )


def _merged(cp: int, dp: int, stride: int, domain: int) -> GroupPlacement:
    """CP and DP are adjacent in the order, so DP x CP is one strided group of cp*dp ranks."""
    return place_group(cp * dp, stride, domain)


def with_copies(pl: Placements, copies: int) -> Placements:
    """``pl`` with its data-parallel groups (``dp_cp``, ``edp``) widened to every rank holding a parameter when each
    rank keeps ``copies`` model copies (DualPipe: stage s lives on pipeline ranks s and PP-1-s, so its gradients
    are reduced over both ranks' data-parallel groups). The copies sit a pipeline stride apart: in other scale-up
    domains whenever the pipeline crosses them."""
    if copies <= 1:
        return pl
    apart = pl.pp.crosses

    def widen(g: GroupPlacement) -> GroupPlacement:
        return GroupPlacement(size=g.size * copies, domains=g.domains * (copies if apart else 1),
                              per_domain=g.local * (1 if apart else copies))

    return replace(pl, dp_cp=widen(pl.dp_cp), edp=widen(pl.edp))


def group_placements(execution: ExecutionSpec, system: SystemSpec) -> Placements:
    """Placement of every group kind of ``execution`` on ``system`` (memoised on the sizes)."""
    return _placements(
        execution.tp, execution.cp, execution.dp, execution.pp,
        execution.ep, execution.etp, max(1, system.scaleup_domain),
    )


__all__ = ["GroupPlacement", "Placements", "group_placements", "place_group", "with_copies"]
