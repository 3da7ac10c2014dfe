"""Fused core attention for the local spec on a GPU without transformer-engine.

Usage (``build.py`` substitutes it into the layer spec when the device is CUDA and TE is absent)::

    attn_sub.core_attention = sdpa_core_attention_class(attn_sub.core_attention)

Megatron's local ``DotProductAttention`` materialises the ``[b, heads, sq, sk]`` score matrix and runs
an unfused softmax: on a GPU that costs several times what the fused kernel of a real run (TE's
cuDNN / flash attention) costs at long sequences, and it would be that gap, not the model, that a
measurement reported. This subclass keeps megatron's projections, rotary embedding and module
structure and replaces only the score / softmax / context product with PyTorch's
``scaled_dot_product_attention``, whose flash backend (FlashAttention-2) runs causal attention without
the score matrix. It is a stand-in for TE's kernel, not that kernel: measurements say so in their
notes (``NOTE``). Not represented: sliding windows and attention sinks (softmax offsets), as in the
local spec it replaces.
"""

from __future__ import annotations

import torch.nn.functional as F

NOTE = ("core attention: PyTorch SDPA (flash backend) stands in for transformer-engine's fused attention "
        "(TE absent on this GPU)")


def sdpa_core_attention_class(base: type) -> type:
    """``base`` (``DotProductAttention`` or a subclass) with its forward computed by fused SDPA.

    Square causal attention uses ``is_causal`` (flash backend); a rectangular mask (the CP stand-in of
    ``build.cp_core_attention_class``) is passed as a boolean mask (megatron's ``True`` = masked out).
    """

    class SDPACoreAttention(base):
        def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                    packed_seq_params=None):
            assert packed_seq_params is None and attention_bias is None, "unsupported by the local spec"
            sq, batch = query.size(0), query.size(1)
            # [s, b, heads, dim] -> [b, heads, s, dim]
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
            groups = q.size(1) // k.size(1)
            if groups > 1:
                k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
            causal = sq == key.size(0)
            mask = None if causal or attention_mask is None else ~attention_mask
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                 scale=self.softmax_scale)
            return out.permute(2, 0, 1, 3).reshape(sq, batch, -1)

    SDPACoreAttention.__name__ = f"SDPA{base.__name__}"
    return SDPACoreAttention
