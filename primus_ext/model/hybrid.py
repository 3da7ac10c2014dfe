"""Hybrid Mamba models as megatron-core 0.16.1 builds them: the layer symbols, the pattern's pipeline split, and the
Mamba-2 mixer's parameters, FLOPs, bytes and saved activations (closed form, per rank, per micro-batch). The pattern
itself (``allocate_layers``: its legal symbols are the registered kinds') is ``model.layers``'.

    >>> stage_patterns("M-M*-M-M*-", 2)                # MambaStack._select_layers_for_pipeline_parallel
    ('M-M*-', 'M-M*-')

Layer symbols (``Symbols`` in mamba_hybrid_layer_allocation.py): ``M`` a ``MambaLayer`` (the mixer, its norm
fused into ``in_proj``), ``*`` an attention-only ``TransformerLayer`` (input norm + self-attention), ``-`` an
``MLPLayer`` (pre-MLP norm + dense MLP), ``E`` an MoE-only ``MoETransformerLayer`` (pre-MLP norm + MoE block).
Each symbol is one of ``num_layers`` (models/mamba/mamba_layer_specs.py ``mamba_stack_spec``).

The mixer (ssm/mamba_mixer.py ``MambaMixer``), per tensor-parallel rank, H heads of P channels, G groups of
N-wide state, d_inner = H*P, kernel width K:

* ``in_proj`` column-parallel, [h -> (2*d_inner + 2*G*N + H) / TP] (z, x, B, C, dt), its RMSNorm fused (TE);
* ``conv1d`` depthwise over (d_inner + 2*G*N) / TP channels, K taps + bias;
* ``dt_bias``, ``A_log``, ``D``: H / TP each; the gated RMSNorm: d_inner / TP; ``out_proj`` row-parallel
  [d_inner / TP -> h], no bias.

Context parallelism (ssm/mamba_context_parallel.py): all-to-alls trade the sequence split for a head split
before the conv + scan and back after, so each CP rank scans the whole sequence for H / (TP*CP) heads: the
per-rank scan work equals ``seq/CP`` tokens at ``H/TP`` heads, which is what ``RankShape.tokens`` gives.

A leaf of the model layer (the kinds ``mamba`` and ``hybrid_*`` price with it). Pure and torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from primus_ext.model.rank_shape import RankShape

MAMBA, ATTENTION, MLP, MOE = "M", "*", "-", "E"
"""megatron-core 0.16.1 ssm/mamba_hybrid_layer_allocation.py ``Symbols`` (``allocate_layers`` places ``*`` and
``-``); each is the ``symbol`` of the layer kind that prices it (``model.kinds.mamba``, ``model.kinds.hybrid``)."""

MAMBA_D_CONV = 4
"""Causal conv1d taps: ``MambaMixer(d_conv=4)`` (ssm/mamba_mixer.py@0.16.1; ``mamba_stack_spec`` passes none)."""
MAMBA_EXPAND = 2
"""``MambaMixer(expand=2)``: d_inner = 2 * hidden when ``mamba_num_heads`` is unset (ssm/mamba_mixer.py@0.16.1)."""
MAMBA_CHUNK_SIZE = 128
"""SSD chunk length Q: ``MambaMixer(chunk_size=128)`` default (ssm/mamba_mixer.py@0.16.1)."""
MAMBA_STATE_DIM, MAMBA_HEAD_DIM, MAMBA_NUM_GROUPS = 128, 64, 8
"""TransformerConfig defaults ``mamba_state_dim``, ``mamba_head_dim``, ``mamba_num_groups`` (0.16.1)."""
FP32 = 4
"""A_log, D, dt_bias and the SSD chunk states / decays are fp32 (ssm/mamba_mixer.py: "Keep in fp32")."""


class HybridPatternError(ValueError):
    """A hybrid layer pattern megatron-core would refuse (the message says why)."""


# -- the layer pattern ----------------------------------------------------------------------------------------
def stage_patterns(pattern: str, pp: int, *, first: int | None = None, last: int | None = None,
                   vpp: int | None = None) -> tuple[str, ...]:
    """Each pipeline rank's slice of ``pattern`` as ``MambaStack`` selects it (0.16.1 mamba_block.py
    ``_select_layers_for_pipeline_parallel``): ``num_layers // PP`` consecutive layers per rank, or
    ``first`` / ``last`` layers on the edge ranks and the rest split evenly (floor) over the middle ones.
    Interleaved (virtual) pipelines are refused, as megatron-core does."""
    if vpp and vpp > 1:
        raise HybridPatternError("megatron-core's MambaStack does not support virtual/interleaved pipeline "
                                 "parallelism")
    n = len(pattern)
    if pp <= 1:
        return (pattern,)
    if first is None and last is None:
        if n % pp:
            raise HybridPatternError(f"{n} hybrid layers do not split evenly over {pp} pipeline stages")
        per = n // pp
        return tuple(pattern[r * per:(r + 1) * per] for r in range(pp))
    f, la = first or 0, last or 0
    middle = pp - (first is not None) - (last is not None)
    per_middle = (n - f - la) // middle if middle > 0 else 0
    out = []
    for rank in range(pp):
        if first is not None and rank == 0:
            start, count = 0, f
        elif last is not None and rank == pp - 1:
            start, count = n - la, la
        else:
            start, count = (rank - (first is not None)) * per_middle + f, per_middle
        out.append(pattern[start:start + count])
    if sum(map(len, out)) != n:
        raise HybridPatternError(f"uneven pipeline split first={first} last={last} over {pp} stages leaves "
                                 f"{n - sum(map(len, out))} of {n} hybrid layers on no stage")
    return tuple(out)


def mamba_num_heads(hidden_size: int, head_dim: int, num_heads: int | None, *, expand: int = MAMBA_EXPAND) -> int:
    """``mamba_num_heads`` or, unset, ``expand * hidden / head_dim`` (MambaMixer.__init__; ``expand`` is the
    mixer spec's, megatron-core's default 2)."""
    if num_heads:
        return num_heads
    d_inner = expand * hidden_size
    if d_inner % head_dim:
        raise HybridPatternError(f"d_inner {d_inner} ({expand} x hidden_size) is not a multiple of mamba_head_dim "
                                 f"{head_dim}")
    return d_inner // head_dim


def check_mamba_split(heads: int, groups: int, tp: int, cp: int = 1) -> str | None:
    """Why megatron-core refuses this head / group split, or ``None`` (MambaMixer, MambaContextParallel asserts)."""
    if heads % groups:
        return f"mamba_num_heads {heads} is not a multiple of mamba_num_groups {groups}"
    if heads % tp or groups % tp:
        return f"mamba heads {heads} and groups {groups} must both divide by tensor parallel {tp}"
    if (heads // tp) % cp:
        return f"mamba heads per TP rank {heads // tp} must divide by context parallel {cp}"
    g = groups // tp
    if (g < cp and cp % g) or (g >= cp and g % cp):
        return f"mamba groups per TP rank {g} and context parallel {cp} must divide one another"
    return None


# -- one mixer on one rank ------------------------------------------------------------------------------------
def _dims(shape: RankShape) -> tuple[int, int, int, int, int]:
    """(H, P, G, N, K) on one TP rank."""
    a = shape.arch
    return (a.mamba_num_heads // shape.tp, a.mamba_head_dim, a.mamba_num_groups // shape.tp, a.mamba_state_dim,
            a.mamba_d_conv)


def in_proj_width(shape: RankShape) -> int:
    """``in_proj`` output features on one TP rank: z, x (d_inner each), B, C (G*N each), dt (H)."""
    h, p, g, n, _ = _dims(shape)
    return 2 * h * p + 2 * g * n + h


def mixer_params(shape: RankShape) -> int:
    """A ``MambaLayer``'s parameters on one TP rank (its RMSNorm fused into ``in_proj``: TE spec)."""
    a = shape.arch
    h, p, g, n, k = _dims(shape)
    conv_channels = h * p + 2 * g * n
    norm = a.hidden_size * (2 if a.normalization == "LayerNorm" else 1)
    return (norm + a.hidden_size * in_proj_width(shape)   # in_proj (+ its fused norm)
            + conv_channels * (k + 1)                      # conv1d weight [C, 1, K] + bias
            + 3 * h                                        # dt_bias, A_log, D (D_has_hdim=False)
            + h * p                                        # gated RMSNorm weight
            + h * p * a.hidden_size)                       # out_proj


def ssd_flops(shape: RankShape) -> dict[str, float]:
    """Forward FLOPs of the chunked SSD scan on one rank (Dao & Gu 2024, arXiv:2405.21060 sec. 6 and Listing 1,
    as mamba_ssm's Triton kernels run it), per micro-batch of T tokens in chunks of Q:

    * ``cb``: C B^T within each chunk, per group (``_bmm_chunk_fwd`` shares it over a group's heads): 2 G T Q N;
    * ``diag``: the masked (C B^T o L) X of each chunk, per head (``_chunk_scan_fwd``): 2 H T Q P;
    * ``states``: each chunk's end state B^T (decay o X), per head (``_chunk_state_fwd``): 2 H T N P;
    * ``passing``: the inter-chunk recurrence over T/Q chunk states (``_state_passing_fwd``): 2 H (T/Q) N P;
    * ``off``: C times the carried state (``_chunk_scan_fwd``'s off-diagonal term): 2 H T N P.

    Counted on the full Q x Q chunk blocks as Listing 1 writes them (the causal mask halves the useful part)."""
    h, p, g, n, _ = _dims(shape)
    t, q = shape.tokens, shape.arch.mamba_chunk_size
    return {"cb": 2.0 * g * t * q * n, "diag": 2.0 * h * t * q * p, "states": 2.0 * h * t * n * p,
            "passing": 2.0 * h * t / q * n * p, "off": 2.0 * h * t * n * p}


def conv1d_flops(shape: RankShape) -> float:
    """The depthwise causal conv1d over x, B, C: a multiply-add per tap per channel per token."""
    h, p, g, n, k = _dims(shape)
    return 2.0 * shape.tokens * (h * p + 2 * g * n) * k


def projection_flops(shape: RankShape) -> float:
    """``in_proj`` + ``out_proj`` forward FLOPs on one rank (the GEMMs)."""
    h, p, *_ = _dims(shape)
    return 2.0 * shape.tokens * shape.arch.hidden_size * (in_proj_width(shape) + h * p)


def layer_flops(shape: RankShape) -> float:
    """Forward FLOPs of one ``MambaLayer`` on one rank: projections + conv1d + SSD scan (no elementwise)."""
    return projection_flops(shape) + conv1d_flops(shape) + sum(ssd_flops(shape).values())


def scan_bytes(shape: RankShape, e: int = 2) -> float:
    """HBM bytes the fused conv + scan forward moves on one rank (``mamba_split_conv1d_scan_combined``): read
    z x B C dt, write y; the fp32 chunk states written by ``_chunk_state_fwd``, read and rewritten by
    ``_state_passing_fwd``, read by ``_chunk_scan_fwd``; the fp32 C B^T blocks written and read; the fp32
    dt / cumulative decay per head and token written and read."""
    h, p, g, n, _ = _dims(shape)
    t, q = shape.tokens, shape.arch.mamba_chunk_size
    io = e * t * (in_proj_width(shape) + h * p)
    states = 4 * FP32 * h * (t / q) * n * p
    cb = 2 * FP32 * g * (t / q) * q * q
    decay = 2 * 2 * FP32 * h * t
    return io + states + cb + decay


def mamba_saved(shape: RankShape, e: int) -> dict[str, float]:
    """Bytes one ``MambaLayer``'s mixer keeps for backward on one rank past ``in_proj`` (mem-eff training
    path; ``in_proj`` with its fused norm keeps what a fused-norm linear keeps: ``kinds.mamba``):

    * ``zxbcdt``: ``MambaSplitConv1dScanCombinedFn.forward`` (mamba_ssm ops/triton/ssd_combined.py)
      ``ctx.save_for_backward(zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D, dt_bias, ...)``: the in_proj
      output whole, and ``out_x`` the scan's pre-gate output (d_inner wide); conv output and chunk states
      are recomputed in backward, not kept;
    * ``gated_norm``: the gated RMSNorm (layernorm_gated.py ``LayerNormFn``) keeps its input and fp32 rstd
      per token and group;
    * ``out_proj``: its input (the norm's output), d_inner / TP wide."""
    h, p, g, *_ = _dims(shape)
    t = shape.tokens
    return {"mamba_zxbcdt": e * t * in_proj_width(shape), "mamba_out_x": e * t * h * p,
            "mamba_gated_norm": e * t * h * p + FP32 * t * g, "mamba_out_proj": e * t * h * p}


