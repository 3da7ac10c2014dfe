"""The ``gated_delta`` kind's measurement builder (``Kind.builder`` names ``BUILDER``): megatron-core 0.16.1's
``ssm/gated_delta_net.py`` ``GatedDeltaNet`` at per-rank sizes behind a pre-norm, as Primus's ``GatedDeltaNetLayer``
runs it (norm -> mixer -> residual add).

``GatedDeltaNet.__init__`` refuses to build without flash-linear-attention (``HAVE_FLA``). Where it is absent (a CPU)
the module is built with its real parameters all the same (``HAVE_FLA`` set for the build only; its ``l2norm`` and
``chunk_gated_delta_rule`` stand-ins raise ``NotImplementedError``), so the parameter count is the real module's and
the measurement falls back to the analytic cost, as Mamba's does (``mamba_stubs``). Where fla imports, nothing is
replaced.
"""

from __future__ import annotations

import torch

from primus_ext.measure.kind_builders import KindBuilder, _BuildContext, _Built

KERNEL_NOTE = "flash-linear-attention (fla) is not installed: the gated_delta kind's cost is analytic"


def _no_kernel(*_args: object, **_kwargs: object) -> None:
    raise NotImplementedError(KERNEL_NOTE)


def gdn_module():
    """``megatron.core.ssm.gated_delta_net``, buildable: fla's names stood in for where fla is absent."""
    from megatron.core.ssm import gated_delta_net as gdn

    if not gdn.HAVE_FLA:
        gdn.HAVE_FLA = True
        gdn.l2norm = gdn.chunk_gated_delta_rule = _no_kernel
    return gdn


class GatedDeltaLayer(torch.nn.Module):
    """Pre-norm (fused into ``in_proj`` under TE) + ``GatedDeltaNet`` + residual add."""

    def __init__(self, config, *, use_te: bool, dims, pg_collection, split: int = 1):
        super().__init__()
        from megatron.core.models.backends import LocalSpecProvider
        from megatron.core.transformer.spec_utils import ModuleSpec, build_module

        gdn = gdn_module()
        for key in ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim"):
            setattr(config, key, getattr(dims, key))
        config.linear_num_key_heads = dims.linear_num_key_heads // split  # one rank's heads in a one-rank world
        config.linear_num_value_heads = dims.linear_num_value_heads // split
        if use_te:
            from megatron.core.extensions.transformer_engine_spec_provider import TESpecProvider

            backend, self.norm = TESpecProvider(), None
        else:
            from megatron.core.transformer.torch_norm import WrappedTorchNorm

            backend = LocalSpecProvider()
            self.norm = WrappedTorchNorm(config=config, hidden_size=config.hidden_size, eps=config.layernorm_epsilon)
        spec = ModuleSpec(module=gdn.GatedDeltaNet, submodules=gdn.GatedDeltaNetSubmodules(
            in_proj=backend.column_parallel_layer_norm_linear() if use_te else backend.column_parallel_linear(),
            out_norm=backend.layer_norm(rms_norm=config.normalization == "RMSNorm", for_qk=False),
            out_proj=backend.row_parallel_linear()))
        self.mixer = build_module(spec, config=config, layer_number=1, pg_collection=pg_collection)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x = hidden_states if self.norm is None else self.norm(hidden_states)
        out, _ = self.mixer(x, attention_mask=None)
        return hidden_states + out


def _build(ctx: _BuildContext) -> _Built:
    from megatron.core.process_groups_config import ProcessGroupCollection

    shape, dev, a = ctx.shape, ctx.device, ctx.shape.arch
    module = GatedDeltaLayer(ctx.config, use_te=ctx.use_te, dims=a.dims,
                             pg_collection=ProcessGroupCollection.use_mpu_process_groups(),
                             split=1 if ctx.distributed else shape.tp)

    def make_inputs() -> dict[str, torch.Tensor | None]:
        x = torch.randn(shape.local_seq // ctx.sp_split, shape.micro_batch_size, a.hidden_size, device=dev,
                        dtype=ctx.dtype)
        return {"hidden_states": x.requires_grad_(True)}
    return module, make_inputs, (), 0, 1


BUILDER = KindBuilder(build=_build)
