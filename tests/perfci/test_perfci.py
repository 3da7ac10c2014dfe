"""Performance CI: classification against a baseline, exit codes, JUnit / markdown outputs."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from primus_ext.cli import main
from primus_ext.errors import RecipeError
from primus_ext.perfci import load_suite

REPO = Path(__file__).resolve().parents[2]
RECIPE = """
tensor_model_parallel_size: 1
pipeline_model_parallel_size: 1
num_layers: 4
hidden_size: 1024
ffn_hidden_size: 4096
num_attention_heads: 16
vocab_size: 32000
seq_length: 2048
micro_batch_size: 1
global_batch_size: 64
"""


@pytest.fixture
def suite(tmp_path):
    (tmp_path / "tiny.yaml").write_text(RECIPE)
    path = tmp_path / "suite.yaml"
    path.write_text("suite: unit\nentries:\n  - recipe: tiny.yaml\n    cluster: h100\n    nodes: [1, 2]\n"
                    "    tolerance: {throughput_pct: 5, memory_gib: 1}\n")
    return path


def record(suite, tmp_path):
    base = tmp_path / "baseline.json"
    assert main(["ci", str(suite), "--baseline", str(base), "--update-baseline"]) == 0
    return base, json.loads(base.read_text())


def rewrite(base, data, name, **changes):
    data["entries"][name].update(changes)
    base.write_text(json.dumps(data))


def test_within_tolerance_passes_and_regression_fails(suite, tmp_path, capsys):
    base, data = record(suite, tmp_path)
    name = "tiny@h100/1n"
    now = data["entries"][name]["tokens_per_s_per_gpu"]
    rewrite(base, data, name, tokens_per_s_per_gpu=now * 1.03)  # 3 % slower than baseline: within 5 %
    assert main(["ci", str(suite), "--baseline", str(base)]) == 0
    rewrite(base, data, name, tokens_per_s_per_gpu=now * 1.10)  # 9 % slower: beyond tolerance
    junit = tmp_path / "perf.xml"
    md = tmp_path / "perf.md"
    assert main(["ci", str(suite), "--baseline", str(base), "--junit", str(junit), "--markdown", str(md)]) == 1
    assert "REGRESSION: tiny@h100/1n" in capsys.readouterr().err
    root = ET.parse(junit).getroot()
    assert root.find("testsuite").get("tests") == "2" and root.find("testsuite").get("failures") == "1"
    failure = root.find(".//testcase[@name='tiny@h100/1n']/failure")
    assert failure is not None and "throughput" in failure.get("message")
    assert "❌" in md.read_text() and "| tiny@h100/2n |" in md.read_text()


def test_improvement_passes_and_is_reported(suite, tmp_path):
    base, data = record(suite, tmp_path)
    name = "tiny@h100/2n"
    rewrite(base, data, name, tokens_per_s_per_gpu=data["entries"][name]["tokens_per_s_per_gpu"] * 0.8)
    out = tmp_path / "r.json"
    assert main(["ci", str(suite), "--baseline", str(base), "--json", str(out)]) == 0
    entries = {e["name"]: e for e in json.loads(out.read_text())["entries"]}
    assert entries[name]["status"] == "improved" and entries[name]["throughput_delta_pct"] > 20


def test_memory_growth_is_a_regression(suite, tmp_path):
    base, data = record(suite, tmp_path)
    name = "tiny@h100/1n"
    if data["entries"][name]["peak_memory_gib"] is None:
        pytest.skip("memory model not wired into the projection")
    rewrite(base, data, name, peak_memory_gib=data["entries"][name]["peak_memory_gib"] - 2.0)
    assert main(["ci", str(suite), "--baseline", str(base)]) == 1


def test_measured_anchor_catches_projection_drift(tmp_path):
    (tmp_path / "tiny.yaml").write_text(RECIPE)
    suite = tmp_path / "s.yaml"
    suite.write_text("entries:\n  - recipe: tiny.yaml\n    cluster: h100\n    nodes: 1\n"
                     "    measured: {tokens_per_s_per_gpu: 1.0, tolerance_pct: 10, source: unit}\n")
    base, _ = record(suite, tmp_path)
    out = tmp_path / "r.json"
    assert main(["ci", str(suite), "--baseline", str(base), "--json", str(out)]) == 1
    assert json.loads(out.read_text())["entries"][0]["status"] == "drift"


def test_missing_baseline_entry_and_malformed_suite_exit_2(suite, tmp_path, capsys):
    base = tmp_path / "b.json"
    base.write_text(json.dumps({"version": 1, "entries": {}}))
    assert main(["ci", str(suite), "--baseline", str(base)]) == 2
    assert main(["ci", str(suite), "--baseline", str(tmp_path / "absent.json")]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("entries:\n  - recipe: nope.yaml\n    nodes: 0\n    tolerance: {throughput_pct: -1, x: 2}\n"
                   "  - cluster: h100\nextra: 1\n")
    capsys.readouterr()
    assert main(["ci", str(bad)]) == 2
    err = capsys.readouterr().err
    for fragment in ("entries[0].recipe", "entries[0].nodes", "entries[0].tolerance.throughput_pct",
                     "entries[0].tolerance.x", "entries[1].recipe", "suite.extra"):
        assert fragment in err
    assert "Traceback" not in err
    with pytest.raises(RecipeError):
        load_suite(bad)


def test_junit_validates_against_schema(suite, tmp_path):
    xmlschema = pytest.importorskip("xmlschema")
    base, data = record(suite, tmp_path)
    rewrite(base, data, "tiny@h100/1n", tokens_per_s_per_gpu=1e12)
    junit = tmp_path / "perf.xml"
    main(["ci", str(suite), "--baseline", str(base), "--junit", str(junit)])
    schema = xmlschema.XMLSchema(str(Path(__file__).with_name("junit.xsd")))
    schema.validate(str(junit))
    bad = tmp_path / "bad.xml"
    bad.write_text("<testsuites><testsuite name='x'><testcase/></testsuite></testsuites>")
    assert not schema.is_valid(str(bad))  # the schema is strict enough to reject a broken file


def test_example_suite_matches_committed_baseline():
    """The shipped example: projections of the shipped recipes equal ci/baseline.json (within
    tolerance). A deliberate model change updates it with --update-baseline."""
    assert main(["ci", str(REPO / "ci" / "suite.yaml"), "--baseline", str(REPO / "ci" / "baseline.json")]) == 0


def test_a_copied_primus_recipe_notes_the_bundled_presets_and_config_roots_names_a_checkout(tmp_path, capsys):
    """A Primus experiment copied out of its checkout is priced with primus-ext's bundled presets: ``ci`` says so
    per entry (issue 53); ``config_roots:`` points the entry at a checkout's presets instead."""
    import shutil

    shutil.copy(REPO / "recipes/llama3.1_8B-pretrain.yaml", tmp_path / "l8b.yaml")
    for part in ("models/llama3.1_8B.yaml", "modules/pre_trainer.yaml"):
        (tmp_path / "primus" / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "recipes" / part, tmp_path / "primus" / part)
    path = tmp_path / "suite.yaml"
    path.write_text("entries:\n  - {recipe: l8b.yaml, cluster: mi325x, nodes: 1, name: bundled}\n"
                    "  - {recipe: l8b.yaml, cluster: mi325x, nodes: 1, name: rooted, config_roots: [primus]}\n")
    out = tmp_path / "ci.json"
    assert main(["ci", str(path), "--baseline", str(tmp_path / "b.json"), "--update-baseline",
                 "--json", str(out)]) == 0
    err = capsys.readouterr().err
    assert "note: bundled: model preset 'llama3.1_8B.yaml' taken from primus-ext's bundled" in err
    assert "note: rooted" not in err
    notes = {e["name"]: e["notes"] for e in json.loads(out.read_text())["entries"]}
    assert len(notes["bundled"]) == 2 and notes["rooted"] == []
