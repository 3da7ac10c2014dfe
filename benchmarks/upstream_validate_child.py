"""Run Primus's own loader, argument patches and validators on Primus experiment files (child process).

Started by ``benchmarks/tuned_recipes_accepted.py`` with a Primus checkout and a Megatron-LM checkout first on
PYTHONPATH. Reads one JSON request per line on stdin (``{"path": ..., "world": 16}``), answers one JSON line per
request on stdout (``{"path", "world", "accepted", "stage", "error", "schema_unknown"}``). Per file, as Primus's
training runtime does (``primus/core/runtime/train_runtime.py``):

1. ``load_primus_config`` + ``get_module_config(cfg, "pre_trainer")`` (Primus's own config loader);
2. ``MegatronArgBuilder().update(params).finalize()`` with WORLD_SIZE = ``world`` (the torchrun environment);
3. Primus's ``setup`` and ``build_args`` patch phases (``run_patches``: the CUDA_DEVICE_MAX_CONNECTIONS patch,
   the sequence-parallel/TP=1 patch, ...), then params merged back over the args as the runtime merges them;
4. Megatron-LM's ``validate_args`` then Primus's ``validate_args_on_rocm`` (the pair Primus's
   ``megatron.validate_args`` patch installs);
5. Primus's config schema check (``primus/core/config/schema_check.py``: ``scan_file`` against the schema it
   builds from Megatron-LM's ``arguments.py`` and Primus's own readers), the check Primus's CI runs.

The environment each file starts from is what Primus's launch scripts export (``runner/helpers/envs/
base_env.sh``: ``CUDA_DEVICE_MAX_CONNECTIONS=1``, ``NVTE_ROCM_ENABLE_MXFP8=1``); the one GPU query stubbed is
Megatron-LM's ``get_device_arch_version`` (9: MI300X / MI325X are gfx942, ``torch.cuda.get_device_properties``
major 9 on ROCm) and ``torch.cuda.get_device_capability`` ((9, 4), read by the grouped-GEMM check). Nothing
here is upstream code; nothing upstream is modified on disk.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

LAUNCH_ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NVTE_ROCM_ENABLE_MXFP8": "1"}  # Primus base_env.sh defaults
DEVICE_ARCH_MAJOR = 9  # gfx942 (MI300X / MI325X): device properties major on ROCm
DEVICE_CAPABILITY = (9, 4)  # torch.cuda.get_device_capability() on gfx942 (ROCm reports gfx9.4.2 as 9.4)


class _Quiet:
    """Primus's logger before ``setup_logger``: swallow every call."""

    def __getattr__(self, name):
        return lambda *a, **k: None


def _setup(primus_root: Path):
    import primus.core.utils.logger as primus_logger

    primus_logger._logger = _Quiet()
    import megatron.training.arguments as megatron_arguments
    import torch
    from primus.backends.megatron.argument_builder import MegatronArgBuilder
    from primus.backends.megatron.patches.args.rocm_arg_validation import validate_args_on_rocm
    from primus.core.config import schema_check
    from primus.core.config.primus_config import get_module_config, load_primus_config
    from primus.core.patches.patch_runner import run_patches
    from primus.core.utils.yaml_utils import merge_namespace

    megatron_arguments.get_device_arch_version = lambda: DEVICE_ARCH_MAJOR
    torch.cuda.get_device_capability = lambda *a, **k: DEVICE_CAPABILITY  # grouped-GEMM check (MoE)
    schema = None
    upstream = schema_check.SCHEMA_LOADERS["megatron"](primus_root)
    if upstream is not None:
        schema = (schema_check.extend_schema(primus_root, "megatron", upstream),
                  schema_check.build_allowlist(primus_root, "megatron"))
    return dict(MegatronArgBuilder=MegatronArgBuilder, validate_args=megatron_arguments.validate_args,
                validate_args_on_rocm=validate_args_on_rocm, load=load_primus_config, module=get_module_config,
                run_patches=run_patches, merge=merge_namespace, schema=schema, scan=schema_check.scan_file)


def _check(api, primus_root: Path, path: str, world: int) -> dict:
    os.environ.update(LAUNCH_ENV, WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0")
    out = {"path": path, "world": world, "accepted": False, "stage": "load", "error": None, "schema_unknown": None}
    if api["schema"] is not None:
        found, _ = api["scan"](Path(path), "megatron", *api["schema"], rel=path)
        out["schema_unknown"] = sorted(f.key for f in found)
    try:
        cfg = api["load"](Path(path))
        module = api["module"](cfg, "pre_trainer")
        out["stage"] = "args"
        args = api["MegatronArgBuilder"]().update(module.params).finalize()
        extra = {"backend_args": args, "primus_config": cfg._legacy, "module_config": module, "runtime_state": None}
        for phase in ("setup", "build_args"):
            out["stage"] = f"patches:{phase}"
            api["run_patches"](backend="megatron", phase=phase, backend_version=None,
                               model_name=getattr(module, "model", None), module_name="pre_trainer", extra=extra)
        api["merge"](args, module.params, allow_override=False, excepts=[])
        out["stage"] = "validate_args"
        api["validate_args"](args)
        out["stage"] = "validate_args_on_rocm"
        api["validate_args_on_rocm"](args)
        out["accepted"], out["stage"] = True, "done"
        out["cuda_device_max_connections"] = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")
    except BaseException as err:  # every refusal is a result
        out["error"] = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
    return out


def main() -> int:
    primus_root = Path(sys.argv[1]).resolve()
    with contextlib.redirect_stdout(io.StringIO()):
        api = _setup(primus_root)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        with contextlib.redirect_stdout(io.StringIO()):
            result = _check(api, primus_root, request["path"], int(request["world"]))
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
