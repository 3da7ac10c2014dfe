"""The pre-filter's fast path (``memory.fits`` / ``memory.peak_bytes``) equals the full ``estimate_memory``
on every configuration of real tuner spaces, and stays torch-free.

Independent reference: ``estimate_memory`` evaluates every pipeline rank through
``memory.stage.stage_memory`` (named parts, no per-configuration memo); the fast path evaluates only one
rank per distinct stage composition from memoised per-rank constants and memoises the peak on the fields
it depends on. Both must give the same bytes (same arithmetic order, so equal to the last bit) and the
same verdict at any margin.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from primus_ext.model.memory import estimate, estimate_memory, fits, peak_bytes, stage
from primus_ext.recipe import load_recipe
from primus_ext.tune.space import build_space

SPACES = [("recipes/deepseek_v3-pretrain.yaml", "h100", 128, ()),
          ("recipes/mixtral_8x22B-pretrain.yaml", "mi355x", 4, ()),
          # Blackwell fp8: 1-byte per-tensor fp8 parameters (the GPU generation enters the fast path)
          ("recipes/llama3.1_405B-pretrain.yaml", "b200", 16,
           ("fp8=hybrid", "fp8_recipe=tensorwise", "fp8_param_gather=true"))]


@pytest.mark.parametrize(("path", "cluster", "nodes", "overrides"), SPACES)
def test_fast_path_equals_estimate_memory_on_every_config_of_a_tuner_space(path, cluster, nodes, overrides):
    recipe = load_recipe(path, list(overrides), cluster=cluster, nodes=nodes, validate=False)
    model, system = recipe.model, recipe.system
    space = build_space(model, recipe.execution, system)
    estimate._COMPILED.clear()
    estimate._PEAKS.clear()
    stage._BY_MODEL.clear()
    verdicts = {True: 0, False: 0}
    capacity = estimate.capacity_bytes(system)
    count = 0
    for config in space.iter_configs():
        e = space.to_execution(config)
        full = estimate_memory(model, e, system)
        fast = peak_bytes(model, e, system)
        assert fast == full.peak_bytes, (config, fast, full.peak_bytes)
        assert fits(model, e, system) == full.fits
        assert fits(model, e, system, margin=0.05) == (full.peak_bytes <= capacity * 0.95)
        verdicts[full.fits] += 1
        count += 1
    assert count == space.size() and verdicts[True] and verdicts[False]  # the space straddles the capacity


def test_fast_path_imports_no_torch():
    code = ("import sys\nfrom primus_ext.model.memory import fits\nfrom primus_ext.hardware import load_system\n"
            "from primus_ext.specs import ExecutionSpec, ModelSpec\n"
            "m = ModelSpec(name='t', num_layers=4, hidden_size=256, ffn_hidden_size=1024, num_attention_heads=4,"
            " num_query_groups=4, kv_channels=64, vocab_size=1000)\n"
            "fits(m, ExecutionSpec(), load_system('h100', 1))\nassert 'torch' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_fields_outside_the_memo_key_do_not_change_memory():
    """The fast path memoises on ``_SHAPE_FIELDS`` + ``_RUN_FIELDS``: every other ExecutionSpec field must
    leave ``estimate_memory`` unchanged (else the memo would answer for the wrong configuration)."""
    import dataclasses
    import typing

    recipe = load_recipe("recipes/deepseek_v3-pretrain.yaml", cluster="h100", nodes=128, validate=False)
    e = recipe.execution
    keyed = set(estimate._SHAPE_FIELDS) | set(estimate._RUN_FIELDS)
    base = estimate_memory(recipe.model, e, recipe.system).peak_bytes
    hints = typing.get_type_hints(type(e))
    checked = []
    for f in dataclasses.fields(e):
        if f.name in keyed:
            continue
        value, hint = getattr(e, f.name), hints[f.name]
        if isinstance(value, bool):
            others = [not value]
        elif typing.get_origin(hint) is typing.Literal:
            others = [v for v in typing.get_args(hint) if v != value]
        elif f.name == "moe_expert_capacity_factor":
            others = [1.0, None]
        else:
            continue
        for other in others:
            changed = dataclasses.replace(e, **{f.name: other})
            assert estimate_memory(recipe.model, changed, recipe.system).peak_bytes == base, (f.name, other)
        checked.append(f.name)
    assert len(checked) >= 8, checked
