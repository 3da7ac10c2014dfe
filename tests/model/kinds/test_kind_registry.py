"""The layer-kind registry (``primus_ext.model.kinds``): lookup, errors, every hook answered, no kind branches."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from primus_ext.errors import PrimusExtError
from primus_ext.hardware import load_gpu
from primus_ext.model.kinds import HOOKS, TRAITS, Kind, KindComm, UnknownKind, get_kind, known_kinds, register
from primus_ext.model.kinds.decoder import DenseKind
from primus_ext.model.layers import rank_shapes
from primus_ext.model.memory.activations import LOCAL, TE
from primus_ext.model.roofline import _Parts
from primus_ext.specs import ExecutionSpec, ModelSpec

PACKAGE = Path(__file__).resolve().parents[3] / "primus_ext"
MOE_MODEL = ModelSpec(num_layers=4, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
                      num_query_groups=4, kv_channels=64, vocab_size=32000, num_experts=8, moe_router_topk=2,
                      moe_ffn_hidden_size=1024, moe_shared_expert_intermediate_size=1024,
                      moe_layer_pattern=(False, True, True, True))
EXECUTION = ExecutionSpec(seq_length=2048, tensor_model_parallel_size=2, sequence_parallel=True,
                          expert_model_parallel_size=4, expert_tensor_parallel_size=2,
                          recompute_granularity="selective")


def _shapes():
    return rank_shapes(MOE_MODEL, EXECUTION)


def test_lookup_returns_the_kind_of_each_shape():
    shapes = _shapes()
    assert set(shapes) <= set(known_kinds())
    assert set(known_kinds()) >= {"dense", "moe", "embedding", "output"}
    for name, shape in shapes.items():
        kind = get_kind(shape.kind)
        assert isinstance(kind, Kind) and kind.name == name
        assert get_kind(name) is kind  # one instance per name


def test_unknown_kind_names_the_known_ones():
    with pytest.raises(UnknownKind) as info:
        get_kind("mamba_typo")
    text = str(info.value)
    assert "mamba_typo" in text
    for name in known_kinds():
        assert name in text
    assert isinstance(info.value, PrimusExtError)  # the CLI reports it (exit 2), no traceback


def test_register_refuses_a_second_class_under_a_taken_name():
    class Other(DenseKind):
        pass

    with pytest.raises(ValueError, match="already registered"):
        register(Other())
    with pytest.raises(TypeError):
        register("dense")  # type: ignore[arg-type]
    assert type(get_kind("dense")) is DenseKind


def test_every_registered_kind_has_every_trait_and_hook():
    for name in known_kinds():
        kind = get_kind(name)
        assert not getattr(type(kind), "__abstractmethods__", None), f"{name}: abstract hooks left"
        for trait in TRAITS:
            assert hasattr(kind, trait), (name, trait)
        for hook in HOOKS:
            assert callable(getattr(kind, hook)), (name, hook)


@pytest.mark.parametrize("name", ["dense", "moe", "embedding", "output"])
def test_every_kind_answers_every_hook(name):
    kind = get_kind(name)
    shape = _shapes()[name]
    gpu = load_gpu("h100")
    assert kind.params(shape) > 0 and kind.params(shape, impl="local") > 0
    assert 0 <= kind.expert_params(shape) < kind.params(shape)
    assert 0 <= kind.router_params(shape) < kind.params(shape)
    ep, etp = kind.expert_split(shape)
    assert ep >= 1 and etp >= 1
    parts = _Parts({}, {}, {})
    kind.roofline(parts, shape, gpu)
    assert parts.fwd and all(v >= 0 for v in parts.fwd.values())
    sac = kind.op_sac_gemms_s(shape, gpu)
    assert sac is None or all(s > 0 for s in sac)
    assert kind.overhead_s(shape, gpu) >= 0
    assert kind.fwd_flops_estimate(shape) > 0
    for impl in (TE, LOCAL):
        saved = kind.saved(shape, impl)
        assert isinstance(saved, dict) and all(v >= 0 for v in saved.values())
        selective = kind.saved_selective(shape, impl, dict(saved))
        assert sum(selective.values()) <= sum(saved.values())
    comm = kind.comm(shape, True)
    assert isinstance(comm, KindComm)
    assert all(group in ("tp", "etp") for _, group in comm.pairs)
    assert {part for part, _ in comm.pairs} <= comm.parts or not kind.recomputable


def test_every_hook_called_through_the_registry_is_declared():
    """Code outside the kinds asks a kind only what ``Kind`` declares (``HOOKS`` / ``TRAITS``): no undeclared hook
    that one kind answers and another does not."""
    import ast

    asked = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[:2] == ("model", "kinds"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call) and \
                    getattr(node.value.func, "id", None) == "get_kind":
                asked.add((node.attr, f"{path.relative_to(PACKAGE).as_posix()}:{node.lineno}"))
    assert asked, "the check found no get_kind(...).hook call: it looks at the wrong thing"
    undeclared = sorted(where + " ." + name for name, where in asked if name not in (*HOOKS, *TRAITS))
    assert not undeclared, "declare these in model/kinds/base.py (a default serves the kinds without it):\n" + \
        "\n".join(undeclared)


def test_traits_of_the_builtin_kinds():
    dense, moe, emb, out = (get_kind(n) for n in ("dense", "moe", "embedding", "output"))
    assert dense.recomputable and moe.recomputable and not emb.recomputable and not out.recomputable
    assert moe.comm(_shapes()["moe"], True).ep and not dense.comm(_shapes()["dense"], True).ep
    assert not emb.takes_sequence_split and out.takes_sequence_split
    shape = replace(_shapes()["moe"], cuda_graph="full_iteration")
    assert moe.overhead_s(shape, load_gpu("h100")) == 0.0


def test_a_shape_carries_its_kinds_traits():
    """A kind builds its shape with the traits the shape's own properties read (``rank_shape.KIND_TRAITS``), not part
    of what the shape is: equality, hash, store key and stored form ignore them; the store's reader restores them."""
    from primus_ext.measure.store import shape_from_dict
    from primus_ext.model.rank_shape import shape_dict

    for name, shape in _shapes().items():
        assert shape.attention == get_kind(name).attention, name
        other = replace(shape, attention=not shape.attention)
        assert other == shape and hash(other) == hash(shape) and other.key() == shape.key()
        assert "attention" not in shape_dict(shape) and shape_from_dict(shape_dict(shape)).attention == shape.attention
    shapes = rank_shapes(replace(MOE_MODEL, window_size=(128, 0), window_attn_skip_freq=2), EXECUTION)
    assert shapes["dense"].arch.window_size == shapes["embedding"].arch.window_size == (128, 0)
    assert shapes["dense"].window_pattern == 2 and shapes["embedding"].window_pattern == 0  # only attention windows


def test_every_kind_has_a_measurement_builder():
    from primus_ext.measure.kind_builders import BUILDERS, KindBuilder, kind_builder

    assert all(isinstance(kind_builder(name), KindBuilder) for name in known_kinds())
    assert set(BUILDERS) == set(known_kinds())  # each one found, the kinds' own builders added on first use
    assert kind_builder("no_such_kind") is None


BRANCH = r"""(?:==|!=|\bin)\s*[(\[{]?\s*["'](?:%s)["']"""
"""A comparison with, or membership test in a literal holding, a kind's name (``x == "moe"``, ``x in ("dense",``)."""
ALLOWED = {
    "model/stages.py": "the pipeline layout's ``embedding`` token (``--pipeline-model-parallel-layout`` E), a "
                       "placement name, not a ``RankShape.kind``",
    "measure/build.py": "megatron ``--recompute-modules`` names ``moe`` / ``shared_experts``, not a kind",
}
ALLOWED_BRANCHES = 2
"""Matches of ``BRANCH`` outside ``primus_ext/model/kinds/`` (60 before the registry, issue 33; ``ALLOWED`` says
why each remaining one is not a kind branch). Kind names still appear elsewhere as look-ups, not branches: the
kind -> shape / term maps (``shapes["dense"]``, ``terms.get("moe")``) where a stage's layer composition is counted
(``projection.stage_sums``, ``model.memory.stage``: which kinds a model has, how many of each a stage holds; the
hybrid layer patterns of issue 33 replace those), and ``measure.kind_builders.BUILDERS``."""


def test_no_kind_branches_outside_the_registry():
    pattern = re.compile(BRANCH % "|".join(re.escape(n) for n in (*known_kinds(), "mtp")))
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[:2] == ("model", "kinds"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(PACKAGE).as_posix()}:{number}: {line.strip()}")
    assert {f.split(":")[0] for f in found} <= set(ALLOWED), "\n".join(found)
    assert len(found) <= ALLOWED_BRANCHES, "branch on a layer kind's name; add a Kind hook instead:\n" + "\n".join(
        found)


def test_the_branch_counter_sees_a_branch():
    pattern = re.compile(BRANCH % "dense|moe")
    for line in ('if shape.kind == "moe":', "if kind in ('dense', 'moe'):", 'x if key[0] != "dense" else y',
                 'if shape.kind not in ("dense", "moe")', 'key[0] in ("dense", "moe")'):
        assert pattern.search(line), line
    assert not pattern.search('if kind == "model":')
    assert not pattern.search('shapes["moe"]')
