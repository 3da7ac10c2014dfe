"""The DeepSeek-V4 kinds' measurement builder (``model.kinds.deepseek_v4`` names it: ``Kind.builder``).

Primus's ``DeepseekV4HybridLayer`` (primus/backends/megatron/core/models/deepseek_v4/deepseek_v4_block.py) is
Primus's module, not megatron-core's, and its attention runs Primus's ROCm Triton / Gluon kernels
(transformer/v4_attention_kernels), its MoE Primus-Turbo's DeepEP dispatcher: this project ships none of that code, so
the build raises ``UnsupportedLayer`` and the measurement falls back to the analytic cost (``measure.build``'s rule
for a layer it cannot build), with this sentence as the reason.
"""

from __future__ import annotations

from primus_ext.measure.build import UnsupportedLayer
from primus_ext.measure.kind_builders import KindBuilder, _BuildContext, _Built

KERNEL_NOTE = ("Primus's DeepSeek-V4 layer (deepseek_v4_block.py: its Triton / Gluon attention kernels, Turbo "
               "DeepEP) is not built by primus-ext: the DeepSeek-V4 kinds' costs are analytic")


def _build(ctx: _BuildContext) -> _Built:
    raise UnsupportedLayer(KERNEL_NOTE)


BUILDER = KindBuilder(build=_build)
"""What ``measure.kind_builders.kind_builder`` returns for the DeepSeek-V4 attention kinds."""
MOE_BUILDER = KindBuilder(build=_build, experts=True)
"""What it returns for the DeepSeek-V4 MoE kinds."""
