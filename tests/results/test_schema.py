"""Every command's JSON, run on the shipped recipes, against the one result schema (``primus_ext.results``).

    python -m pytest -q tests/results

Each command writes ``--json -`` and stdout must be that document and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from primus_ext.cli import main
from primus_ext.results import KINDS, SCHEMA_VERSION
from primus_ext.results.schema import SCHEMA

jsonschema = pytest.importorskip("jsonschema")

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))
EIGHT_B = REPO / "recipes" / "llama3.1_8B-pretrain.yaml"
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def _valid(doc: dict, kind: str) -> dict:
    errors = [f"{e.json_path}: {e.message[:300]}" for e in VALIDATOR.iter_errors(doc)]
    assert not errors, "\n".join(errors[:10])
    assert doc["kind"] == kind and doc["schema_version"] == SCHEMA_VERSION
    return doc


def _stdout_json(capsys, argv: list[str], codes: tuple[int, ...] = (0,)) -> dict:
    """Run ``argv`` (with ``--json -``): stdout parses as one JSON document, exactly."""
    code = main(argv)
    out = capsys.readouterr().out
    assert code in codes, out
    return json.loads(out)


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert {branch["if"]["properties"]["kind"]["const"] for branch in SCHEMA["allOf"]} == set(KINDS)


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_project_and_memory_only_on_every_shipped_recipe(recipe: Path, capsys):
    doc = _valid(_stdout_json(capsys, ["project", str(recipe), "--analytic", "--json", "-"], (0, 3, 4)),
                 "projection")
    memory = doc["memory"]
    assert [s["peak_memory_gib"] for s in doc["stages"]] == [s["peak_memory_gib"] for s in memory["stages"]]
    for stage in memory["stages"]:  # the parts add up to the stage's peak
        parts = sum(stage[f"{p}_gib"] for p in ("params", "grads", "optimizer", "activations", "other"))
        assert parts == pytest.approx(stage["peak_memory_gib"], abs=0.01)
    assert 0 < doc["mfu"] < 1 and doc["band"]["low"] <= doc["tokens_per_s_per_gpu"] <= doc["band"]["high"]
    only = _valid(_stdout_json(capsys, ["project", str(recipe), "--memory-only", "--json", "-"], (0, 3, 4)),
                  "memory")
    assert only["memory"]["peak_memory_gib"] == memory["peak_memory_gib"] and only["fits"] == doc["fits"]


def test_project_exit_codes_follow_the_gate(capsys):
    fits = _stdout_json(capsys, ["project", str(EIGHT_B), "--analytic", "--json", "-"], (0,))
    over = _stdout_json(capsys, ["project", str(EIGHT_B), "--analytic", "--cluster", "h100", "--json", "-"], (3,))
    assert fits["fits"] is True and over["fits"] is False and over["memory"]["verdict"] == "out of memory"
    assert main(["project", str(EIGHT_B), "--memory-only", "--cluster", "h100", "--json", "-"]) == 3
    capsys.readouterr()
    assert main(["project", str(EIGHT_B), "tensor_model_parallel_size=3", "--json", "-"]) == 2
    assert capsys.readouterr().out == ""  # an illegal recipe: the reason on stderr, no document


def test_compare_json_to_stdout_only_and_to_a_file(tmp_path: Path, capsys):
    argv = ["compare", str(EIGHT_B), "micro_batch_size=1 fp8=null", "--json"]
    doc = _valid(_stdout_json(capsys, [*argv, "-"]), "comparison")
    project = _stdout_json(capsys, ["project", str(EIGHT_B), "--analytic", "--json", "-"])
    assert doc["a"]["tokens_per_s_per_gpu"] == project["tokens_per_s_per_gpu"] and doc["a"]["label"] in argv[1]
    assert doc["b"]["overrides"] == ["micro_batch_size=1", "fp8=null"] and doc["b"]["inputs"]["execution"][
        "precision"] == "bf16"
    throughput = next(r for r in doc["rows"] if r["name"] == "tokens/s/GPU")
    assert throughput["a"] == doc["a"]["tokens_per_s_per_gpu"] and throughput["change"].endswith("worse")
    out = tmp_path / "compare.json"
    assert main([*argv, str(out)]) == 0
    assert "tokens/s/GPU" in capsys.readouterr().out  # the table stays on stdout when the JSON goes to a file
    assert _valid(json.loads(out.read_text()), "comparison") == doc


def test_tune_json_to_stdout_only_and_to_a_file(tmp_path: Path, capsys):
    argv = ["tune", str(EIGHT_B), "--strategy", "exhaustive", "--analytic"]
    doc = _valid(_stdout_json(capsys, [*argv, "--json", "-"]), "tune")
    best = doc["best"]
    assert best["status"] == "projected" and 0 < best["mfu"] < 1 and best["peak_memory_gib"] < best["capacity_gib"]
    assert doc["regret"] == 0 and doc["ranked"][0] == doc["fastest"]
    assert best == (doc["baseline"] if doc["kept_recipe"] else doc["fastest"])
    out = tmp_path / "tune.json"
    assert main([*argv, "--json", str(out)]) == 0
    assert "best:" in capsys.readouterr().out  # the tables stay on stdout when the JSON goes to a file
    assert _valid(json.loads(out.read_text()), "tune")["best"] == best


def test_tune_verify_top_field_is_optional_and_checked(tmp_path: Path, capsys):
    folder = tmp_path / "verify"
    argv = ["tune", str(EIGHT_B), "--strategy", "exhaustive", "--analytic", "--no-regret", "--verify-top", "2",
            "--verify-dir", str(folder), "--json", "-"]
    doc = _valid(_stdout_json(capsys, argv), "tune")
    assert [c["name"] for c in doc["verify_top"]["candidates"]] == ["candidate-1", "candidate-2"]
    assert doc["verify_top"]["regret"] is None  # no run yet
    doc.pop("verify_top")
    _valid(doc, "tune")  # optional
    assert list(VALIDATOR.iter_errors({**doc, "verify_top": {"candidates": []}}))  # regret / spearman required


def test_ci_result_and_baselines(tmp_path: Path, capsys):
    suite = REPO / "ci" / "suite.yaml"
    shipped = _valid(json.loads((REPO / "ci" / "baseline.json").read_text()), "baseline")
    doc = _valid(_stdout_json(capsys, ["ci", str(suite), "--baseline", str(REPO / "ci" / "baseline.json"),
                                       "--json", "-"]), "ci")
    assert doc["exit_code"] == 0 and len(doc["entries"]) == len(shipped["entries"])
    assert all(0 < e["mfu"] < 1 and e["baseline"] for e in doc["entries"])
    # --update-baseline writes the same kind of file; a baseline of the older layout still reads
    (tmp_path / "suite.yaml").write_text(suite.read_text().replace("../recipes/", f"{REPO / 'recipes'}/"))
    assert main(["ci", str(tmp_path / "suite.yaml"), "--update-baseline"]) == 0
    written = _valid(json.loads((tmp_path / "baseline.json").read_text()), "baseline")
    assert written["entries"] == shipped["entries"]
    old = {"version": 1, "suite": "shipped-recipes", "entries": {
        name: {k: e[k] for k in ("tokens_per_s_per_gpu", "peak_memory_gib", "step_time_s", "cost_source")}
        for name, e in shipped["entries"].items()}}
    (tmp_path / "old.json").write_text(json.dumps(old))
    capsys.readouterr()
    again = _stdout_json(capsys, ["ci", str(tmp_path / "suite.yaml"), "--baseline", str(tmp_path / "old.json"),
                                  "--json", "-"])
    assert _valid(again, "ci")["exit_code"] == 0
    # a missing baseline: exit 2, nothing on stdout
    assert main(["ci", str(suite), "--baseline", str(tmp_path / "absent.json"), "--json", "-"]) == 2
    assert capsys.readouterr().out == ""


def test_train_projection_only_writes_a_projection_document(tmp_path: Path, capsys):
    code = main(["train", "--config", str(EIGHT_B), "--projection-only", "--analytic", "--workspace", str(tmp_path)])
    doc = _valid(json.loads((tmp_path / "projection.json").read_text()), "projection")
    assert code == {"out of memory": 3, "within the model's error": 4}.get(doc["memory"]["verdict"], 0)
    assert doc["overrides"] == []


@pytest.mark.slow
def test_train_verify_writes_a_verify_document(tmp_path: Path, capsys):
    code = main(["train", "--config", str(EIGHT_B), "--cluster", "cpu", "--nodes", "1", "--device", "cpu",
                 "--train-iters", "2", "--scale", "0.0625", "--nproc", "2", "--verify", "seq_length=256",
                 "num_layers=2", "vocab_size=4096", "--workspace", str(tmp_path)])
    assert code == 0
    doc = _valid(json.loads((tmp_path / "verify.json").read_text()), "verify")
    assert doc["measured"]["step_time_s"] > 0 and doc["projected"]["step_time_s"] > 0
    projection = _valid(json.loads((tmp_path / "projection.json").read_text()), "projection")
    assert projection["verify"]["error_pct"] == doc["error_pct"]


ARCH = ("name,num_layers,hidden,ffn_hidden,num_heads,num_kv_heads,vocab,num_experts,topk,moe_ffn_hidden,"
        "shared_experts,first_k_dense,mla(yes/no),notes\nM,8,1024,4096,16,4,32000,,,,,,no,\n")
RUNS = ("source,source_date,model,seq_len,precision,gpu,num_gpus,tp,pp,vpp,cp,ep,etp,dp,mbs,gbs,extra_flags,"
        "tokens_per_sec_per_gpu,tflops_per_gpu,mfu,step_time_s,notes\n"
        "S,2025,M,4096,BF16,H100,16,1,1,,1,,,16,1,64,,20000,,,,\n"
        "S,2025,M,4096,BF16,H100,16,2,1,,1,,,8,1,64,,18000,,,,\n")


def test_validate_and_calibrate_from_a_run(tmp_path: Path, capsys):
    (tmp_path / "a.csv").write_text(ARCH)
    (tmp_path / "r.csv").write_text(RUNS)
    (tmp_path / "mine.json").write_text(json.dumps({
        "source": "me", "model": "M", "seq_len": 4096, "precision": "BF16", "gpu": "H100", "num_gpus": 16,
        "tp": 1, "pp": 1, "cp": 1, "mbs": 1, "gbs": 64, "step_time_s": 0.8}))
    doc = _valid(_stdout_json(capsys, ["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv"),
                                       "--calibrate-from", str(tmp_path / "mine.json"), "--json", "-"]), "validation")
    assert doc["calibrated_from_user_run"]["summary"]["n_projected"] == 2
    assert doc["rows"][0]["measured_tokens_per_s_per_gpu"] == 20000


def test_old_names_fail_the_schema(capsys):
    doc = _stdout_json(capsys, ["project", str(EIGHT_B), "--analytic", "--json", "-"])
    doc["tokens_per_sec_per_gpu"] = doc.pop("tokens_per_s_per_gpu")
    assert not VALIDATOR.is_valid(doc)
    memory = _stdout_json(capsys, ["project", str(EIGHT_B), "--memory-only", "--json", "-"])
    memory["memory"]["stages"][0]["total_gib"] = memory["memory"]["stages"][0].pop("peak_memory_gib")
    assert not VALIDATOR.is_valid(memory)
    memory = _stdout_json(capsys, ["project", str(EIGHT_B), "--memory-only", "--json", "-"])
    memory["memory"]["mfu"] = 42.0
    assert not VALIDATOR.is_valid(memory)


def test_stage_idle_and_imbalance_fields_validate_and_stay_optional():
    """``project --json`` carries each stage's idle seconds and share and the imbalance flag; documents written
    before them (schema version 1) still validate, and out-of-range values do not."""
    import copy
    import dataclasses

    from primus_ext.hardware import load_system
    from primus_ext.projection import project
    from primus_ext.results.projection import projection_document
    from primus_ext.specs import ExecutionSpec, ModelSpec

    model = ModelSpec(name="dense", num_layers=16, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                      num_query_groups=8, kv_channels=128, vocab_size=128256)
    execution = ExecutionSpec(tensor_model_parallel_size=1, pipeline_model_parallel_size=4, data_parallel_size=2,
                              micro_batch_size=1, global_batch_size=64, seq_length=4096, precision="bf16")
    doc = json.loads(json.dumps(projection_document(project(model, execution, load_system("h100", 1), None))))
    _valid(doc, "projection")
    shares = [s["idle_fraction"] for s in doc["stages"]]
    assert all(s["idle_s"] >= 0 for s in doc["stages"]) and min(shares) < max(shares)
    assert doc["imbalance"]["flagged"] and doc["imbalance"]["busiest_rank"] == 3
    assert doc["imbalance"]["spread"] == pytest.approx(max(shares) - min(shares))
    balanced = project(dataclasses.replace(model, vocab_size=1024), execution, load_system("h100", 1), None)
    assert not _valid(json.loads(json.dumps(projection_document(balanced))), "projection")["imbalance"]["flagged"]
    old = copy.deepcopy(doc)
    del old["imbalance"]
    for stage in old["stages"]:
        del stage["idle_s"], stage["idle_fraction"]
    _valid(old, "projection")
    bad = copy.deepcopy(doc)
    bad["stages"][0]["idle_fraction"] = 1.5
    assert list(VALIDATOR.iter_errors(bad))


def test_project_sweep_document(capsys):
    doc = _valid(_stdout_json(capsys, ["project", str(EIGHT_B), "--analytic", "--cluster", "h100", "--nodes", "1,3",
                                       "--json", "-"]), "sweep")
    assert [e["status"] for e in doc["entries"]] == ["projected", "refused"]
