"""``primus-ext project``: text report, JSON document, domain errors exit 2."""

import json
from pathlib import Path

import pytest

from primus_ext.cli import main

RECIPE = "recipes/llama3.1_8B-pretrain.yaml"


def test_text_report(capsys):
    assert main(["project", RECIPE, "--analytic", "--cluster", "h100", "--nodes", "2"]) == 3  # 80 GB: over
    captured = capsys.readouterr()
    out = captured.out
    assert "out of memory" in captured.err and "exit 3" in captured.err
    for needle in ("tokens/s/GPU", "Step breakdown", "pipeline bubble", "Pipeline stages", "Cost sources",
                   "dense      analytic", "16 x h100"):
        assert needle in out, needle


def test_json_document(capsys, tmp_path):
    assert main(["project", RECIPE, "--analytic", "--cluster", "h100", "--nodes", "2", "--json", "-"]) == 3
    doc = json.loads(capsys.readouterr().out)
    for key in ("tokens_per_s_per_gpu", "step_time_s", "tflops_per_gpu", "mfu", "breakdown", "memory", "sources"):
        assert key in doc
    assert doc["kind"] == "projection" and doc["sources"]["dense"] == "analytic"
    tokens = doc["inputs"]["execution"]["global_batch_size"] * doc["inputs"]["execution"]["seq_length"]
    assert doc["tokens_per_s_per_gpu"] * doc["step_time_s"] * 16 == pytest.approx(tokens)
    out = tmp_path / "p.json"
    assert main(["project", RECIPE, "tensor_model_parallel_size=2", "--analytic", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["inputs"]["execution"]["tensor_model_parallel_size"] == 2


def test_bad_recipe_exits_2(capsys, tmp_path):
    assert main(["project", str(tmp_path / "missing.yaml")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["project", RECIPE, "tensor_model_parallel_size=3", "--analytic"]) == 2
    assert "error:" in capsys.readouterr().err


def test_memory_block_and_memory_only(capsys):
    pytest.importorskip("primus_ext.model.memory")
    assert main(["project", RECIPE, "--analytic", "--cluster", "h100", "--nodes", "2", "--json", "-"]) == 3
    doc = json.loads(capsys.readouterr().out)
    memory = doc["memory"]
    assert isinstance(memory["fits"], bool) and memory["peak_memory_gib"] > 0 and memory["capacity_gib"] > 70
    assert len(memory["stages"]) == 1 and memory["verdict"] == "out of memory"
    stage = memory["stages"][0]
    parts = sum(stage[f"{p}_gib"] for p in ("params", "grads", "optimizer", "activations", "other"))
    assert parts == pytest.approx(stage["peak_memory_gib"], abs=0.01)
    assert doc["stages"][0]["peak_memory_gib"] == stage["peak_memory_gib"]  # each pipeline stage's peak, filled
    assert main(["project", RECIPE, "--memory-only", "--cluster", "h100", "--nodes", "2", "--json", "-"]) == 3
    only = json.loads(capsys.readouterr().out)
    assert only["kind"] == "memory" and only["memory"] == memory
    pytest.importorskip("primus_ext.report.memory_table")
    assert main(["project", RECIPE, "--memory-only", "--cluster", "h100"]) == 3  # the gate's codes
    assert capsys.readouterr().out.strip()
    assert main(["project", RECIPE, "--memory-only"]) == 0  # the recipe's own 8 x MI325X: it fits


def test_missing_store_is_an_error_not_a_new_empty_file(tmp_path, capsys):
    from primus_ext.cli import main

    store = tmp_path / "typo.sqlite"
    recipe = str(Path(__file__).resolve().parents[2] / "recipes" / "llama3.1_8B-pretrain.yaml")
    for argv in (["project", recipe, "--store", str(store)], ["tune", recipe, "--store", str(store), "--budget", "2"]):
        assert main(argv) == 2 and "no such file" in capsys.readouterr().err
    assert not store.exists()


def test_json_takes_an_output_and_never_a_recipe(capsys, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(Path(RECIPE).read_text())
    before = recipe.read_text()
    assert main(["project", RECIPE, "--analytic", "--json", str(recipe)]) == 2  # the old `--json recipe.yaml` trap
    assert "--json takes the file the JSON is written to" in capsys.readouterr().err
    assert recipe.read_text() == before
    with pytest.raises(SystemExit) as exit_:  # a bare --json: argparse names the missing output (exit 2)
        main(["project", RECIPE, "--analytic", "--json"])
    assert exit_.value.code == 2 and "--json" in capsys.readouterr().err


def test_the_node_count_says_where_it_came_from(capsys, monkeypatch, tmp_path):
    """A leftover ``$NNODES`` changes every figure: the target line and ``nodes_source`` say it was used (issue 53)."""
    text = Path(RECIPE).read_text()
    recipe = tmp_path / "no-nodes.yaml"  # the shipped recipe less its comment's node count
    recipe.write_text("\n".join(line for line in text.splitlines() if not line.startswith("# primus-ext:")) + "\n")
    monkeypatch.setenv("NNODES", "2")
    assert main(["project", str(recipe), "--analytic", "--cluster", "mi325x", "--memory-only"]) in (0, 3)
    out = capsys.readouterr().out
    assert "target: 2 nodes x 8" in out and "; nodes from $NNODES" in out
    assert main(["project", RECIPE, "--analytic", "--nodes", "4", "--json", "-"]) in (0, 3)
    doc = json.loads(capsys.readouterr().out)
    assert doc["nodes"] == 4 and doc["nodes_source"] == "--nodes"
    assert main(["project", RECIPE, "--analytic", "--memory-only", "--json", "-"]) in (0, 3)
    assert json.loads(capsys.readouterr().out)["nodes_source"] == "the recipe's # primus-ext: nodes"
    monkeypatch.delenv("NNODES")
    assert main(["project", str(recipe), "--analytic", "--cluster", "mi325x", "--memory-only", "--json", "-"]) in (0, 3)
    assert json.loads(capsys.readouterr().out)["nodes_source"].startswith("the default (1")
