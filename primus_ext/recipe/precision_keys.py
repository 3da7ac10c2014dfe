"""The precision keys of a recipe (``fp8`` / ``fp4`` / ``bf16`` / ``fp16``, ``fp8_recipe``, ``fp4_recipe``,
``fp4_param``) -> the ``ExecutionSpec`` precision fields, with megatron-core's refusals as problems of the reader.
Used by ``recipe.resolve``.
"""

from __future__ import annotations

from primus_ext.model.fp4 import fp4_problem
from primus_ext.recipe.args import ArgReader
from primus_ext.specs import SystemSpec


def precision(a: ArgReader) -> str:
    fp8, fp4 = a.raw("fp8"), a.raw("fp4")
    if fp4 not in (None, False):  # megatron-core TransformerConfig: fp4 is 'e2m1' or None, never with fp8
        if fp8 not in (None, False):
            a.bad("fp4", "fp4 and fp8 are both set (megatron-core refuses: 'fp4 and fp8 cannot be used "
                  "simultaneously')", fix="set one of them to null")
        elif fp4 not in ("e2m1", True):
            a.bad("fp4", "must be e2m1", fix="set fp4: e2m1, or null for no FP4")
        return "fp4"
    if fp8 not in (None, False):
        if fp8 not in ("e4m3", "hybrid", True):
            a.bad("fp8", "must be e4m3 or hybrid", fix="set fp8: hybrid (or e4m3), or null for no FP8")
        return "fp8"
    bf16, fp16 = a.bool("bf16"), a.bool("fp16")
    if bf16 and fp16:
        a.bad("fp16", "bf16 and fp16 are both set", fix="set one of them to false")
    return "bf16" if bf16 else "fp16" if fp16 else "fp32"


def fp8_recipe(a: ArgReader, system: SystemSpec) -> str:
    # megatron-core arguments.py --fp8-recipe: tensorwise, delayed (default), mxfp8, blockwise, custom; plus rowwise,
    # torchao's float8 recipe of torchtitan runs (torchtitan ``[float8] recipe_name = "rowwise"``), which
    # Transformer Engine lacks (``measure.build`` measures it as tensorwise)
    value = a.choice("fp8_recipe", ("delayed", "tensorwise", "mxfp8", "blockwise", "rowwise", "custom"), "delayed")
    gpu = system.gpu
    if value == "mxfp8" and a.raw("fp8") not in (None, False) and gpu.runs("mxfp8") is False:
        a.warnings.append(f"fp8_recipe mxfp8 needs MX (block-scaled) tensor cores; {gpu.name} ({gpu.family}) "
                          f"has none: Transformer Engine will refuse it there")
    if value == "custom":
        a.warnings.append("fp8_recipe custom (a user quantisation factory) is projected as delayed per-tensor "
                          "scaling")
        return "delayed"
    return value or "delayed"


def _fp4_profiles() -> str:
    """The profiles whose tensor cores run each FP4 recipe (their capabilities), e.g. ``b200, ... with nvfp4``."""
    from primus_ext.hardware import list_profiles, load_gpu

    by_recipe = {r: [p for p in list_profiles() if load_gpu(p).runs(r) and load_gpu(p).fp4_dense_tflops > 0]
                 for r in ("nvfp4", "mxfp4")}
    return "; ".join(f"{', '.join(names)} with {r}" for r, names in by_recipe.items() if names)


def fp4_recipe(a: ArgReader, system: SystemSpec, precision: str) -> str:
    """megatron-core 0.16 ``fp4_recipe``: nvfp4 (default) or custom; Primus adds mxfp4 (its fp4_utils.py). An FP4
    recipe on a GPU that cannot run it is refused with the sentence of ``model.fp4.fp4_problem``."""
    value = a.choice("fp4_recipe", ("nvfp4", "mxfp4", "custom"), "nvfp4") or "nvfp4"
    if precision != "fp4":
        if a.bool("fp4_param"):
            a.bad("fp4_param", "fp4_param needs fp4 (megatron-core: 'fp4_param must be used together with fp4 "
                  "mode')", fix="set fp4: e2m1, or fp4_param: false")
        return value if value != "custom" else "nvfp4"
    if value == "custom":
        a.warnings.append("fp4_recipe custom (a user quantisation factory) is projected as nvfp4")
        value = "nvfp4"
    problem = fp4_problem(system.gpu, value)
    if problem:
        a.bad("fp4", problem, fix="project this recipe in fp8 (fp4: null, fp8: hybrid), or on a GPU with FP4 tensor "
              f"cores ({_fp4_profiles()})")
    return value
