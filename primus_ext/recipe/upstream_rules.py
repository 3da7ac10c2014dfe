"""The frameworks' own argument checks that touch a tuned axis and read keys beside it (``LaunchSpec``).

Each rule mirrors one assertion of Megatron-LM's ``validate_args`` (``megatron/training/arguments.py`` at
d3528a2, the commit Primus fd1eeab pins; the same assertions are in core_v0.14.0 .. core_v0.17.0 at other lines,
and in core_v0.13.0 except Megatron-FSDP's fsdp_dtensor rule, which is applied there too: a tuned recipe must pass
every supported release) or of Primus's
``validate_args_on_rocm`` (``primus/backends/megatron/patches/args/rocm_arg_validation.py``, fd1eeab), cited
beside it. ``benchmarks/tuned_recipes_accepted.py`` runs the real validators over every tuned Primus recipe;
``tests/recipe/test_upstream_rules.py`` gives each rule one configuration the framework refuses and one it
accepts.

    problems = upstream_problems(model, execution, system)
"""

from __future__ import annotations

from primus_ext.errors import Problem
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

ARGS = "Megatron-LM arguments.py"
ROCM = "Primus rocm_arg_validation.py"
TURBO_FP8_RECIPES = ("tensorwise", "blockwise", "mxfp8")  # rocm_arg_validation.py:145
TURBO_DEEPEP_MAX_CU_AT_EP16 = 32  # rocm_arg_validation.py:233
CONNECTIONS_RULE_LIFTED_ARCH = 10
"""``get_device_arch_version()`` from which arguments.py:1166 lifts the TP/CP connections rule (compute capability
10.x: B200 / GB200 / B300 / GB300); Hopper is 9, and ROCm's gfx942 / gfx950 report major 9 (the profile's
``device_arch``, hardware/families.yaml)."""


def _connections(e: ExecutionSpec, s: SystemSpec, out: list[Problem]) -> None:
    launch, fsdp = e.launch, e.fsdp != "none"
    value = launch.connections(fsdp=fsdp)
    shown = "unset" if value is None else value
    where = ("Primus sets 8 for FSDP runs" if launch.framework == "primus" and launch.env_patches and fsdp
             else launch.connections_source)
    if fsdp and value == "1":  # arguments.py:842 (torch FSDP2), :921 (Megatron-FSDP)
        key = "use_torch_fsdp2" if e.fsdp == "torch_fsdp2" else "use_megatron_fsdp"
        out.append(Problem(path=key, value=True,
                           message=f"FSDP needs CUDA_DEVICE_MAX_CONNECTIONS > 1 ({ARGS}:842/921); the launch "
                                   f"environment has {shown} ({where})",
                           fix="export CUDA_DEVICE_MAX_CONNECTIONS=8 where you launch, or keep DDP / the "
                               "distributed optimizer"))
    # arguments.py:1165-1190 (the condition at 1166): before Blackwell, TP or CP without FSDP and without EP
    # overlap needs exactly 1
    before_blackwell = s.gpu.device_arch < CONNECTIONS_RULE_LIFTED_ARCH
    if (e.tp > 1 or e.cp > 1) and before_blackwell and not fsdp and not e.overlap_moe_expert_parallel_comm \
            and value != "1":
        out.append(Problem(path="CUDA_DEVICE_MAX_CONNECTIONS", value=value,  # not TP's path: FSDP would lift it
                           message=f"TP={e.tp} / CP={e.cp} without FSDP needs CUDA_DEVICE_MAX_CONNECTIONS=1 on GPUs "
                                   f"before Blackwell ({ARGS}:1190); the launch environment has {shown} ({where})",
                           fix="export CUDA_DEVICE_MAX_CONNECTIONS=1 where you launch, or use TP=CP=1"))


def _fsdp(m: ModelSpec, e: ExecutionSpec, out: list[Problem]) -> None:
    fmt = e.launch.ckpt_format
    if e.fsdp == "torch_fsdp2":
        # the path is the FSDP switch: the tuner chose it, and a structural path (EP, TP) would let the
        # exhaustive search prune layouts whose other shardings are legal (tune/legality.STRUCTURAL_PATHS)
        rules = [
            (e.pp == 1, f"does not support pipeline parallelism (PP={e.pp}; {ARGS}:828)",
             "set PP=1 or use Megatron-FSDP / the distributed optimizer"),
            (e.ep == 1, f"does not support expert parallelism (EP={e.ep}; {ARGS}:830)",
             "set EP=1 or use Megatron-FSDP / the distributed optimizer"),
            (not e.launch.gradient_accumulation_fusion, f"does not support gradient_accumulation_fusion ({ARGS}:834)",
             "set gradient_accumulation_fusion: false, or keep DDP / the distributed optimizer"),
            (fmt in ("torch_dist", "torch_dcp"), f"needs ckpt_format torch_dist or torch_dcp, not {fmt} ({ARGS}:836)",
             "set ckpt_format: torch_dist"),
            (m.untie_embeddings_and_output_weights, f"needs untie_embeddings_and_output_weights ({ARGS}:838)",
             "untie the embedding and output weights (a model change) or keep DDP"),
            (e.precision != "fp16", f"does not support fp16 ({ARGS}:839)", "use bf16"),
        ]
        for ok, message, fix in rules:
            if not ok:
                out.append(Problem(path="use_torch_fsdp2", value=True, message=f"torch FSDP2 {message}", fix=fix))
    if e.fsdp == "megatron_fsdp" and fmt != "fsdp_dtensor":  # arguments.py:924
        out.append(Problem(path="ckpt_format", value=fmt,
                           message=f"Megatron-FSDP only supports ckpt_format fsdp_dtensor ({ARGS}:924)",
                           fix="set ckpt_format: fsdp_dtensor (checkpoints change format) or keep DDP / the "
                               "distributed optimizer"))
    if fmt == "fsdp_dtensor" and e.fsdp != "megatron_fsdp":  # arguments.py:1288
        out.append(Problem(path="ckpt_format", value=fmt,
                           message=f"fsdp_dtensor checkpoints need Megatron-FSDP ({ARGS}:1288)",
                           fix="set use_megatron_fsdp: true or ckpt_format: torch_dist"))
    if fmt == "torch_dcp" and (e.fsdp != "torch_fsdp2" or e.tp > 1 or e.pp > 1):  # arguments.py:1280-1284
        out.append(Problem(path="ckpt_format", value=fmt,
                           message=f"torch_dcp checkpoints need torch FSDP2 with TP=PP=1 ({ARGS}:1280-1284)",
                           fix="set ckpt_format: torch_dist, or use_torch_fsdp2 with TP=PP=1"))


def _pipeline(e: ExecutionSpec, out: list[Problem]) -> None:
    # arguments.py:792-800: the interleaved schedule needs PP > 2 unless P2P communication overlaps
    if e.vpp > 1 and e.pp == 2 and not e.launch.overlap_p2p_comm:
        out.append(Problem(path="virtual_pipeline_model_parallel_size", value=e.vpp,
                           message=f"the interleaved schedule with PP=2 needs overlap_p2p_comm ({ARGS}:799)",
                           fix="set overlap_p2p_comm: true, PP > 2, or no virtual stages"))


def _primus(e: ExecutionSpec, out: list[Problem]) -> None:
    launch = e.launch
    if launch.framework != "primus":
        return
    if e.precision == "fp8" and launch.use_turbo_gemm and e.fp8_recipe not in TURBO_FP8_RECIPES:  # :145
        out.append(Problem(path="fp8_recipe", value=e.fp8_recipe,
                           message=f"Primus-Turbo GEMMs (use_turbo_gemm) run fp8 only with the "
                                   f"{'/'.join(TURBO_FP8_RECIPES)} recipes ({ROCM}:145)",
                           fix="set fp8_recipe: tensorwise (or blockwise), or use_turbo_gemm: false"))
    if launch.use_turbo_deepep:
        if e.moe_shared_expert_overlap:  # rocm_arg_validation.py:224
            out.append(Problem(path="moe_shared_expert_overlap", value=True,
                               message=f"Primus-Turbo DeepEP does not support it ({ROCM}:224)",
                               fix="set moe_shared_expert_overlap: false"))
        if e.ep >= 16 and launch.turbo_deepep_num_cu > TURBO_DEEPEP_MAX_CU_AT_EP16:  # rocm_arg_validation.py:233
            out.append(Problem(path="expert_model_parallel_size", value=e.ep,
                               message=f"Primus-Turbo DeepEP with EP >= 16 needs turbo_deepep_num_cu <= 32 (it is "
                                       f"{launch.turbo_deepep_num_cu}; {ROCM}:233)",
                               fix="use EP < 16, or set turbo_deepep_num_cu: 32"))


def upstream_problems(model: ModelSpec, execution: ExecutionSpec, system: SystemSpec) -> list[Problem]:
    """Every refusal of Megatron-LM's / Primus's argument checks that reads keys beside the tuned axes."""
    out: list[Problem] = []
    _connections(execution, system, out)
    _fsdp(model, execution, out)
    _pipeline(execution, out)
    _primus(execution, out)
    return out


__all__ = ["upstream_problems"]
