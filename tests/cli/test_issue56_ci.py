"""Issue 56, parts 4-5 for ``ci``: a baseline nested past any baseline's depth, holding an integer of 5 001 digits, or
figures that are not numbers is refused (exit 2, every problem listed, no traceback); one suite entry the projection
fails on with an internal error is one error row with its reason, and the other entries go on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from primus_ext.cli import main
from primus_ext.perfci import runner

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "llama3.1_8B-pretrain.yaml"


def _suite(tmp_path: Path, nodes: str = "1") -> Path:
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"suite: s\nentries:\n  - recipe: {RECIPE}\n    cluster: h100\n    nodes: {nodes}\n")
    return suite


@pytest.mark.parametrize(("baseline", "said"), [
    ('{"entries": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper than 64 levels"),  # RecursionError
    ('{"entries": {"a": ' + "[" * 500 + "]" * 500 + "}}", "nested deeper than 64 levels"),  # parsed, then walked
    ('{"entries": {"a": {"mfu": 1' + "0" * 5000 + "}}}", "4300 digits"),
    ('{"entries": {"a": {"mfu": 1e999}}}', "past a float's range"),
])
def test_a_baseline_no_ci_wrote_is_refused_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               baseline: str, said: str) -> None:
    (tmp_path / "baseline.json").write_text(baseline)
    assert main(["ci", str(_suite(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert said in err and "unreadable baseline" in err and "Traceback" not in err


def test_baseline_figures_that_are_not_numbers_are_each_named(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    name = "llama3.1_8B-pretrain@h100/1n"
    (tmp_path / "baseline.json").write_text(json.dumps(
        {"entries": {name: {"tokens_per_s_per_gpu": "fast", "peak_memory_gib": [1], "mfu": True}}}))
    assert main(["ci", str(_suite(tmp_path))]) == 2  # was: TypeError: unsupported operand type(s) for -
    err = capsys.readouterr().err
    assert "3 problem(s)" in err
    for key in ("tokens_per_s_per_gpu", "peak_memory_gib", "mfu"):
        assert f"entries.{name}.{key}: must be a finite non-negative number" in err


def test_one_entry_failing_inside_the_projection_is_one_error_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    real = runner._project

    def fails_on_one_node(entry, session):  # a model part's bug for one entry's features (as NVFP4's KeyError)
        if entry.nodes == 1:
            raise KeyError("delayed")
        return real(entry, session)

    monkeypatch.setattr(runner, "_project", fails_on_one_node)
    out = tmp_path / "ci.json"
    assert main(["ci", str(_suite(tmp_path, "[1, 2]")), "--update-baseline", "--json", str(out)]) == 2
    rows = {row["name"]: row for row in json.loads(out.read_text())["entries"]}
    bad, good = rows["llama3.1_8B-pretrain@h100/1n"], rows["llama3.1_8B-pretrain@h100/2n"]
    assert bad["status"] == "error" and "internal error (KeyError: 'delayed')" in bad["message"]
    assert good["status"] == "pass" and good["tokens_per_s_per_gpu"] > 0
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "baseline.json").exists()  # not written with an entry missing


def test_a_suite_of_2000_node_counts_is_refused_before_any_projection(tmp_path: Path, capsys) -> None:
    """The ``--surface every`` campaign (seeds 521, 662, 748, 2402): one entry with 2 000 node counts spent over
    5 CPU-s refusing each; now the suite is refused at once with its bound."""
    from primus_ext.perfci.suite import MAX_ENTRIES

    suite = tmp_path / "suite.yaml"
    nodes = ", ".join(str(n) for n in range(1, 2001))
    suite.write_text(f"entries:\n  - recipe: {REPO / 'recipes' / 'llama3.1_8B-pretrain.yaml'}\n"
                     f"    cluster: h100\n    nodes: [{nodes}]\n")
    code = main(["ci", str(suite)])
    err = capsys.readouterr().err
    assert code == 2 and f"more than {MAX_ENTRIES} entries" in err and "Traceback" not in err
