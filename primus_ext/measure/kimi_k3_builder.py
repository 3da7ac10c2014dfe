"""The Kimi-K3 kinds' measurement builder (``model.kinds.kimi_k3`` names it: ``Kind.builder``).

Primus's ``KimiK3Layer`` (primus/backends/megatron/core/models/kimi_k3/kimi_k3_block.py) is Primus's module, not
megatron-core's: its KDA runs fla / FlyDSL kernels, its attention residuals a FlyDSL mixer, and this project ships
none of that code, so the build raises ``UnsupportedLayer`` and the measurement falls back to the analytic cost
(``measure.build``'s rule for a layer it cannot build), with this sentence as the reason.
"""

from __future__ import annotations

from primus_ext.measure.build import UnsupportedLayer
from primus_ext.measure.kind_builders import KindBuilder, _BuildContext, _Built

KERNEL_NOTE = ("Primus's Kimi-K3 layer (kimi_k3_block.py: its fla / FlyDSL KDA and attention-residual kernels) is "
               "not built by primus-ext: the Kimi-K3 kinds' costs are analytic")


def _build(ctx: _BuildContext) -> _Built:
    raise UnsupportedLayer(KERNEL_NOTE)


BUILDER = KindBuilder(build=_build)
"""What ``measure.kind_builders.kind_builder`` returns for the Kimi-K3 mixer and dense-MLP kinds."""
MOE_BUILDER = KindBuilder(build=_build, experts=True)
"""What it returns for the Kimi-K3 MoE kind."""
