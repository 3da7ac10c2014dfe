"""``primus-ext validate`` end to end on a small CSV pair (and on the shipped set when present)."""

import json
import math
from pathlib import Path

import pytest

from primus_ext.cli import main

VALIDATION = Path(__file__).resolve().parents[3] / "shared" / "validation"
ARCH = ("name,num_layers,hidden,ffn_hidden,num_heads,num_kv_heads,vocab,num_experts,topk,moe_ffn_hidden,"
        "shared_experts,first_k_dense,mla(yes/no),notes\nM,8,1024,4096,16,4,32000,,,,,,no,\n")
RUNS = ("source,source_date,model,seq_len,precision,gpu,num_gpus,tp,pp,vpp,cp,ep,etp,dp,mbs,gbs,extra_flags,"
        "tokens_per_sec_per_gpu,tflops_per_gpu,mfu,step_time_s,notes\n"
        "S,2025,M,4096,BF16,H100,16,1,1,,1,,,16,1,64,,20000,,,,\n"
        "S,2025,M,4096,BF16,H100,16,2,1,,1,,,8,1,64,,18000,,,,\n"
        "S,2025,M,4096,BF16,H100,16,2,2,,1,,,4,1,64,,15000,,,,\n"
        "S,2025,M,4096,NVFP4,H100,16,1,1,,1,,,16,1,64,,30000,,,,\n")


def test_validate_json_layout(tmp_path, capsys):
    (tmp_path / "a.csv").write_text(ARCH)
    (tmp_path / "r.csv").write_text(RUNS)
    (tmp_path / "mine.json").write_text(json.dumps({
        "source": "me", "model": "M", "seq_len": 4096, "precision": "BF16", "gpu": "H100", "num_gpus": 16,
        "tp": 1, "pp": 1, "cp": 1, "mbs": 1, "gbs": 64, "step_time_s": 0.8}))
    out = tmp_path / "v.json"
    code = main(["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv"), "--json", str(out),
                 "--calibrate-from", str(tmp_path / "mine.json")])
    assert code == 0
    data = json.loads(out.read_text())
    assert [r["index"] for r in data["rows"]] == [0, 1, 2, 3]
    first = data["rows"][0]
    assert set(first) >= {"index", "model", "gpu", "num_gpus", "measured_tokens_per_s_per_gpu",
                          "projected_tokens_per_s_per_gpu", "error_pct", "skipped_reason"}
    assert first["error_pct"] == pytest.approx(
        (first["projected_tokens_per_s_per_gpu"] - 20000) / 20000 * 100)
    assert "has no FP4 tensor cores" in data["rows"][3]["skipped_reason"]  # NVFP4 on an H100
    summary = data["summary"]
    assert summary["n_projected"] == 3 and summary["n_skipped"] == 1
    assert set(summary) >= {"median_abs_error_pct", "p90_abs_error_pct", "max_abs_error_pct",
                            "spearman_by_group", "kendall_by_group"}
    assert "M | H100 | bf16" in summary["spearman_by_group"]
    errors = [r["error_pct"] for r in data["rows"][:3]]
    assert summary["by_model"]["M"]["n"] == 3
    assert summary["mean_abs_log_error"] == pytest.approx(
        sum(abs(math.log1p(e / 100)) for e in errors) / 3)
    assert summary["n_above_20_pct"] == sum(1 for e in errors if abs(e) > 20)
    assert summary["by_model"]["M"]["median_error_pct"] == pytest.approx(sorted(errors)[1])
    # the user's run: 64 * 4096 / (0.8 s * 16) = 20480 tok/s/GPU anchors the group
    assert data["calibrated_from_user_run"]["summary"]["n_projected"] == 3
    printed = capsys.readouterr().out
    assert "worst" in printed and "error by model" in printed and "mean |log error|" in printed


def test_validate_bad_file_exits_2(tmp_path, capsys):
    (tmp_path / "a.csv").write_text("name\nx\n")
    assert main(["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv")]) == 2
    assert "missing columns" in capsys.readouterr().err


@pytest.mark.skipif(not VALIDATION.exists(), reason="shared/validation not present")
def test_validate_published_set_runs(tmp_path):
    out = tmp_path / "v.json"
    assert main(["validate", str(VALIDATION / "measured_throughput.csv"), "--archs",
                 str(VALIDATION / "model_archs.csv"), "--hardware", str(VALIDATION / "hardware_specs.csv"),
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["rows"]) == 184 and data["summary"]["n_projected"] >= 100


@pytest.mark.parametrize("jobs", ["0", "-2", "many"])
def test_validate_refuses_a_job_count_below_one(tmp_path, capsys, jobs):
    with pytest.raises(SystemExit) as exit_:
        main(["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv"), "--cv", "--jobs", jobs])
    assert exit_.value.code == 2 and "--jobs" in capsys.readouterr().err


def test_validate_holds_out_one_submission_with_the_archs_beside_the_runs(tmp_path):
    """No --archs: model_archs.csv beside the runs; --cv --holdout submission fits each AMD board on the other rows."""
    (tmp_path / "model_archs.csv").write_text(ARCH)
    header = RUNS.splitlines()[0]
    rows = "".join(f'MLPerf llama2_70b_lora,2025,M,8192,FP8,MI325X,8,1,1,,1,,,8,1,8,"LoRA r=16",{v},,,,\n'
                   for v in (300_000, 306_000, 312_000))
    (tmp_path / "r.csv").write_text(header + "\n" + rows)
    out = tmp_path / "v.json"
    assert main(["validate", str(tmp_path / "r.csv"), "--cv", "--holdout", "submission", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["summary"]["n_projected"] == 3 and data["summary"]["n_skipped"] == 0
    held = data["cross_validation"]
    assert held["label"] == "leave-one-submission-out"
    errors = [r["error_pct"] for r in held["rows"]]
    # each row against a fit on the two others: the low and high rows land on opposite sides, within the spread
    assert errors[0] > 0 > errors[2] and max(abs(e) for e in errors) < 5.0


def test_a_run_file_that_is_not_utf8_is_refused_with_exit_2(tmp_path, capsys):
    (tmp_path / "a.csv").write_text(ARCH)
    (tmp_path / "r.csv").write_text(RUNS)
    (tmp_path / "mine.csv").write_bytes(b"source,model\n\xff\xfe\xfa,M\n")
    code = main(["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv"),
                 "--calibrate-from", str(tmp_path / "mine.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "not UTF-8" in err and "Traceback" not in err


def test_one_row_the_projection_fails_on_is_one_skipped_row(tmp_path, capsys, monkeypatch):
    """Issue 56: a row that a model part fails on (a bug, not a refusal) is skipped with the error named; the other
    rows are projected and the command exits 0."""
    from primus_ext.validate import run as run_module

    real = run_module.analytic_projector

    def failing_on_row_1(row):
        if row.index == 1:
            raise KeyError("delayed")
        return real(row)

    monkeypatch.setattr(run_module, "analytic_projector", failing_on_row_1)
    (tmp_path / "a.csv").write_text(ARCH)
    (tmp_path / "r.csv").write_text(RUNS)
    out = tmp_path / "v.json"
    assert main(["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv"), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert rows[1]["projected_tokens_per_s_per_gpu"] is None
    assert rows[1]["skipped_reason"].startswith("internal error (KeyError: 'delayed')")
    assert rows[0]["projected_tokens_per_s_per_gpu"] and rows[2]["projected_tokens_per_s_per_gpu"]


def test_validate_rows_carry_their_band_and_the_summary_its_coverage(tmp_path, capsys):
    """Issue 53: each projected row's band in tokens/s/GPU (its class error from the shipped rows of other models: M
    has none there, so its class's own rows all count), and how often the bands hold, printed and in JSON."""
    (tmp_path / "a.csv").write_text(ARCH)
    (tmp_path / "r.csv").write_text(RUNS)
    out = tmp_path / "v.json"
    assert main(["validate", str(tmp_path / "r.csv"), "--archs", str(tmp_path / "a.csv"), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    banded = [r for r in data["rows"] if r["projected_tokens_per_s_per_gpu"] is not None]
    assert len(banded) == 3 and "band" not in data["rows"][3]  # the NVFP4-on-H100 row is not projected
    for row in banded:
        band = row["band"]
        assert band["unit"] == "tokens_per_s_per_gpu"
        assert band["low"] < row["projected_tokens_per_s_per_gpu"] < band["high"]
        assert band["inside"] == (band["low"] <= row["measured_tokens_per_s_per_gpu"] <= band["high"])
        assert band["evidence"]["class"] == {"family": "hopper", "type": "dense", "precision": "bf16", "scale": "<=64"}
    coverage = data["summary"]["band_coverage"]
    assert coverage["n"] == 3 and coverage["inside"] == sum(r["band"]["inside"] for r in banded)
    assert coverage["by_class"]["hopper | dense"]["n"] == 3
    assert f"band coverage {coverage['inside']}/3" in capsys.readouterr().out
