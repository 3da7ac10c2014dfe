"""Read a recipe's ``LaunchSpec``: the keys the frameworks' checks read beside the tuned axes, and the environment.

The launch environment is the one the run will have: ``$CUDA_DEVICE_MAX_CONNECTIONS`` when this shell sets it
(the user launches from it), else what the framework's own launch scripts export (``specs/launch.py``).

    launch = launch_spec(reader)        # reader: the recipe's ArgReader
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from primus_ext.recipe.args import ArgReader
from primus_ext.specs import launch
from primus_ext.specs.launch import LaunchSpec

CONNECTIONS_ENV = "CUDA_DEVICE_MAX_CONNECTIONS"


def launch_spec(a: ArgReader, environ: Mapping[str, str] | None = None) -> LaunchSpec:
    """The recipe's ``LaunchSpec``; ``environ`` defaults to this process's environment."""
    env = os.environ if environ is None else environ
    primus = a.primus
    if env.get(CONNECTIONS_ENV):
        connections, source = env[CONNECTIONS_ENV].strip(), f"${CONNECTIONS_ENV}={env[CONNECTIONS_ENV].strip()}"
    elif primus:
        connections, source = launch.PRIMUS_LAUNCH_CONNECTIONS, "Primus's launch scripts export 1 (runner/helpers/envs)"
    else:
        connections, source = launch.MEGATRON_LAUNCH_CONNECTIONS, "Megatron-LM's launch scripts export 1 (examples/)"
    fmt = a.raw("ckpt_format")
    return LaunchSpec(
        framework="primus" if primus else "megatron",
        ckpt_format=fmt if isinstance(fmt, str) else "torch_dist",
        gradient_accumulation_fusion=a.bool("gradient_accumulation_fusion", True),
        overlap_p2p_comm=a.bool("overlap_p2p_comm", True),
        use_turbo_gemm=primus and a.bool("use_turbo_gemm"),  # Primus checks the flag itself, Turbo on or not
        use_turbo_deepep=primus and a.bool("use_turbo_deepep"),
        turbo_deepep_num_cu=a.int("turbo_deepep_num_cu", default=launch.PRIMUS_TURBO_DEEPEP_NUM_CU),
        cuda_device_max_connections=connections,
        connections_source=source,
        env_patches=not a.bool("disable_env_patches"),
    )


__all__ = ["CONNECTIONS_ENV", "launch_spec"]
