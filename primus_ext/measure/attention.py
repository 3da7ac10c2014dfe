"""Fused core attention for the local spec on a GPU without transformer-engine.

Usage (``build.py`` substitutes it into the layer spec when the device is CUDA and TE is absent)::

    attn_sub.core_attention = sdpa_core_attention_class(attn_sub.core_attention, cp=shape.cp)

Megatron's local ``DotProductAttention`` materialises the ``[b, heads, sq, sk]`` score matrix and runs
an unfused softmax: on a GPU that costs several times what the fused kernel of a real run (TE's
cuDNN / flash attention) costs at long sequences, and it would be that gap, not the model, that a
measurement reported. This subclass keeps megatron's projections, rotary embedding and module
structure and replaces only the score / softmax / context product with PyTorch's fused
``scaled_dot_product_attention`` (the flash kernel where it applies, FlashAttention-2; the
memory-efficient kernel for unequal head dims such as MLA's, or a mask). The attention computed is
the local spec's:

- causal attention without a mask tensor (``is_causal``; grouped-query heads through ``enable_gqa``,
  no copies of K/V);
- sliding windows (``window_size``) as megatron's ``get_sliding_window_causal_mask``;
- ``cp`` > 1 (one context-parallel rank in a one-rank world, as ``build.cp_core_attention_class``):
  the rank holds query chunks 0 and 2*CP-1 of 2*CP (megatron's load-balanced split) and attends the
  whole sequence (keys / values repeated CP times for the chunks the ring would bring): chunk 0 is
  causal over the first chunk's keys, the last chunk causal aligned to the lower right over all of
  them; no score rectangle or mask tensor is materialised.

It is a stand-in for TE's kernel, not that kernel: measurements say so in their notes (``NOTE``).
Attention sinks (softmax offsets) and query-key layer scaling are refused: ``build.py`` sets neither.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NOTE = ("core attention: PyTorch's fused SDPA stands in for transformer-engine's fused attention "
        "(TE absent on this GPU)")


def window_keep_mask(sq: int, sk: int, window: tuple[int, int], device: torch.device) -> torch.Tensor:
    """``True`` where a query may attend (the complement of megatron's sliding-window causal mask)."""
    ones = torch.ones(sq, sk, dtype=torch.bool, device=device)
    return torch.tril(torch.triu(ones, diagonal=sk - sq - window[0]), diagonal=sk - sq + window[1])


def sdpa_core_attention_class(base: type, cp: int = 1) -> type:
    """``base`` (``DotProductAttention`` or a subclass) with its forward computed by fused SDPA."""

    class SDPACoreAttention(base):
        def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                    packed_seq_params=None):
            assert packed_seq_params is None and attention_bias is None, "unsupported by the local spec"
            assert getattr(self, "softmax_offset", None) is None, "attention sinks: not in the SDPA stand-in"
            assert not self.config.apply_query_key_layer_scaling, "query-key layer scaling: not in the stand-in"
            sq, batch = query.size(0), query.size(1)
            # [s, b, heads, dim] -> [b, heads, s, dim]; the CP rank's keys: the whole sequence
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
            if cp > 1:
                k, v = k.repeat(1, 1, cp, 1), v.repeat(1, 1, cp, 1)
            gqa = q.size(1) != k.size(1)
            window = getattr(self.scale_mask_softmax, "window_size", None)
            if window is not None:
                keep = window_keep_mask(sq, k.size(2), tuple(window), q.device)
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=self.softmax_scale,
                                                     enable_gqa=gqa)
            elif cp == 1:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale,
                                                     enable_gqa=gqa)
            else:
                out = self._load_balanced(q, k, v, gqa)
            return out.permute(2, 0, 1, 3).reshape(sq, batch, -1)

        def _load_balanced(self, q, k, v, gqa: bool):
            from torch.nn.attention.bias import causal_lower_right

            chunk = q.size(2) // 2
            first = F.scaled_dot_product_attention(q[:, :, :chunk], k[:, :, :chunk], v[:, :, :chunk],
                                                   is_causal=True, scale=self.softmax_scale, enable_gqa=gqa)
            if gqa:  # the causal-bias path takes whole heads
                groups = q.size(1) // k.size(1)
                k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
            last = F.scaled_dot_product_attention(q[:, :, chunk:], k, v, attn_mask=causal_lower_right(chunk, k.size(2)),
                                                  scale=self.softmax_scale)
            return torch.cat([first, last], dim=2)

    SDPACoreAttention.__name__ = f"SDPA{base.__name__}" + (f"CP{cp}" if cp > 1 else "")
    return SDPACoreAttention
