"""Running real megatron-core (>= 0.16) layers without a GPU, and the process-group context.

Usage::

    from primus_ext.measure.shims import apply_cpu_shims, parallel_context
    apply_cpu_shims()                       # no-op when a CUDA device will be used
    with parallel_context(tp=1, device="cpu"):
        ...build and run megatron-core modules...

The five CPU workarounds (verified facts: ``shared/notes/megatron-core-on-cpu.md``):

1. ``model_parallel_cuda_manual_seed`` asserts CUDA: ``parallel_context`` seeds with
   ``inference_rng_tracker=True`` on CPU (dropout still works).
2. ~175 hard-coded ``torch.cuda.current_device()`` allocations: on CPU it returns ``cpu``.
3. The 0.16.1 MoE router names ``te_general_gemm`` even without transformer-engine (any device):
   define it as ``None`` when TE is absent (with a sixth no-TE fix for MLA, ``apply_no_te_shims``).
4. Sequence parallelism refuses torch norms: :class:`SPTorchNorm` builds the torch norm and marks
   its parameters ``sequence_parallel`` (put into the spec by ``build.py`` for the local spec).
5. Activation recompute saves/restores the CUDA RNG state: no-ops on CPU.

Three more found by this project (megatron-core 0.16.1):

7. Output-discarding recompute (``layernorm``, ``moe_act``, ``mla_up_proj``) goes through
   ``CheckpointWithoutOutput``, whose ``fp8`` flag is ``fp8 is not None`` (true for the default
   ``False``), so it always calls Transformer Engine's ``FP8GlobalStateManager`` /
   ``activation_recompute_forward`` / ``fp8_autocast``: without TE they are given their FP8-off
   behaviour (not enabled, no recipe, null contexts) in ``tensor_parallel.random`` (any device).
8. The sliding-window mask (``get_sliding_window_causal_mask``) is built with ``device="cuda"``: on CPU
   it is built on ``torch.cuda.current_device()`` (that is, the CPU, by shim 2).
9. A biased expert (GPT-OSS: ``add_bias_linear`` under per-token probability scaling) adds its fc2 bias
   in place (``mlp.py``: ``output += ...``) to what the local spec's ``RowParallelLinear`` returns, which
   on one TP rank is its input passed through ``_ReduceFromModelParallelRegion`` as-is; autograd forbids
   in-place writes to that, so without TE (any device) the Function is bypassed on one-rank groups,
   where it is the identity forward and backward.

Shims 1, 2, 5, 8 are applied only when no CUDA device is used, so nothing leaks onto a GPU run; a
later GPU run in the same process is refused by ``apply_cpu_shims`` being irreversible, which is
why callers decide the device first (``resolve_device``). ``MLACoreAttention`` repairs the
local spec's MLA core attention (megatron's ``DotProductAttention`` rejects the ``k_channels`` /
``v_channels`` MLA passes); it is a spec substitution, not a global patch.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import torch

_APPLIED: dict[str, bool] = {"cpu": False, "no_te": False}


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``None`` = CUDA when present, else CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def te_importable() -> bool:
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        return False
    return True


def apply_no_te_shims() -> None:
    """Workarounds for megatron-core 0.16.1 without transformer-engine (any device), idempotent.

    3. The MoE router names ``te_general_gemm``: define it as ``None``.
    6. ``multi_latent_attention`` believes TE is present (its TE import resolves to mocks) and
       calls ``isinstance(linear_proj, <mock>)``: tell it ``HAVE_TE = False``.
    7. ``CheckpointWithoutOutput`` calls TE's FP8 state: give ``tensor_parallel.random`` its FP8-off stand-ins.
    9. A one-rank tensor-parallel all-reduce returns a tensor biased experts modify in place: bypass it.
    """
    if _APPLIED["no_te"] or te_importable():
        return
    import megatron.core.tensor_parallel.random as tp_random
    import megatron.core.transformer.moe.moe_utils as moe_utils
    import megatron.core.transformer.multi_latent_attention as mla

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    mla.HAVE_TE = False
    if not tp_random.HAVE_TE:
        tp_random.FP8GlobalStateManager = _FP8Off
        tp_random.activation_recompute_forward = _null_context
        tp_random.fp8_autocast = _null_context
    _bypass_one_rank_reduce()
    _APPLIED["no_te"] = True


def _bypass_one_rank_reduce() -> None:
    """Shim 9: ``_ReduceFromModelParallelRegion`` (all-reduce forward, copy backward) skipped for a group of
    one, so its output is an ordinary tensor the biased expert's in-place bias add may modify."""
    from megatron.core.tensor_parallel import mappings

    function = mappings._ReduceFromModelParallelRegion
    if getattr(function, "_one_rank_bypass", False):
        return
    reduce = function.apply

    def apply(input_: torch.Tensor, group: object) -> torch.Tensor:
        if group is not None and group.size() == 1:
            return input_
        return reduce(input_, group)

    function.apply = staticmethod(apply)
    function._one_rank_bypass = True


class _FP8Off:
    """What Transformer Engine's ``FP8GlobalStateManager`` answers outside any FP8 region."""

    @staticmethod
    def is_fp8_enabled() -> bool:
        return False

    @staticmethod
    def get_fp8_recipe() -> None:
        return None


def _null_context(*_args: object, **_kwargs: object) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


def apply_cpu_shims(device: str | torch.device | None = None) -> bool:
    """Apply the CPU workarounds once (idempotent). Returns True when the CPU shims are active.

    Does nothing but the device-independent no-TE fixes when ``device`` is a CUDA device.
    """
    apply_no_te_shims()
    if resolve_device(device).type == "cuda":
        if _APPLIED["cpu"]:
            raise RuntimeError("CPU shims are already active in this process; run GPU work in a fresh process")
        return False
    if _APPLIED["cpu"]:
        return True
    import megatron.core.tensor_parallel.random as tp_random

    torch.cuda.current_device = lambda: torch.device("cpu")  # workaround 2

    def _no_rng_state(*_args: object, **_kwargs: object) -> None:  # workaround 5
        return None

    tp_random._get_cuda_rng_state = _no_rng_state
    tp_random._set_cuda_rng_state = _no_rng_state
    import megatron.core.fusions.fused_softmax as fused_softmax
    import megatron.core.transformer.utils as transformer_utils

    from primus_ext.measure.attention import window_keep_mask

    def window_mask_here(sq: int, skv: int, window_size: tuple[int, int]) -> torch.Tensor:  # workaround 8
        return ~window_keep_mask(sq, skv, window_size, torch.device(torch.cuda.current_device()))

    transformer_utils.get_sliding_window_causal_mask = window_mask_here
    fused_softmax.get_sliding_window_causal_mask = window_mask_here
    _APPLIED["cpu"] = True
    return True


class SPTorchNorm:
    """Workaround 4: torch LayerNorm/RMSNorm usable under sequence parallelism.

    Same constructor as megatron's ``WrappedTorchNorm``; the parameters are flagged
    ``sequence_parallel`` so megatron all-reduces their grads over the TP group like TE's norms.
    """

    def __new__(cls, config, hidden_size: int, eps: float = 1e-5, **_kwargs: object) -> torch.nn.Module:
        norm_cls = {"LayerNorm": torch.nn.LayerNorm, "RMSNorm": torch.nn.RMSNorm}[config.normalization]
        norm = norm_cls(normalized_shape=hidden_size, eps=eps)
        for param in norm.parameters():
            param.sequence_parallel = bool(config.sequence_parallel)
        return norm


def mla_core_attention_class() -> type:
    """``DotProductAttention`` accepting MLA's ``k_channels``/``v_channels`` (local spec only)."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    class MLACoreAttention(DotProductAttention):
        """Unfused attention whose output width is heads x ``v_channels`` (MLA's v_head_dim)."""

        def __init__(self, *args, k_channels: int | None = None, v_channels: int | None = None, **kwargs):
            super().__init__(*args, **kwargs)
            if v_channels is not None:
                self.hidden_size_per_partition = v_channels * self.num_attention_heads_per_partition

    return MLACoreAttention


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, kw_only=True)
class ParallelLayout:
    """The model-parallel sizes of one measurement (``world = rank count``)."""

    tp: int = 1
    ep: int = 1
    etp: int = 1
    cp: int = 1
    world: int = 1


@contextlib.contextmanager
def parallel_context(layout: ParallelLayout | None = None, *, device: str | torch.device | None = None, rank: int = 0,
                     master_port: int | None = None, seed: int = 1234,
                     backend: str | None = None) -> Iterator[torch.device]:
    """Initialise torch.distributed (gloo on CPU, nccl on GPU unless ``backend`` says otherwise) and
    megatron's parallel_state.

    With the default layout this is a one-rank world in the current process. For multi-rank
    layouts every rank calls it (``spawn.py``) with the same ``master_port``. Torn down on exit.
    """
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel

    layout = layout or ParallelLayout()
    dev = resolve_device(device)
    cpu = apply_cpu_shims(dev)
    if dist.is_initialized():
        raise RuntimeError("torch.distributed is already initialised in this process")
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(master_port or free_port())
    if dev.type == "cuda":
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    dist.init_process_group(backend or ("gloo" if cpu else "nccl"), rank=rank, world_size=layout.world)
    try:
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=layout.tp,
            context_parallel_size=layout.cp,
            expert_model_parallel_size=layout.ep,
            expert_tensor_parallel_size=layout.etp,
        )
        tensor_parallel.model_parallel_cuda_manual_seed(seed, inference_rng_tracker=cpu)  # workaround 1
        yield dev
    finally:
        parallel_state.destroy_model_parallel()
        if dist.is_initialized():
            dist.destroy_process_group()
