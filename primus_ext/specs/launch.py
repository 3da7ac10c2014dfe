"""What the frameworks check beyond the tuned axes: recipe keys the tuner never changes, and the launch environment.

Megatron-LM's ``validate_args`` and Primus's ROCm checks refuse some configurations for reasons that live outside
the parallel layout: the checkpoint format, gradient-accumulation fusion, Primus-Turbo switches, and environment
variables of the launch (``CUDA_DEVICE_MAX_CONNECTIONS``). A ``LaunchSpec`` carries them, read once from the
recipe and the environment the run will have, so that ``recipe.checks.check`` judges a tuned configuration
exactly as the frameworks will (``recipe/upstream_rules.py``).

    launch = LaunchSpec(framework="primus", ckpt_format="torch_dist")
    launch.connections(fsdp=True)      # "8": Primus's setup patch sets it for FSDP runs
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PRIMUS_LAUNCH_CONNECTIONS = "1"
"""``CUDA_DEVICE_MAX_CONNECTIONS`` that Primus's launch scripts export when the user sets none
(Primus fd1eeab ``runner/helpers/envs/base_env.sh`` and ``examples/run_pretrain.sh``: ``${...:-1}``)."""
PRIMUS_FSDP_CONNECTIONS = "8"
"""What Primus's ``megatron.env.cuda_device_max_connections`` setup patch sets for an FSDP run
(``primus/backends/megatron/patches/env_patches.py``), unless ``disable_env_patches`` is true."""
PRIMUS_TURBO_DEEPEP_NUM_CU = 32
"""Primus-Turbo's DeepEP compute units when a recipe sets none (Primus fd1eeab ``configs/modules/megatron/
primus_turbo.yaml``: ``turbo_deepep_num_cu: 32``)."""
MEGATRON_LAUNCH_CONNECTIONS = "1"
"""Megatron-LM's own launch scripts export ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (``examples/gpt3/
train_gpt3_175b_distributed.sh``, ``examples/llama/train_llama3_8b_h100_fp8.sh``); assumed for a flat Megatron
argument file when the environment states none."""


@dataclass(frozen=True, kw_only=True)
class LaunchSpec:
    """The recipe's fixed keys and the launch environment that the frameworks' argument checks read."""

    framework: Literal["primus", "megatron"] = "megatron"
    """``primus``: launched by Primus (its setup patches and ROCm checks apply); ``megatron``: Megatron-LM's
    ``pretrain_gpt.py`` with the arguments as written."""
    ckpt_format: str = "torch_dist"
    """``--ckpt-format`` (Megatron-LM's default and Primus's ``trainer_base.yaml``: torch_dist)."""
    gradient_accumulation_fusion: bool = True
    """Megatron-LM's default (``--no-gradient-accumulation-fusion`` turns it off)."""
    overlap_p2p_comm: bool = True
    """``--overlap-p2p-communication`` (default on; off, an interleaved schedule needs PP > 2)."""
    use_turbo_gemm: bool = False
    use_turbo_deepep: bool = False
    turbo_deepep_num_cu: int = PRIMUS_TURBO_DEEPEP_NUM_CU
    cuda_device_max_connections: str | None = MEGATRON_LAUNCH_CONNECTIONS
    """The value the launch environment exports (None: unset)."""
    connections_source: str = "Megatron-LM's launch scripts export 1"
    """Where ``cuda_device_max_connections`` comes from, for the messages."""
    env_patches: bool = True
    """Primus's environment patches run (``disable_env_patches`` false); Primus only."""

    def connections(self, *, fsdp: bool) -> str | None:
        """``CUDA_DEVICE_MAX_CONNECTIONS`` as ``validate_args`` will read it for a run with or without FSDP."""
        if self.framework == "primus" and self.env_patches:
            return PRIMUS_FSDP_CONNECTIONS if fsdp else (self.cuda_device_max_connections or "1")
        return self.cuda_device_max_connections


DEFAULT_LAUNCH = LaunchSpec()
"""Megatron-LM as its launch scripts run it, with Megatron's defaults."""

__all__ = ["DEFAULT_LAUNCH", "LaunchSpec"]
