"""The ``kimi_delta`` kind's measurement builder (``model.kinds.kimi_delta`` names it: ``Kind.builder``).

It builds Primus's own module, ``KimiDeltaAttention`` (primus/backends/megatron/core/models/hybrid/
kimi_delta_attention.py), behind a pre-norm and a residual add as ``KimiDeltaAttentionLayer`` runs it, at one rank's
sizes (the module asserts TP = 1). That module is Primus's, not megatron-core's: where the ``primus`` package does
not import (this project ships none of its code), the build raises ``UnsupportedLayer`` and the measurement falls
back to the analytic cost. Its kernels are flash-linear-attention's ``chunk_kda`` when fla imports, else Primus's
own PyTorch chunked rule.
"""

from __future__ import annotations

import torch

from primus_ext.measure.build import UnsupportedLayer
from primus_ext.measure.kind_builders import KindBuilder, _BuildContext, _Built

MODULE = "primus.backends.megatron.core.models.hybrid.kimi_delta_attention"
KERNEL_NOTE = f"Primus ({MODULE}) does not import here: the kimi_delta kind's cost is analytic"


class KimiDeltaLayer(torch.nn.Module):
    """Pre-norm + ``KimiDeltaAttention`` + residual add (``kda_hybrid_stack_spec_no_te``'s layer: plain linears,
    no ``gate_norm``)."""

    def __init__(self, config, *, dims, pg_collection):
        super().__init__()
        import importlib

        from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
        from megatron.core.transformer.identity_op import IdentityOp
        from megatron.core.transformer.spec_utils import ModuleSpec, build_module
        from megatron.core.transformer.torch_norm import WrappedTorchNorm

        try:
            kda = importlib.import_module(MODULE)
        except ImportError as err:
            raise UnsupportedLayer(KERNEL_NOTE) from err
        for key in ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
                    "linear_num_key_heads", "linear_num_value_heads"):
            setattr(config, key, getattr(dims, key))
        self.norm = WrappedTorchNorm(config=config, hidden_size=config.hidden_size, eps=config.layernorm_epsilon)
        spec = ModuleSpec(module=kda.KimiDeltaAttention, submodules=kda.KimiDeltaAttentionSubmodules(
            in_proj=ColumnParallelLinear, gate_norm=IdentityOp, out_norm=WrappedTorchNorm,
            out_proj=RowParallelLinear))
        self.mixer = build_module(spec, config=config, layer_number=1, pg_collection=pg_collection)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        out, _ = self.mixer(self.norm(hidden_states), None)
        return hidden_states + out


def _build(ctx: _BuildContext) -> _Built:
    from megatron.core.process_groups_config import ProcessGroupCollection

    shape, dev, a = ctx.shape, ctx.device, ctx.shape.arch
    if shape.tp > 1:
        raise UnsupportedLayer("Primus's KimiDeltaAttention asserts tensor parallel 1")
    module = KimiDeltaLayer(ctx.config, dims=a.dims, pg_collection=ProcessGroupCollection.use_mpu_process_groups())

    def make_inputs() -> dict[str, torch.Tensor | None]:
        x = torch.randn(shape.local_seq, shape.micro_batch_size, a.hidden_size, device=dev, dtype=ctx.dtype)
        return {"hidden_states": x.requires_grad_(True)}
    return module, make_inputs, (), 0, 1


BUILDER = KindBuilder(build=_build)
"""What ``measure.kind_builders.kind_builder("kimi_delta")`` returns."""
