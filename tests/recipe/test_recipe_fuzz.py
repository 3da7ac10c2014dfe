"""Hypothesis fuzz of the loader: whatever the file holds, the only failure is a clean RecipeError."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe_data import BASE, MOE

from primus_ext.errors import RecipeError
from primus_ext.recipe import load_recipe
from primus_ext.recipe.catalogue import known_keys

KEYS = sorted(set(MOE) | {
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "expert_model_parallel_size", "expert_tensor_parallel_size", "num_virtual_stages_per_pipeline_rank",
    "num_layers_per_virtual_pipeline_stage", "virtual_pipeline_model_parallel_size", "sequence_parallel",
    "moe_layer_freq", "recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules",
    "pipeline_model_parallel_layout", "decoder_first_pipeline_num_layers", "fp8", "use_torch_fsdp2",
    "overlap_param_gather", "window_size", "tokenizer_model", "extends", "primus_ext", "modules",
})
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**12), st.floats(allow_nan=True), st.text(max_size=20),
    st.sampled_from(["${X}", "${X:3}", "([0]*3+[1]*5)", "Et|tL", "e4m3", "full", "block", "../a.yaml", "x.yaml"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8),
                                                                      children, max_size=4),
    max_leaves=12,
)
DOCS = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=12), VALUES, max_size=12)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _load(path: Path, overrides=()) -> None:
    try:
        recipe = load_recipe(path, overrides, env={"X": "4"}, config_roots=[path.parent])
    except RecipeError as err:
        assert err.problems, "a RecipeError always names its problems"
        assert all(isinstance(p.path, str) and p.message for p in err.problems)
        str(err)  # renders
        return
    recipe.to_dict()


@FUZZ
@given(text=st.text(max_size=400))
def test_random_text(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("t") / "r.yaml"
    path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    _load(path)


@FUZZ
@given(doc=DOCS, base=st.sampled_from([{}, BASE, MOE]))
def test_random_flat_dicts(tmp_path_factory, doc, base):
    path = tmp_path_factory.mktemp("d") / "r.yaml"
    path.write_text(yaml.safe_dump({**base, **doc}, allow_unicode=True))
    _load(path)


@FUZZ
@given(overrides=DOCS, module=st.dictionaries(st.sampled_from(["framework", "config", "model", "overrides", "x"]),
                                              VALUES, max_size=4),
       cli=st.lists(st.text(max_size=30), max_size=3))
def test_random_primus_experiments(tmp_path_factory, overrides, module, cli):
    folder = tmp_path_factory.mktemp("p")
    (folder / "models").mkdir()
    (folder / "models" / "m.yaml").write_text(yaml.safe_dump({**MOE, "extends": ["base.yaml", "missing.yaml"]}))
    (folder / "models" / "base.yaml").write_text(yaml.safe_dump({"swiglu": True}))
    doc = {"modules": {"pre_trainer": {"framework": "megatron", "model": "m.yaml", "overrides": overrides, **module}}}
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    _load(path, cli)


def test_catalogue_is_large_enough_to_be_useful():
    expected = {"tensor_model_parallel_size", "moe_layer_freq", "patch_zero_bubble", "window_attn_skip_freq"}
    assert expected <= known_keys()
