"""Issue 56, part 1, in CI: a few generated cases of each new hostile surface (``hostile_surfaces``: CI suites +
baselines, ``tune --resume`` logs) through the real CLI in a forked child: a clear refusal or a result within
5 CPU-s and 1 GiB, no traceback, no input changed, no temporary file left. The long run is
``benchmarks/hostile_campaign.py --surface ci`` (or ``trials``)."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest
from hostile_run import run_case
from hostile_surfaces import SURFACES

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="needs fork and /proc")


@pytest.mark.parametrize("surface", sorted(SURFACES))
@pytest.mark.parametrize("seed", [3, 17, 29])
def test_generated_cases_of_each_new_surface(tmp_path: Path, surface: str, seed: int) -> None:
    case = SURFACES[surface](random.Random(seed), tmp_path)
    result = run_case(case, limit_s=5.0, limit_bytes=1 << 30)
    assert not result.failures, f"{surface} seed {seed} {case.name}: {result.failures}\n{result.stderr[-2000:]}"
    assert set(result.exit_codes) <= {0, 1, 2}, (case.name, result.exit_codes, result.stderr[-2000:])
