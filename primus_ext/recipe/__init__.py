"""Primus / Megatron recipes -> validated, typed, frozen specs.

    from primus_ext.recipe import load_recipe, check, resolve_specs
    recipe = load_recipe("recipes/llama3.1_8B-pretrain.yaml", ["tensor_model_parallel_size=2"], nodes=2)
    problems = check(recipe.model, recipe.execution, recipe.system)   # [] for a loaded recipe

``load_recipe`` reads Primus experiment YAMLs (``extends``, ``${VAR:default}``, overrides) or flat
Megatron YAMLs; ``resolve_specs`` turns merged Megatron arguments into ``ModelSpec`` /
``ExecutionSpec``; ``check`` is the one legality check every proposer (CLI, tuner) calls.
"""

from primus_ext.recipe.checks import check
from primus_ext.recipe.loader import Recipe, load_recipe
from primus_ext.recipe.resolve import resolve_specs

__all__ = ["Recipe", "check", "load_recipe", "resolve_specs"]
