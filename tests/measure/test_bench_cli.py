"""``primus-ext bench`` end to end on a small flat Megatron YAML; a failing layer does not stop the run."""

from __future__ import annotations

import json

import pytest
import yaml

import primus_ext.measure.runner as runner
import primus_ext.measure.single as single
from primus_ext.cli import main

SMALL = {"num_layers": 2, "hidden_size": 256, "ffn_hidden_size": 512, "num_attention_heads": 4,
         "group_query_attention": True, "num_query_groups": 2, "vocab_size": 1000, "seq_length": 128,
         "max_position_embeddings": 128, "micro_batch_size": 1, "global_batch_size": 8, "bf16": True,
         "swiglu": True, "normalization": "RMSNorm", "position_embedding_type": "rope",
         "add_bias_linear": False}


@pytest.fixture
def recipe(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    return path


def _bench(recipe, tmp_path, capsys, *extra: str) -> tuple[int, dict]:
    argv = ["bench", str(recipe), "--cluster", "mi300x", "--nodes", "1", "--reps", "2", "--warmup", "1",
            "--out", str(tmp_path / "store.sqlite"), "--json", *extra]
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_bench_measures_then_reuses_the_store(recipe, tmp_path, capsys, monkeypatch):
    code, report = _bench(recipe, tmp_path, capsys, "--export", str(tmp_path / "out.jsonl"))
    assert code == 0
    layers = {row["kind"]: row for row in report["layers"]}
    assert set(layers) == {"dense", "embedding", "output"}
    assert report["scale"] == 1.0  # small enough for CPU at full size
    for row in layers.values():
        assert row["status"] == "ok" and row["source"] == "measured:cpu" and row["device"].startswith("cpu:")
        assert row["fwd_ms"] > 0 and row["bwd_ms"] > 0 and row["params"] > 0
    assert layers["dense"]["saved_bytes"] > 0 and layers["dense"]["shape"]["seq_length"] == 128
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 3

    def must_not_measure(shapes, **_kw):
        assert not list(shapes), "entries already in the store were measured again"
        return []

    monkeypatch.setattr(runner, "measure_many", must_not_measure)
    code, again = _bench(recipe, tmp_path, capsys)
    assert code == 0 and again["layers"] == report["layers"]


def test_failing_layer_is_recorded_and_the_run_continues(recipe, tmp_path, capsys, monkeypatch):
    real_build = single.build_layer

    def build(shape, **kw):
        if shape.kind == "dense":
            raise RuntimeError("unsupported kernel: injected by the test")
        return real_build(shape, **kw)

    monkeypatch.setattr(single, "build_layer", build)
    code, report = _bench(recipe, tmp_path, capsys)
    assert code == 1
    layers = {row["kind"]: row for row in report["layers"]}
    assert layers["dense"]["status"] == "failed"
    assert layers["dense"]["reason"] == "RuntimeError: unsupported kernel: injected by the test"
    assert layers["embedding"]["status"] == "ok" and layers["output"]["status"] == "ok"


def test_bad_scale_is_a_user_error(recipe, tmp_path, capsys):
    assert main(["bench", str(recipe), "--cluster", "mi300x", "--scale", "2", "--out",
                 str(tmp_path / "s.sqlite")]) == 2
    assert "scale must be in (0, 1]" in capsys.readouterr().err


def test_recomputed_kinds_are_benched_with_their_plain_variant():
    from archs import GQA

    from primus_ext.cli.bench import bench_shapes
    from primus_ext.model.rank_shape import RankShape

    full = RankShape(kind="dense", arch=GQA, recompute="full")
    emb = RankShape(kind="embedding", arch=GQA)
    out = bench_shapes({"dense": full, "embedding": emb})
    assert out == {"dense": RankShape(kind="dense", arch=GQA), "dense (recompute full)": full, "embedding": emb}
