"""The ``short_conv`` kind's measurement builder (``model.kinds.short_conv`` names it: ``Kind.builder``).

It builds Primus's ``Lfm2ShortConv`` (primus/backends/megatron/core/transformer/attention.py) as the mixer half of
an LFM2 ``conv`` layer: no input norm, the module, a residual add. The module is Primus's, not megatron-core's:
where the ``primus`` package does not import (this project ships none of its code), or TE does not (its linears are
``TELinear``), the build raises ``UnsupportedLayer``; it reads ``conv_L_cache`` / ``conv_bias`` from Primus's global
arguments (``get_args``), so outside a Primus process megatron's assertion fails the build. Either way the
measurement falls back to the analytic cost.
"""

from __future__ import annotations

import torch

from primus_ext.measure.build import UnsupportedLayer
from primus_ext.measure.kind_builders import KindBuilder, _BuildContext, _Built

MODULE = "primus.backends.megatron.core.transformer.attention"
KERNEL_NOTE = f"Primus ({MODULE}) does not import here: the short_conv kind's cost is analytic"


class ShortConvLayer(torch.nn.Module):
    """``Lfm2ShortConv`` + residual add (``get_lfm_layer_with_transformer_engine_spec``'s attention half)."""

    def __init__(self, config, *, use_te: bool):
        super().__init__()
        import importlib

        from megatron.core.transformer.enums import AttnMaskType
        from megatron.core.transformer.spec_utils import ModuleSpec, build_module

        try:
            lfm = importlib.import_module(MODULE)
        except ImportError as err:
            raise UnsupportedLayer(KERNEL_NOTE) from err
        if not use_te:
            raise UnsupportedLayer("Primus's Lfm2ShortConv is built with TE's TELinear (parallel_mode=None)")
        from megatron.core.extensions.transformer_engine import TELinear as linear

        spec = ModuleSpec(module=lfm.Lfm2ShortConv, params={"attn_mask_type": AttnMaskType.causal},
                          submodules=lfm.Lfm2ShortConvSubmodules(in_proj=linear, out_proj=linear))
        self.mixer = build_module(spec, config=config, layer_number=1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        out, _ = self.mixer(hidden_states, None)
        return hidden_states + out


def _build(ctx: _BuildContext) -> _Built:
    shape, dev, a = ctx.shape, ctx.device, ctx.shape.arch
    if shape.tp > 1:
        raise UnsupportedLayer("Primus's Lfm2ShortConv is not tensor-parallel")
    module = ShortConvLayer(ctx.config, use_te=ctx.use_te)

    def make_inputs() -> dict[str, torch.Tensor | None]:
        x = torch.randn(shape.local_seq, shape.micro_batch_size, a.hidden_size, device=dev, dtype=ctx.dtype)
        return {"hidden_states": x.requires_grad_(True)}
    return module, make_inputs, (), 0, 1


BUILDER = KindBuilder(build=_build)
"""What ``measure.kind_builders.kind_builder("short_conv")`` returns."""
