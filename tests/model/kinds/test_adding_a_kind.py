"""Adding a layer kind is one module of ``model/kinds`` (+ a builder in ``measure/kind_builders`` to time it): the
module lists its instances in ``KINDS`` and the registry registers them when it loads the package's modules. A kind
declared here and registered as a plugin's (``register``), with nothing else edited, is placed, priced, counted and
remembered end to end.

The kind is a stand-in for a new hybrid mixer: Mamba's formulas under a new name and symbol ``Y``, plus a
hyper-parameter of its own (``test_standin_gate_width``, a recipe key no other kind knows: a gate projection of that
width). Its record (``KindDims``) is read from the recipe, carried on the model and the layer's shape, priced in its
parameters, FLOPs and roofline, and stored with its measurements; nothing outside this file is edited for it.
What it shows is the wiring, not a cost model (``kinds.gated_delta`` is the real gated DeltaNet).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import pytest

from primus_ext.hardware import load_system
from primus_ext.model import roofline as R
from primus_ext.model.flops import flops_breakdown
from primus_ext.model.hybrid import HybridPatternError
from primus_ext.model.kinds import Kind, get_kind, known_kinds, register
from primus_ext.model.kinds.base import KindDims
from primus_ext.model.kinds.decoder import DenseKind
from primus_ext.model.kinds.hybrid import HybridMLPKind
from primus_ext.model.kinds.mamba import MambaKind
from primus_ext.model.kinds.registry import pattern_kinds, symbol_kinds, unregister
from primus_ext.model.layers import allocate_layers, hybrid_stage_params, hybrid_symbol_params, symbols
from primus_ext.projection.evaluate_batch import evaluate_many
from primus_ext.projection.project import project
from primus_ext.projection.table import chunk_counts
from primus_ext.recipe.resolve import resolve_all

NODE = load_system("h100", 1)
PATTERN = "MY*-MY*-MY*-MY*-"
RECIPE = dict(
    model_type="mamba", num_layers=len(PATTERN), hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
    group_query_attention=True, num_query_groups=4, kv_channels=64, vocab_size=32000, squared_relu=True,
    normalization="RMSNorm", position_embedding_type="none", add_bias_linear=False, hybrid_override_pattern=PATTERN,
    mamba_head_dim=64, mamba_num_heads=32, mamba_num_groups=8, mamba_state_dim=128, seq_length=2048,
    micro_batch_size=1, global_batch_size=32, bf16=True, tensor_model_parallel_size=2,
    pipeline_model_parallel_size=2)


@dataclass(frozen=True, kw_only=True)
class StandInDims(KindDims):
    test_standin_gate_width: int = 0
    """A recipe key only this kind reads: the width of a ``hidden x width`` gate projection of each layer."""


class GatedDeltaStandIn(MambaKind):
    """A new kind: its name, its symbol, its own hyper-parameter; the other hooks Mamba's."""

    name = "test_gated_delta"
    symbol = "Y"
    dims_type = StandInDims

    def layer_arch(self, model, execution):
        return replace(super().layer_arch(model, execution), dims=self.dims(model))

    def check_dims(self, dims):
        odd = dims.test_standin_gate_width % 64
        return [("test_standin_gate_width", "must be a multiple of 64", "round it to 64")] if odd else []

    def params(self, shape, *, impl="te") -> int:
        return super().params(shape, impl=impl) + shape.arch.hidden_size * self._width(shape)

    def model_macs(self, model, seq_length, causal):
        macs = super().model_macs(model, seq_length, causal)
        return {"mamba": macs["mamba"] + model.hidden_size * self.dims(model).test_standin_gate_width}

    def roofline(self, parts, shape, gpu) -> None:
        super().roofline(parts, shape, gpu)
        if self._width(shape):
            g = partial(R.gemm_seconds, gpu=gpu, precision=shape.precision, recipe=R.gemm_recipe(shape))
            parts.gemm("mamba_linear", g(shape.tokens, self._width(shape), shape.arch.hidden_size))

    @staticmethod
    def _width(shape) -> int:
        return shape.arch.dims.test_standin_gate_width // shape.tp


@pytest.fixture
def new_kind():
    kind = register(GatedDeltaStandIn())
    try:
        yield kind
    finally:
        unregister(kind.name)


def test_the_registry_places_the_new_kind(new_kind):
    assert "Y" in symbols() and symbol_kinds()["Y"] == "test_gated_delta"
    assert list(symbol_kinds())[-1] == "Y" and "test_gated_delta" in known_kinds()  # after the built-in ones
    assert list(pattern_kinds(PATTERN)) == ["M", "Y", "*", "-"]  # the pattern's own order: its layout
    assert allocate_layers(len(PATTERN), override=PATTERN) == PATTERN


def test_a_model_with_the_new_kind_projects_end_to_end(new_kind):
    model, execution, problems, _ = resolve_all(RECIPE, NODE)
    assert not problems, problems
    assert model.hybrid_layer_pattern == PATTERN
    p = project(model, execution, NODE)
    assert "test_gated_delta" in p.sources and p.tokens_per_s_per_gpu > 0 and 0 < p.mfu <= 1
    # its layers are counted in each stage's chunk, in its own slot
    slot = 7 + list(pattern_kinds(PATTERN).values()).index("test_gated_delta")
    per_stage = [sum(chunk[slot] for chunk in rank) for rank in chunk_counts(model, execution)]
    assert per_stage == [2, 2]
    # its parameters are in the stage sums, its FLOPs in the model FLOPs (Mamba's formulas: equal per layer)
    per_symbol = hybrid_symbol_params(model, execution)
    assert per_symbol["Y"] == per_symbol["M"] > 0
    assert sum(hybrid_stage_params(model, execution)) >= sum(per_symbol[s] * PATTERN.count(s) for s in per_symbol)
    with_y = flops_breakdown(model, execution.seq_length)
    without_y = flops_breakdown(replace(model, hybrid_layer_pattern=PATTERN.replace("Y", "M")), execution.seq_length)
    assert with_y.mamba == pytest.approx(without_y.mamba)  # Y and M cost the same here: as many mixers either way
    # the memory model holds its activations and parameters on each stage
    assert all(stage.params_bytes > 0 and stage.activations_bytes > 0 for stage in p.memory.stages)
    # the batch engine (the tuner's) lays it out as the scalar one does
    batch = evaluate_many(model, [execution], NODE)
    assert batch.problems == (None,)
    assert batch.step_time_s[0] == pytest.approx(p.step_time_s, rel=1e-9)


def test_the_new_kind_is_priced_not_dropped(new_kind):
    """Replacing Mamba layers by the new kind's changes nothing (same formulas); removing them does."""
    model, execution, problems, _ = resolve_all(RECIPE, NODE)
    assert not problems
    as_mamba, _, _, _ = resolve_all(dict(RECIPE, hybrid_override_pattern=PATTERN.replace("Y", "M")), NODE)
    assert project(model, execution, NODE).step_time_s == pytest.approx(
        project(as_mamba, execution, NODE).step_time_s, rel=1e-9)


def test_without_the_kind_its_symbol_is_refused():
    assert "Y" not in symbols() and get_kind("mamba").symbol == "M"
    with pytest.raises(HybridPatternError, match="not one of"):
        allocate_layers(len(PATTERN), override=PATTERN)
    _, _, problems, _ = resolve_all(RECIPE, NODE)
    assert any(p.path == "hybrid_override_pattern" for p in problems)


class SecondStandIn(HybridMLPKind):
    name = "test_second"
    symbol = "Z"


def test_the_layout_depends_on_the_pattern_alone():
    """Registering, removing and registering again other kinds reorders no memoised layout (a model's chunk counts,
    its memory plan and its cost table are cached by model): the same model projects to the same step."""
    first, second = register(GatedDeltaStandIn()), register(SecondStandIn())
    try:
        pattern = "MYZ*MYZ-MYYZMYZ-"
        model, execution, problems, _ = resolve_all(dict(RECIPE, num_layers=len(pattern),
                                                         hybrid_override_pattern=pattern), NODE)
        assert not problems, problems
        before = project(model, execution, NODE).step_time_s
        counts = chunk_counts(model, execution)
        unregister(first.name)
        register(GatedDeltaStandIn())
        assert list(pattern_kinds(pattern)) == ["M", "Y", "Z", "*", "-"]
        assert chunk_counts(model, execution) == counts
        assert project(model, execution, NODE).step_time_s == before
    finally:
        unregister(first.name)
        unregister(second.name)


def test_a_new_kind_inherits_its_split_rule(new_kind):
    """Mamba's heads / groups must divide by TP: the stand-in's layers (Mamba's hooks) are refused as Mamba's."""
    from primus_ext.recipe.checks import check

    model, execution, problems, _ = resolve_all(dict(RECIPE, hybrid_override_pattern=PATTERN.replace("M", "-"),
                                                     mamba_num_groups=1), NODE)
    assert not problems and "M" not in model.hybrid_layer_pattern
    found = check(model, execution, NODE)
    assert any(p.path == "tensor_model_parallel_size" and "mamba" in p.message for p in found), found


def test_kinds_no_model_could_place_are_refused():
    class NoSymbol(DenseKind):
        name = "test_no_symbol"

    class TwoLetters(GatedDeltaStandIn):
        name, symbol = "test_two_letters", "GG"

    class TakenSymbol(GatedDeltaStandIn):
        name, symbol = "test_taken", "M"

    class NoFlops(HybridMLPKind):
        name, symbol = "test_no_flops", "Q"
        model_macs = Kind.model_macs

    for kind, message in ((NoSymbol(), "has no symbol"), (TwoLetters(), "one character"),
                          (TakenSymbol(), "already places layer kind mamba"), (NoFlops(), "model_macs")):
        with pytest.raises(ValueError, match=message):
            register(kind)
        assert kind.name not in known_kinds()


def test_the_registry_registers_each_kind_modules_kinds():
    """A module of ``model/kinds`` (but ``base`` and ``registry``) lists its kinds in ``KINDS``; the registry registers
    those, and no kind module imports the registry (it would call back: ``tests/test_layers.py``)."""
    import importlib
    import pkgutil

    from primus_ext.model import kinds
    from primus_ext.model.kinds.registry import _NOT_KINDS

    listed = []
    for info in pkgutil.iter_modules(kinds.__path__):
        if info.name not in _NOT_KINDS:
            module = importlib.import_module(f"{kinds.__name__}.{info.name}")
            assert module.KINDS and all(isinstance(k, Kind) for k in module.KINDS), info.name
            assert not hasattr(module, "register"), f"{info.name} imports the registry"
            listed += [k.name for k in module.KINDS]
    assert sorted(listed) == sorted(name for name in known_kinds() if not name.startswith("test_"))
    assert all(type(get_kind(name)).__module__.startswith(kinds.__name__) for name in listed)


def test_a_kind_registered_first_is_checked_against_the_built_in_ones():
    """A plugin's kind registered before anything loaded the built-in kinds still meets them (a fresh interpreter)."""
    import subprocess
    import sys

    code = ("from primus_ext.model.kinds.registry import register\n"
            "from primus_ext.model.kinds.hybrid import HybridMLPKind\n"  # not the Mamba kind's module
            "class Taken(HybridMLPKind):\n    name, symbol = 'plugin_taken', 'M'\n"
            "try:\n    register(Taken())\nexcept ValueError as err:\n    print(err)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "already places layer kind mamba" in out.stdout, out.stderr


def test_the_kind_reads_prices_and_stores_a_key_of_its_own(new_kind):
    """``test_standin_gate_width``: read from the recipe, checked, on the model and the shape, in the parameters,
    the model FLOPs and the step time, in the stored form; a key of the catalogue only while the kind is."""
    from primus_ext.measure.store import shape_from_dict
    from primus_ext.model.layers import rank_shapes
    from primus_ext.model.rank_shape import shape_dict
    from primus_ext.recipe.catalogue import key_class, known_keys

    assert key_class("test_standin_gate_width") == "modelled" and "test_standin_gate_width" in known_keys()
    plain, execution, _, _ = resolve_all(RECIPE, NODE)
    model, _, problems, _ = resolve_all(dict(RECIPE, test_standin_gate_width=512), NODE)
    assert not problems, problems
    assert dict(model.kind_dims)["test_gated_delta"] == StandInDims(test_standin_gate_width=512)
    assert dict(plain.kind_dims)["test_gated_delta"] == StandInDims()  # Megatron's default: 0
    shape = rank_shapes(model, execution)["test_gated_delta"]
    assert shape.arch.dims.test_standin_gate_width == 512
    assert shape_from_dict(shape_dict(shape)) == shape and shape.key() != rank_shapes(plain, execution)[
        "test_gated_delta"].key()
    per_symbol, before = hybrid_symbol_params(model, execution), hybrid_symbol_params(plain, execution)
    assert per_symbol["Y"] - before["Y"] == 1024 * 512 // execution.tp and per_symbol["M"] == before["M"]
    added = flops_breakdown(model, execution.seq_length).mamba - flops_breakdown(plain, execution.seq_length).mamba
    assert added == pytest.approx(3 * 2 * 1024 * 512 * PATTERN.count("Y"), rel=1e-9)  # per token: 3 passes, 2 / MAC
    assert project(model, execution, NODE).step_time_s > project(plain, execution, NODE).step_time_s
    _, _, bad, _ = resolve_all(dict(RECIPE, test_standin_gate_width=100), NODE)
    assert [p.path for p in bad] == ["test_standin_gate_width"] and "64" in bad[0].message
    _, _, bad, _ = resolve_all(dict(RECIPE, test_standin_gate_width="wide"), NODE)
    assert [p.path for p in bad] == ["test_standin_gate_width"]


def test_without_the_kind_its_key_is_unknown():
    from primus_ext.recipe.catalogue import key_class

    assert key_class("test_standin_gate_width") is None
