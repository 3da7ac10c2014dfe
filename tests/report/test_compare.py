"""``primus-ext compare A B``: two recipes or two override sets side by side, as text and as one HTML page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from primus_ext.cli import main
from primus_ext.cli.compare import Side, parse_sides
from primus_ext.errors import RecipeError
from primus_ext.report.compare import Row, change, compare_rows, format_compare
from primus_ext.report.html import render_html

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def test_sides_from_one_argument_each():
    a, b = parse_sides("r.yaml micro_batch_size=2", "tensor_model_parallel_size=8")
    assert a == Side(recipe="r.yaml", overrides=("micro_batch_size=2",))
    assert b == Side(recipe="r.yaml", overrides=("micro_batch_size=2", "tensor_model_parallel_size=8"))
    assert parse_sides("a.yaml", "b.yaml x=1")[1] == Side(recipe="b.yaml", overrides=("x=1",))
    for bad in (("x=1", "b.yaml"), ("", "b.yaml"), ("a.yaml", "'unclosed")):
        with pytest.raises(RecipeError):
            parse_sides(*bad)


def test_change_is_judged_by_the_row_direction():
    assert change(Row(name="tok", a=100.0, b=110.0, better="higher")) == "+10.0 % better"
    assert change(Row(name="step", a=100.0, b=110.0, better="lower")) == "+10.0 % worse"
    assert change(Row(name="n", a=4, b=4)) == "="
    assert change(Row(name="tp", a=None, b=3.0, better="lower")) == ""
    assert change(Row(name="layout", a="TP4", b="TP8")) == "differs"


def test_rows_of_two_recipes(llama405b, deepseek_v3):
    rows = {r.name: r for r in compare_rows(llama405b, deepseek_v3)}
    assert rows["tokens/s/GPU"].a == pytest.approx(llama405b.tokens_per_s_per_gpu)
    assert rows["ep comm (exposed)"].a is None and rows["ep comm (exposed)"].b > 1000  # ms
    assert rows["tp comm (exposed)"].b is None
    text = format_compare(list(rows.values()), ("405B", "DSv3"))
    assert text.splitlines()[:2] == ["A: 405B", "B: DSv3"] and "most idle stage" in text


def test_compare_cli(tmp_path: Path, capsys):
    out = tmp_path / "compare.html"
    recipe = str(RECIPES / "llama3.1_70B-pretrain.yaml")
    assert main(["compare", recipe, "pipeline_model_parallel_size=4", "--html", str(out)]) == 0
    text = capsys.readouterr().out
    assert "pipeline_model_parallel_size=4" in text and "TP4 PP4" in text and "TP4 PP8" in text
    page = out.read_text(encoding="utf-8")
    assert page.count("<iframe") == 2 and "B vs A" in page and "http" not in page.split("<iframe")[0]
    assert main(["compare", recipe, "tensor_model_parallel_size=3"]) == 2  # illegal side: exit 2, no traceback
    assert "not divisible" in capsys.readouterr().err


def test_report_shows_the_baseline_beside(projection, llama405b):
    page = render_html(projection, baseline=("the recipe as written", llama405b))
    assert "the recipe as written beside this projection" in page and "B vs A" in page


def test_auto_tune_reports_show_the_recipe_as_written(projection, llama405b, tmp_path: Path):
    from primus_ext.launcher.projection_only import write_reports

    files = write_reports(projection, tmp_path, baseline=("the recipe as written", llama405b))
    page = files["html"].read_text(encoding="utf-8")
    assert "the recipe as written beside this projection" in page and files["png"].stat().st_size > 0


def test_two_gpu_counts_compare_per_gpu_not_per_step(tmp_path: Path, capsys):
    """8 against 32 GPUs: a step time is not 'better' (issue 53); tokens/s/GPU is judged; each side's schedule."""
    recipe = str(RECIPES / "llama3.1_8B-pretrain.yaml")
    assert main(["compare", recipe, recipe, "--nodes", "1", "--nodes-b", "4", "--analytic", "--cluster", "h200"]) == 0
    lines = {line.split("  ")[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "not comparable: 8 vs 32 GPUs (compare per GPU)" in lines["step time"]
    assert "better" not in lines["step time"] and "worse" not in lines["step time"]
    assert "better" in lines["tokens/s/GPU"] or "worse" in lines["tokens/s/GPU"] or "=" in lines["tokens/s/GPU"]
    assert not any(w in lines["compute"] for w in ("better", "worse"))
    assert lines["pipeline schedule"].count("1F1B") == 2
    assert main(["compare", recipe, "micro_batch_size=1", "--analytic", "--cluster", "h200", "--json", "-"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert "comparable" not in rows["step time"]["change"] and rows["pipeline schedule"]["change"] == ""
