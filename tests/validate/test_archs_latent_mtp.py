"""The archs reader passes latent MoE and hybrid MTP through (``moe_latent_size N``, ``pattern main/*E/*E``,
``mtp_use_repeated_layer`` in the notes), and the package's cited architectures fill the rows model_archs.csv leaves
without one (Nemotron-3 Super / Ultra)."""

from __future__ import annotations

import pytest
from validate_rows import ARCH_HEADER, write

from primus_ext.model.flops import model_flops_per_token
from primus_ext.model.layers import hybrid_symbol_params, layer_params, rank_shapes
from primus_ext.specs import ExecutionSpec
from primus_ext.validate.archs import CITED_ARCHS, read_archs

HYBRID = ("H,8,1024,512,16,2,32000,16,4,512,1 (1024),,no,\"hybrid Mamba, pattern MEM*EMEM/*E/*E, "
          "mamba_num_heads 32, mamba_head_dim 64, kv_channels 64, squared-ReLU, moe_latent_size 256{}\"\n")


def test_latent_size_and_mtp_depths_come_from_the_notes(tmp_path):
    model = read_archs(write(tmp_path, "a.csv", ARCH_HEADER + HYBRID.format("")), cited=None)["H"].model
    assert model is not None
    assert (model.hybrid_layer_pattern, model.mtp_layer_pattern, model.mtp_num_layers) == ("MEM*EMEM", "*E", 2)
    assert model.moe_latent_size == 256 and not model.mtp_use_repeated_layer
    assert model.moe_layer_pattern == tuple(c == "E" for c in "MEM*EMEM")
    shared = read_archs(write(tmp_path, "b.csv", ARCH_HEADER + HYBRID.format("; mtp_use_repeated_layer")),
                        cited=None)["H"].model
    assert shared is not None and shared.mtp_use_repeated_layer


def test_mtp_patterns_that_differ_are_a_skip_reason(tmp_path):
    row = HYBRID.format("").replace("/*E/*E", "/*E/E*")
    found = read_archs(write(tmp_path, "a.csv", ARCH_HEADER + row), cited=None)["H"]
    assert found.model is None and "MTP patterns" in found.skipped_reason


def test_cited_architectures_fill_only_rows_without_one(tmp_path):
    given = ARCH_HEADER + "Nemotron-3-Super,,,,,,,,,,,,,architecture not found\nM,8,1024,4096,16,4,32000,,,,,,no,\n"
    archs = read_archs(write(tmp_path, "a.csv", given))
    assert archs["Nemotron-3-Super"].model is not None and "archs_cited.csv" in archs["Nemotron-3-Super"].assumptions[0]
    assert archs["M"].model is not None and archs["M"].model.hidden_size == 1024  # the given file's own row
    assert read_archs(write(tmp_path, "b.csv", given), cited=None)["Nemotron-3-Super"].model is None
    own = ARCH_HEADER + "Nemotron-3-Super,8,1024,4096,16,4,32000,,,,,,no,\n"  # a file with its own: kept
    assert read_archs(write(tmp_path, "c.csv", own))["Nemotron-3-Super"].model.num_layers == 8


@pytest.mark.parametrize("name,billions", [("Nemotron-3-Super", 120), ("Nemotron-3-Ultra", 550)])
def test_cited_nemotron_3_parameter_counts_match_their_names(name, billions):
    # "120B-A12B" / "550B-A55B" (nvidia/NVIDIA-Nemotron-3-*): the decoder, embedding and output layer; with the
    # experts at hidden instead of the latent width Super would hold ~450B
    model = read_archs(CITED_ARCHS, cited=None)[name].model
    assert model is not None
    ex = ExecutionSpec()
    per_symbol = hybrid_symbol_params(model, ex)
    shapes = rank_shapes(model, ex)
    total = (sum(n * model.hybrid_layer_pattern.count(s) for s, n in per_symbol.items())
             + layer_params(shapes["embedding"]) + layer_params(shapes["output"]))
    assert total == pytest.approx(billions * 1e9, rel=0.01)


def test_cited_super_counts_the_model_flops_nvidia_publishes():
    # Megatron-Bridge performance summary rows of Nemotron-3-Super: 610 TFLOP/s at 7168 tokens/s/GPU (and 598 / 7040,
    # 542 / 6400): 84.7-85.1 GFLOP per token at seq 8192; the latent MoE and both MTP depths are in that count
    model = read_archs(CITED_ARCHS, cited=None)["Nemotron-3-Super"].model
    assert model_flops_per_token(model, 8192) == pytest.approx(610e12 / 7168, rel=0.01)
