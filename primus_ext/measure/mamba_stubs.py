"""Import megatron-core's Mamba modules where their CUDA kernels are missing (a CPU machine), to build them.

    from primus_ext.measure.mamba_stubs import mamba_modules
    mixer_mod = mamba_modules()      # megatron.core.ssm.mamba_mixer, importable; stubbed names listed in STUBBED

megatron-core 0.16.1 ``ssm/mamba_mixer.py`` imports ``mamba_ssm`` (SSD scan, gated RMSNorm),
``causal_conv1d`` and, through ``inference/contexts/attention_context/triton/tensor_ops.py``, ``triton``; its
``__init__`` refuses to build without ``mamba_ssm`` and ``einops``. For each one that does not import, a stand-in
module goes into ``sys.modules`` only while the mixer module is imported, then is removed again (torch's own
triton probe never sees it): the kernels raise ``NotImplementedError`` when called, the gated norm is a module
with the real one's single ``weight`` [d_inner / TP] (mamba_ssm ops/triton/layernorm_gated.py ``RMSNorm``: no
bias), and ``einops`` (used only in ``forward``) is declared present, its functions refusing like the kernels.
So the modules build with their real parameters (counted exactly) and their forward says it cannot run; where
the real packages import (a GPU machine with mamba-ssm), nothing is replaced.
"""

from __future__ import annotations

import importlib
import sys
import types

import torch

STUBBED: list[str] = []
"""The modules stood in for when the mixer was imported (empty where the real kernels import)."""

KERNEL_NOTE = ("the Mamba-2 SSD scan / causal conv1d kernels (mamba_ssm, causal_conv1d) are not installed: "
               "the mamba kind's cost is analytic")


def _missing(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return True
    return False


def _no_kernel(*_args: object, **_kwargs: object) -> None:
    raise NotImplementedError(KERNEL_NOTE)


class _GatedRMSNorm(torch.nn.Module):
    """Stand-in for mamba_ssm's gated ``RMSNorm``: its parameters only (one ``weight`` over ``hidden_size``)."""

    def __init__(self, hidden_size: int, eps: float = 1e-5, group_size: int | None = None,
                 norm_before_gate: bool = True, device=None, dtype=None):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)

    def forward(self, *_args: object, **_kwargs: object) -> torch.Tensor:
        raise NotImplementedError(KERNEL_NOTE)


def _stand_ins() -> dict[str, types.ModuleType]:
    mods: dict[str, types.ModuleType] = {}
    if _missing("mamba_ssm.ops.triton.ssd_combined"):
        for name in ("mamba_ssm", "mamba_ssm.ops", "mamba_ssm.ops.triton"):
            mods[name] = types.ModuleType(name)
        ssd = mods["mamba_ssm.ops.triton.ssd_combined"] = types.ModuleType("mamba_ssm.ops.triton.ssd_combined")
        ssd.mamba_chunk_scan_combined = ssd.mamba_split_conv1d_scan_combined = _no_kernel  # type: ignore[attr-defined]
        norm = mods["mamba_ssm.ops.triton.layernorm_gated"] = types.ModuleType("mamba_ssm.ops.triton.layernorm_gated")
        norm.RMSNorm = _GatedRMSNorm  # type: ignore[attr-defined]
        upd = mods["mamba_ssm.ops.triton.selective_state_update"] = types.ModuleType("selective_state_update")
        upd.selective_state_update = _no_kernel  # type: ignore[attr-defined]
    if _missing("causal_conv1d"):
        conv = mods["causal_conv1d"] = types.ModuleType("causal_conv1d")
        conv.causal_conv1d_fn = conv.causal_conv1d_update = _no_kernel  # type: ignore[attr-defined]
        varlen = mods["causal_conv1d.causal_conv1d_varlen"] = types.ModuleType("causal_conv1d_varlen")
        varlen.causal_conv1d_varlen_states = _no_kernel  # type: ignore[attr-defined]
    if _missing("triton"):
        # the triton inference kernels' decorators and annotations only (never called in training)
        tri = mods["triton"] = types.ModuleType("triton")
        lang = mods["triton.language"] = types.ModuleType("triton.language")
        tri.jit = lambda fn=None, **_kw: fn if fn is not None else (lambda f: f)  # type: ignore[attr-defined]
        tri.language = lang  # type: ignore[attr-defined]
        lang.constexpr = int  # type: ignore[attr-defined]
    return mods


def mamba_modules() -> types.ModuleType:
    """``megatron.core.ssm.mamba_mixer``, imported with stand-ins for whichever kernels are absent."""
    if "megatron.core.ssm.mamba_mixer" in sys.modules:
        return sys.modules["megatron.core.ssm.mamba_mixer"]
    import megatron.core.transformer.transformer_layer  # noqa: F401
    import torch._dynamo  # noqa: F401  (torch's triton probe runs before any stand-in exists)

    mods = _stand_ins()
    sys.modules.update(mods)
    try:
        mixer = importlib.import_module("megatron.core.ssm.mamba_mixer")
        importlib.import_module("megatron.core.ssm.mamba_layer")
        importlib.import_module("megatron.core.ssm.mamba_block")
        importlib.import_module("megatron.core.ssm.mlp_layer")
    finally:
        for name in mods:
            sys.modules.pop(name, None)
    STUBBED[:] = sorted(mods)
    if _missing("einops"):  # used by forward only, which the stand-in kernels refuse anyway
        cp = importlib.import_module("megatron.core.ssm.mamba_context_parallel")
        mixer.HAVE_EINOPS = cp.HAVE_EINOPS = True
        mixer.rearrange = mixer.repeat = cp.repeat = _no_kernel
        STUBBED.append("einops")
    return mixer
