"""Issue 57, part 4: calibration evidence counts distinct runs (by content), not arguments.

``calibrate r.yaml dubious.log dubious.log dubious.log`` counted three runs and three times the steady iterations,
and replaced a better-evidenced record without ``--force``; the same log given once is refused.

    python -m pytest -q tests/calibration/test_issue57_distinct_runs.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

from runlogs import TARGET, TINY, kernel_step, steady, write_log

from primus_ext.calibration import load_records
from primus_ext.cli import main


def _factors(store: Path) -> list[float]:
    return sorted(round(r.correction.kernel_factor, 2) for r in load_records(store))


def test_one_log_given_three_times_is_one_run(tmp_path: Path, capsys) -> None:
    recipe, store = tmp_path / "tiny.yaml", tmp_path / "timings.sqlite"
    recipe.write_text(TINY)
    good = write_log(tmp_path / "good.log", steady(kernel_step(recipe, 1.18), 20))
    assert main(["calibrate", str(recipe), str(good), *TARGET, "--store", str(store)]) == 0
    dubious = write_log(tmp_path / "dubious.log", steady(kernel_step(recipe, 1.6), 9))
    shutil.copy(dubious, tmp_path / "copy.log")  # the same run under another name
    (tmp_path / "link.log").symlink_to(dubious)
    capsys.readouterr()
    assert main(["calibrate", str(recipe), str(dubious), *TARGET, "--store", str(store)]) == 2  # once: refused
    assert "better-evidenced record" in capsys.readouterr().err
    for again in ([dubious, dubious, dubious], [dubious, tmp_path / "copy.log", tmp_path / "link.log"]):
        assert main(["calibrate", str(recipe), *map(str, again), *TARGET, "--store", str(store)]) == 2
        err = capsys.readouterr().err
        assert "better-evidenced record" in err and "Traceback" not in err
        assert "the same run" in err
        assert _factors(store) == [1.18]
