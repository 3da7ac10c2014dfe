"""GPU capabilities as data: every format / layout / arch question is answered by the profile (hardware/families.yaml
or the profile's own ``capabilities:``), a typo is an error naming the file and the key, and a new GPU is one file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from primus_ext.errors import RecipeError
from primus_ext.hardware import list_profiles, load_gpu, load_system
from primus_ext.hardware.capabilities import families
from primus_ext.model.fp4 import fp4_problem
from primus_ext.recipe.upstream_rules import upstream_problems
from primus_ext.specs import ExecutionSpec, ModelSpec

PACKAGE = Path(__file__).resolve().parents[2] / "primus_ext"
MYBOX = ("bf16_dense_tflops: 100\nfp8_dense_tflops: 200\nhbm_gb: 10\nhbm_tbps: 1\n"
         "scaleup_gbps_per_direction: 50\nscaleup_domain: 4\nnic_gbit_per_gpu: 100\n")
"""The datasheet part of a user's profile (every required field; as tests/hardware/test_profiles.py)."""


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIMUS_EXT_PROFILES", str(tmp_path))
    load_gpu.cache_clear()
    yield tmp_path
    load_gpu.cache_clear()


def test_every_shipped_profile_states_its_capabilities():
    for name in list_profiles():
        gpu = load_gpu(name)
        assert gpu.family in families() and gpu.capabilities is not None, name
    assert load_gpu("b200").runs("nvfp4") and not load_gpu("b200").runs("mxfp4")
    assert load_gpu("mi355x").runs("mxfp4") and load_gpu("mi355x").runs("mxfp8")
    assert not load_gpu("mi300x").runs("mxfp8")
    assert load_gpu("gb300").fp8_any_layout and not load_gpu("h200").fp8_any_layout
    assert load_gpu("b300").device_arch == 10 and load_gpu("mi355x").device_arch == 9


def test_a_family_typo_is_an_error_naming_the_file_and_key(profiles):
    (profiles / "typo.yaml").write_text(MYBOX + "family: blackwel\n")
    with pytest.raises(RecipeError) as err:
        load_gpu("typo")
    text = str(err.value)
    assert "typo.yaml:family" in text and "unknown GPU family" in text and "blackwell" in text


def test_an_unknown_capability_or_format_is_an_error(profiles):
    (profiles / "odd.yaml").write_text(MYBOX + "family: next\ncapabilities: {formats: [fp8, nvfp5], fp8_layouts: "
                                       "sideways, device_arch: 11, tensor_memory: true}\n")
    with pytest.raises(RecipeError) as err:
        load_gpu("odd")
    text = str(err.value)
    for key in ("odd.yaml:capabilities.formats[1]", "nvfp5", "capabilities.fp8_layouts", "sideways",
                "capabilities.tensor_memory"):
        assert key in text, key


def test_a_new_gpu_is_one_profile_file(profiles):
    """A GPU of a generation the package does not know: its profile states its capabilities, and FP4 recipes,
    the FP8 weight bytes and the launch rules follow them with no code change."""
    (profiles / "nextgen.yaml").write_text(MYBOX + "fp4_dense_tflops: 400\nfamily: nextgen\ncapabilities: "
                                           "{formats: [fp8, mxfp8, nvfp4], fp8_layouts: any, device_arch: 11}\n")
    gpu = load_gpu("nextgen")
    assert fp4_problem(gpu, "nvfp4") is None and "does not run on nextgen" in fp4_problem(gpu, "mxfp4")
    from primus_ext.model.memory import peak_bytes

    model = ModelSpec(name="m", num_layers=4, hidden_size=2048, ffn_hidden_size=8192, num_attention_heads=16,
                      num_query_groups=4, kv_channels=128, vocab_size=32000)
    fp8 = ExecutionSpec(precision="fp8", fp8_recipe="tensorwise", global_batch_size=8)
    assert peak_bytes(model, fp8, load_system("nextgen")) < peak_bytes(model, fp8, load_system("h100"))
    tp = ExecutionSpec(tensor_model_parallel_size=2, global_batch_size=8)
    rule = "CUDA_DEVICE_MAX_CONNECTIONS"
    assert not [p for p in upstream_problems(model, tp, load_system("nextgen")) if p.path == rule]


FAMILY_SET = re.compile(r"""frozenset\(\{\s*["'](hopper|blackwell|cdna\d|ampere)""")


def test_no_code_keeps_a_set_of_family_names():
    """Code asks the profile (``GPUSpec.runs``, ``fp8_any_layout``, ``device_arch``), never a hand-kept family set,
    and never compares a family name."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        found += [f"{path.name}: {m.group(0)}" for m in FAMILY_SET.finditer(text)]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Compare) and "family" in ast.unparse(node.left) and any(
                    isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value
                    for c in node.comparators for n in ast.walk(c)):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)
