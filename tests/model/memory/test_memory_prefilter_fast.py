"""The tuner's pre-filter (``memory.fits`` / ``memory.peak_bytes``) agrees with ``estimate_memory`` and stays
torch-free.

Both run the one arithmetic, ``memory.rank.rank_memory``; what the pre-filter adds is checked here: it evaluates one
rank per distinct stage composition (``StageContext.representatives``) and memoises the per-rank profiles and the
peak on ``_SHAPE_FIELDS`` + ``_RUN_FIELDS``. Every configuration of three tuner spaces goes through the memo in order
and every ``STRIDE``-th is compared with ``estimate_memory`` (every rank, no per-configuration memo): the same bytes
and the same verdict at any margin. A representative that is not the peak rank, or a memo key missing a field that
changes memory, answers with another configuration's bytes.
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
STRIDE = 11
"""One configuration in STRIDE is compared with ``estimate_memory`` (all of them go through the pre-filter)."""


@pytest.mark.parametrize(("path", "cluster", "nodes", "overrides"), SPACES)
def test_prefilter_equals_estimate_memory_across_a_tuner_space(path, cluster, nodes, overrides):
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
        fast = peak_bytes(model, e, system)  # every configuration fills (or reads) the memo
        count += 1
        if count % STRIDE:
            continue
        full = estimate_memory(model, e, system)
        assert fast == full.peak_bytes, (config, fast, full.peak_bytes)
        assert fits(model, e, system) == full.fits
        assert fits(model, e, system, margin=0.05) == (full.peak_bytes <= capacity * 0.95)
        verdicts[full.fits] += 1
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
