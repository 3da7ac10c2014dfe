"""``primus-ext project RECIPE --nodes 1,2,4,8``: a scaling sweep whose rows are the single-node-count projections.

    python -m pytest -q tests/cli/test_project_sweep.py
"""

from __future__ import annotations

import json

import pytest

from primus_ext.argtypes import node_counts
from primus_ext.cli import main

RECIPE = "recipes/llama3.1_8B-pretrain.yaml"  # GBS 512, MBS 2: 3 nodes of 8 GPUs (DP 24) do not split it
BASE = ["project", RECIPE, "--analytic", "--cluster", "h100"]


def _json(capsys, argv: list[str]) -> tuple[int, dict]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_each_row_is_the_single_node_count_projection(capsys):
    code, doc = _json(capsys, [*BASE, "--nodes", "1,2,3,4", "--json", "-"])
    assert code == 0 and doc["kind"] == "sweep" and doc["tokens"] == 1e9
    assert [e["nodes"] for e in doc["entries"]] == [1, 2, 3, 4]
    for entry in doc["entries"]:
        if entry["nodes"] == 3:
            continue
        single_code, single = _json(capsys, [*BASE, "--nodes", str(entry["nodes"]), "--json", "-"])
        assert single_code == 3  # 8B at MBS 2 does not fit an 80 GB H100: the single run's gate; the sweep says so
        assert entry["status"] == "projected" and entry["reason"] is None
        assert entry["world_size"] == single["world_size"] == 8 * entry["nodes"]
        for key in ("tokens_per_s_per_gpu", "step_time_s", "tflops_per_gpu", "mfu"):
            assert entry[key] == single[key], key
        assert entry["peak_memory_gib"] == single["memory"]["peak_memory_gib"]
        assert entry["capacity_gib"] == single["memory"]["capacity_gib"]
        assert entry["verdict"] == single["memory"]["verdict"] == "out of memory"
        # hand-derived: total tokens/s = tok/s/GPU x GPUs; hours for 1e9 tokens = 1e9 / total / 3600; x GPUs
        total = single["tokens_per_s_per_gpu"] * single["world_size"]
        assert entry["wall_hours"] == pytest.approx(1e9 / total / 3600, rel=1e-9)
        assert entry["gpu_hours"] == pytest.approx(1e9 / total / 3600 * single["world_size"], rel=1e-9)
        assert entry["gpu_hours"] == pytest.approx(1e9 / single["tokens_per_s_per_gpu"] / 3600, rel=1e-9)


def test_a_node_count_that_does_not_split_gets_its_reason(capsys):
    code, doc = _json(capsys, [*BASE, "--nodes", "3,4", "--tokens", "1e12", "--json", "-"])
    assert code == 0 and doc["tokens"] == 1e12
    refused, four = doc["entries"]
    assert refused["status"] == "refused" and "global_batch_size" in refused["reason"] and "48" in refused["reason"]
    assert refused["tokens_per_s_per_gpu"] is None and refused["gpu_hours"] is None
    assert four["gpu_hours"] == pytest.approx(1e12 / four["tokens_per_s_per_gpu"] / 3600, rel=1e-9)


def test_the_table(capsys):
    assert main([*BASE, "--nodes", "1,3"]) == 0
    out = capsys.readouterr().out
    for needle in ("Scaling sweep: llama3.1_8B on h100", "tok/s/GPU", "step (s)", "MFU", "peak GiB",
                   "GPU-hours/1B tok", "out of memory", "not projected", "3 node(s): ", "global_batch_size"):
        assert needle in out, needle


def test_exit_2_only_when_no_node_count_projects(capsys):
    assert main([*BASE, "--nodes", "3,5"]) == 2
    err = capsys.readouterr().err
    assert "--nodes" in err and "2 problem(s)" in err


@pytest.mark.parametrize("flag", [["--memory-only"], ["--strict"], ["--timeline"], ["--html", "x.html"],
                                  ["--trace", "x.json"]])
def test_options_of_one_projection_are_refused(capsys, flag):
    assert main([*BASE, "--nodes", "1,2", *flag]) == 2
    assert f"{flag[0]}" in capsys.readouterr().err


def test_tokens_without_a_sweep_is_refused(capsys):
    assert main([*BASE, "--nodes", "2", "--tokens", "1e12"]) == 2
    assert "comma list" in capsys.readouterr().err


def test_node_counts_argument():
    assert node_counts("8") == 8 and isinstance(node_counts("8"), int)  # one value: as before
    assert node_counts("1,2, 4,8") == (1, 2, 4, 8)
    for bad in ("0", "1,0", "1,,2", "2,2", "a"):
        with pytest.raises(Exception, match=r"must be|twice"):
            node_counts(bad)


def test_help_states_the_exit_rule(capsys):
    with pytest.raises(SystemExit):
        main(["project", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "comma list" in out and "exits 0 when at least one node count projects" in out
