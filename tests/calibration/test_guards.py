"""A good calibration cannot be poisoned (issues 43.4, 47.7): a log of another workload, an implausible factor, a
warm-up-only or mostly-NaN log and a worse-evidenced run are refused (exit 2, each reason named) and leave the good
x1.18 record as it was; every projection it changes names it; ``--list`` / ``--forget`` show and undo it.

    python -m pytest -q tests/calibration/test_guards.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from runlogs import TARGET, TINY, kernel_step, steady, write_log

from primus_ext.calibration import load_records
from primus_ext.calibration.correction import PLAUSIBLE_KERNEL_FACTOR
from primus_ext.cli import main

GOOD_K = 1.18


@pytest.fixture
def good(tmp_path: Path, capsys) -> tuple[Path, Path, Path]:
    """The tiny recipe, a store holding the x1.18 record of 20 steady iterations, and that record's log."""
    recipe, store = tmp_path / "tiny.yaml", tmp_path / "timings.sqlite"
    recipe.write_text(TINY)
    log = write_log(tmp_path / "good.log", steady(kernel_step(recipe, GOOD_K), 20))
    assert main(["calibrate", str(recipe), str(log), *TARGET, "--store", str(store)]) == 0
    capsys.readouterr()
    return recipe, store, log


def _factors(store: Path) -> list[float]:
    return sorted(round(r.correction.kernel_factor, 2) for r in load_records(store))


def _refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_the_good_record_is_stored_with_its_evidence(good):
    _, store, log = good
    [record] = load_records(store)
    assert record.correction.kernel_factor == pytest.approx(GOOD_K, rel=0.01)
    assert record.iterations >= 17 and record.logs == (str(log),)


def test_a_19x_log_is_refused_as_implausible_unless_forced(good, tmp_path: Path, capsys):
    recipe, store, _ = good
    log = write_log(tmp_path / "slow.log", steady(kernel_step(recipe, 19.0), 30))
    err = _refused(["calibrate", str(recipe), str(log), *TARGET, "--store", str(store)], capsys)
    low, high = PLAUSIBLE_KERNEL_FACTOR
    assert "outside the plausible range" in err and f"[x{low:.2f}, x{high:.0f}]" in err and "--force" in err
    assert _factors(store) == [GOOD_K]
    # --force stores it (more iterations than the good record: better evidenced), and says so in its notes
    assert main(["calibrate", str(recipe), str(log), *TARGET, "--store", str(store), "--force"]) == 0
    [record] = load_records(store)
    assert record.correction.kernel_factor > high and any("--force" in n for n in record.notes)


def test_a_log_of_mostly_nan_lines_is_refused(good, tmp_path: Path, capsys):
    recipe, store, _ = good
    log = write_log(tmp_path / "nan.log", steady(kernel_step(recipe, 1.3), 38), nan_share=0.75)
    err = _refused(["calibrate", str(recipe), str(log), *TARGET, "--store", str(store)], capsys)
    assert "75% of the iteration lines have no usable step time" in err
    assert _factors(store) == [GOOD_K]


def test_a_log_of_another_global_batch_is_refused_and_followed_side_by_side(good, tmp_path: Path, capsys):
    recipe, store, _ = good
    log = write_log(tmp_path / "gbs.log", steady(kernel_step(recipe, 1.4, ["global_batch_size=128"]), 20),
                    global_batch_size=128)  # the batch only in its iteration lines (no argument dump)
    err = _refused(["calibrate", str(recipe), str(log), *TARGET, "--store", str(store)], capsys)
    assert "global_batch_size" in err and "the run logged global_batch_size = 128" in err
    assert _factors(store) == [GOOD_K]
    # --follow-log keeps its meaning: the log's batch is projected, and its record sits beside the good one
    assert main(["calibrate", str(recipe), str(log), *TARGET, "--store", str(store), "--follow-log"]) == 0
    assert _factors(store) == [GOOD_K, 1.4]
    out = tmp_path / "p.json"
    assert main(["project", str(recipe), *TARGET, "--store", str(store), "--json", str(out)]) == 0
    calibration = json.loads(out.read_text())["calibration"]
    assert calibration["match"] == "exact" and calibration["kernel_factor"] == pytest.approx(GOOD_K, rel=0.01)


def test_a_warm_up_only_log_is_refused(good, tmp_path: Path, capsys):
    recipe, store, _ = good
    step = kernel_step(recipe, 1.1)
    log = write_log(tmp_path / "warm.log", [3 * step, 2 * step])
    err = _refused(["calibrate", str(recipe), str(log), *TARGET, "--store", str(store)], capsys)
    assert "warm-up iterations only" in err
    assert _factors(store) == [GOOD_K]


def test_a_worse_evidenced_run_does_not_replace_the_record(good, tmp_path: Path, capsys):
    recipe, store, _ = good
    log = write_log(tmp_path / "short.log", steady(kernel_step(recipe, 1.25), 6, jitter=0.04))
    err = _refused(["calibrate", str(recipe), str(log), *TARGET, "--store", str(store)], capsys)
    assert "better-evidenced record" in err and "good.log" in err and "--forget" in err
    assert _factors(store) == [GOOD_K]


def test_another_precision_or_gpu_type_is_refused_naming_each(good, tmp_path: Path, capsys):
    recipe, store, _ = good
    log = write_log(tmp_path / "fp8.log", steady(kernel_step(recipe, 1.2), 20),
                    dump={"fp8": "hybrid", "bf16": "True", "world_size": 8, "global_batch_size": 64},
                    device="AMD Instinct MI300X")
    err = _refused(["calibrate", str(recipe), str(log), *TARGET, "--store", str(store)], capsys)
    assert "precision" in err and "the run logged fp8" in err
    assert "GPU type" in err and "AMD Instinct MI300X" in err and "--cluster mi300x" in err
    assert _factors(store) == [GOOD_K]


def test_projections_name_the_record_and_list_forget_undo_it(good, tmp_path: Path, capsys):
    recipe, store, log = good
    out = tmp_path / "p.json"
    assert main(["project", str(recipe), *TARGET, "--store", str(store)]) == 0
    console = capsys.readouterr().out
    # the record's factor as printed (4 digits): x1.18 within the log's millisecond rounding of a ~13 ms step
    assert "good.log" in console and re.search(r"kernels x1\.1(8|79|78)\b", console) and "--forget" in console
    assert main(["project", str(recipe), *TARGET, "--store", str(store), "--json", str(out)]) == 0
    calibration = json.loads(out.read_text())["calibration"]
    assert calibration["logs"] == [str(log)] and calibration["date"] and calibration["store"] == str(store)
    capsys.readouterr()
    assert main(["calibrate", "--list", "--store", str(store)]) == 0
    listed = capsys.readouterr().out
    assert str(log) in listed and re.search(r"kernels x1\.1(8|79|78)\b", listed) and "--forget" in listed
    assert main(["calibrate", "--forget", str(recipe), *TARGET, "--store", str(store)]) == 0
    assert "good.log" in capsys.readouterr().out and load_records(store) == []
    assert main(["project", str(recipe), *TARGET, "--store", str(store), "--json", str(out)]) == 0
    assert "calibration" not in json.loads(out.read_text())


def test_a_difference_left_after_follow_log_does_not_advise_follow_log(tmp_path: Path):
    """A difference --follow-log could not adopt (the recipe's rules replaced the log's value) names what happened;
    the advice "or --follow-log" is only for a run not yet followed (issue 53: it led to a self-contradictory error)."""
    from primus_ext.calibration.compare import mismatches
    from primus_ext.logs import read_log
    from primus_ext.recipe import load_recipe

    recipe_path, log_path = tmp_path / "tiny.yaml", tmp_path / "run.log"
    recipe_path.write_text(TINY)
    write_log(log_path, steady(1.0, 8), global_batch_size=128)
    recipe = load_recipe(str(recipe_path), cluster="h100", nodes=1)
    log = read_log(log_path)
    plain, follow = mismatches(recipe, log)
    followed, _ = mismatches(recipe, log, followed=True)
    assert follow == ["global_batch_size=128"]
    assert [p.path for p in plain] == [p.path for p in followed] == ["global_batch_size"]
    assert plain[0].fix.endswith("or --follow-log")
    assert "--follow-log set global_batch_size=128" in followed[0].fix and "or --follow-log" not in followed[0].fix
