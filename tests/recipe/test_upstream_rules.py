"""The frameworks' own argument checks beside the tuned axes: one configuration each refuses, one it accepts.

The refusals mirror Megatron-LM's ``validate_args`` (arguments.py at d3528a2, the commit Primus pins) and Primus's
``validate_args_on_rocm``; ``benchmarks/tuned_recipes_accepted.py`` runs the real ones over every tuned Primus
recipe. Flat recipes here launch as Megatron-LM (its scripts export CUDA_DEVICE_MAX_CONNECTIONS=1); experiments
as Primus (its setup patch sets 8 for FSDP runs).
"""

from __future__ import annotations

import pytest
from recipe_data import BASE, MOE

from primus_ext.errors import RecipeError
from primus_ext.recipe import load_recipe

ONE = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
EIGHT = {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}
MFSDP = {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"}
FSDP2 = {"use_torch_fsdp2": True, "gradient_accumulation_fusion": False, "untie_embeddings_and_output_weights": True}
TP2 = {"tensor_model_parallel_size": 2, "sequence_parallel": True}

# (name, base, refused changes, env, accepted changes, env, path, word of the message)
PAIRS = [
    ("mfsdp_ckpt", BASE, MFSDP, EIGHT, {**MFSDP, "ckpt_format": "fsdp_dtensor"}, EIGHT, "ckpt_format", ":924"),
    ("mfsdp_connections", BASE, {**MFSDP, "ckpt_format": "fsdp_dtensor"}, ONE,
     {**MFSDP, "ckpt_format": "fsdp_dtensor"}, EIGHT, "use_megatron_fsdp", "CUDA_DEVICE_MAX_CONNECTIONS > 1"),
    ("fsdp2_connections", BASE, FSDP2, ONE, FSDP2, EIGHT, "use_torch_fsdp2", "CUDA_DEVICE_MAX_CONNECTIONS > 1"),
    ("fsdp2_pp", BASE, {**FSDP2, "pipeline_model_parallel_size": 2}, EIGHT, FSDP2, EIGHT, "use_torch_fsdp2",
     "pipeline parallelism"),
    ("fsdp2_ep", MOE, {**FSDP2, "expert_model_parallel_size": 2}, EIGHT, FSDP2, EIGHT, "use_torch_fsdp2",
     "expert parallelism"),
    ("fsdp2_fusion", BASE, {**FSDP2, "gradient_accumulation_fusion": True}, EIGHT, FSDP2, EIGHT, "use_torch_fsdp2",
     "gradient_accumulation_fusion"),
    ("fsdp2_ckpt", BASE, {**FSDP2, "ckpt_format": "torch"}, EIGHT, {**FSDP2, "ckpt_format": "torch_dcp"}, EIGHT,
     "use_torch_fsdp2", "ckpt_format"),
    ("fsdp2_tied", BASE, {**FSDP2, "untie_embeddings_and_output_weights": False}, EIGHT, FSDP2, EIGHT,
     "use_torch_fsdp2", "untie"),
    ("dtensor_without_mfsdp", BASE, {"ckpt_format": "fsdp_dtensor"}, ONE, {}, ONE, "ckpt_format", ":1288"),
    ("dcp_with_tp", BASE, {**FSDP2, **TP2, "ckpt_format": "torch_dcp"}, EIGHT, {**FSDP2, "ckpt_format": "torch_dcp"},
     EIGHT, "ckpt_format", "TP=PP=1"),
    ("tp_connections", BASE, TP2, EIGHT, TP2, ONE, "CUDA_DEVICE_MAX_CONNECTIONS", "TP=2"),
    ("cp_connections", BASE, {"context_parallel_size": 2}, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"},
     {"context_parallel_size": 2}, {},
     "CUDA_DEVICE_MAX_CONNECTIONS", "CP=2"),
    ("param_gather_fsdp2", BASE, {**FSDP2, "overlap_grad_reduce": True, "overlap_param_gather": True}, EIGHT,
     {**FSDP2, "overlap_grad_reduce": True}, EIGHT, "overlap_param_gather", "Megatron-FSDP"),
    ("param_gather_needs_grad", BASE, {**MFSDP, "ckpt_format": "fsdp_dtensor", "overlap_param_gather": True}, EIGHT,
     {**MFSDP, "ckpt_format": "fsdp_dtensor", "overlap_param_gather": True, "overlap_grad_reduce": True}, EIGHT,
     "overlap_param_gather", "overlap_grad_reduce"),
    ("interleaved_pp2", {**BASE, "global_batch_size": 64}, {"pipeline_model_parallel_size": 2,
                                                             "num_virtual_stages_per_pipeline_rank": 2,
                                                             "overlap_p2p_comm": False}, ONE,
     {"pipeline_model_parallel_size": 2, "num_virtual_stages_per_pipeline_rank": 2}, ONE,
     "num_virtual_stages_per_pipeline_rank", "overlap_p2p_comm"),
]


@pytest.mark.parametrize(("name", "base", "bad", "bad_env", "good", "good_env", "path", "word"), PAIRS,
                         ids=[p[0] for p in PAIRS])
def test_refused_and_accepted_as_megatron_lm_checks(write, name, base, bad, bad_env, good, good_env, path, word):
    with pytest.raises(RecipeError) as err:
        load_recipe(write(f"{name}-bad.yaml", {**base, **bad}), env=bad_env, cluster="mi300x")
    hits = [p for p in err.value.problems if p.path == path and word in f"{p.message} {p.fix}"]
    assert hits, [str(p) for p in err.value.problems]
    assert hits[0].fix and ("arguments.py" in hits[0].message or "Megatron-LM" in hits[0].message)
    load_recipe(write(f"{name}-good.yaml", {**base, **good}), env=good_env, cluster="mi300x")  # accepted


def _experiment(write, name: str, overrides: dict) -> str:
    write("models/m.yaml", {k: v for k, v in MOE.items() if k != "global_batch_size"})
    return write(f"{name}.yaml", {"modules": {"pre_trainer": {
        "framework": "megatron", "model": "m.yaml", "overrides": {"global_batch_size": 64, **overrides}}}})


def test_primus_sets_eight_connections_for_fsdp_and_one_otherwise(write):
    """Primus's env patch: FSDP runs get 8 (so Megatron-FSDP passes with Primus's default 1 exported), TP runs
    keep the exported 1; with disable_env_patches the exported value stands."""
    fsdp = {**MFSDP, "ckpt_format": "fsdp_dtensor"}
    recipe = load_recipe(_experiment(write, "fsdp", fsdp), env={}, cluster="mi300x")
    assert recipe.execution.launch.connections(fsdp=True) == "8"
    load_recipe(_experiment(write, "tp", TP2), env={}, cluster="mi300x")
    with pytest.raises(RecipeError) as err:
        load_recipe(_experiment(write, "off", {**fsdp, "disable_env_patches": True}), env={}, cluster="mi300x")
    assert any(p.path.endswith("use_megatron_fsdp") and "CUDA_DEVICE_MAX_CONNECTIONS" in p.message
               for p in err.value.problems)


@pytest.mark.parametrize(("overrides", "path", "word", "fine"), [
    ({"fp8": "hybrid", "use_turbo_gemm": True}, "fp8_recipe", ":145", {"fp8": "hybrid", "use_turbo_gemm": True,
                                                                      "fp8_recipe": "tensorwise"}),
    ({"use_turbo_deepep": True, "moe_token_dispatcher_type": "flex", "moe_router_dtype": "fp32",
      "moe_shared_expert_intermediate_size": 1024, "moe_shared_expert_overlap": True},
     "moe_shared_expert_overlap", ":224", {"use_turbo_deepep": True, "moe_token_dispatcher_type": "flex",
                                          "moe_router_dtype": "fp32"}),
])
def test_primus_rocm_checks(write, overrides, path, word, fine):
    with pytest.raises(RecipeError) as err:
        load_recipe(_experiment(write, "bad", overrides), env={}, cluster="mi300x")
    assert any(p.path.endswith(path) and word in p.message for p in err.value.problems), err.value.problems
    load_recipe(_experiment(write, "fine", fine), env={}, cluster="mi300x")


def test_turbo_deepep_compute_units_at_ep16(write):
    from primus_ext.recipe.upstream_rules import upstream_problems

    recipe = load_recipe(_experiment(write, "ep", {"use_turbo_deepep": True, "turbo_deepep_num_cu": 64,
                                                    "moe_token_dispatcher_type": "flex",
                                                    "moe_router_dtype": "fp32"}), env={}, cluster="mi300x")
    import dataclasses

    wide = dataclasses.replace(recipe.execution, expert_model_parallel_size=16)
    assert [p.path for p in upstream_problems(recipe.model, wide, recipe.system)] == ["expert_model_parallel_size"]
    narrow = dataclasses.replace(wide, launch=dataclasses.replace(wide.launch, turbo_deepep_num_cu=32))
    assert upstream_problems(recipe.model, narrow, recipe.system) == []


def test_blackwell_lifts_the_tp_connections_rule(write):
    """arguments.py:1166 checks CUDA_DEVICE_MAX_CONNECTIONS=1 for TP / CP only when get_device_arch_version() < 10."""
    path = write("tp-bw.yaml", {**BASE, **TP2})
    load_recipe(path, cluster="gb200", env=EIGHT)  # Blackwell: accepted with 8
    with pytest.raises(RecipeError):
        load_recipe(path, cluster="h100", env=EIGHT)  # Hopper: refused
