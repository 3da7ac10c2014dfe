"""Issue 56, part 1, in CI: a few generated cases of each hostile surface (``hostile_surfaces.SURFACES``: CI suites +
baselines, ``tune --resume`` logs, GPU profiles, validation CSVs, log fields, the environment, the standard streams,
output paths, the LLM endpoint) through the real CLI in a forked child: a clear refusal or a result within 5 CPU-s
and 1 GiB, no traceback, no input changed, no secret shown, no temporary file left. The long run is
``benchmarks/hostile_campaign.py --surface NAME`` (its figures are in RESULTS.md)."""

from __future__ import annotations

import contextlib
import os
import random
import sys
from pathlib import Path

import pytest
from hostile_cases import Case
from hostile_run import run_case
from hostile_surfaces import SURFACES

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="needs fork and /proc")

SEEDS = {"llm": [3]}
"""Seeds per surface (default ``[3, 17]``): the LLM one spends up to ``--llm-total`` (4 s) of wall time a case."""


@pytest.fixture(scope="module", autouse=True)
def _warm_litellm() -> None:
    """litellm's import (~3.5 CPU-s) happens once here, not in each forked child (the campaign's workers do the
    same)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with contextlib.suppress(ImportError):
        import litellm  # noqa: F401


def _params() -> list[tuple[str, int]]:
    return [(surface, seed) for surface in sorted(SURFACES) for seed in SEEDS.get(surface, [3, 17])]


@pytest.mark.parametrize(("surface", "seed"), _params())
def test_generated_cases_of_each_surface(tmp_path: Path, surface: str, seed: int) -> None:
    if surface == "llm":
        pytest.importorskip("litellm")
    case = SURFACES[surface](random.Random(seed), tmp_path)
    result = run_case(case, limit_s=5.0, limit_bytes=1 << 30)
    assert not result.failures, f"{surface} seed {seed} {case.name}: {result.failures}\n{result.stderr[-2000:]}"
    assert set(result.exit_codes) <= {0, 1, 2, 3, 4, *case.exits}, (case.name, result.exit_codes,
                                                                     result.stderr[-2000:])


def _shape_case(tmp_path: Path, streams: tuple[str, str], encoding: str = "utf-8") -> Case:
    from hostile_cases import _copy_recipe

    recipe = _copy_recipe(tmp_path)
    return Case("streams/check", ["project", str(recipe)], tmp_path, inputs=[recipe], streams=streams,
                encoding=encoding, exits=(74,))


def test_a_full_stdout_is_reported_not_hidden(tmp_path: Path) -> None:
    """The stream shapes are real: a projection printed to /dev/full ends with exit 74 and one line on stderr."""
    result = run_case(_shape_case(tmp_path, ("full", "file")))
    assert result.exit_codes == [74], (result.exit_codes, result.stderr)
    assert "standard output" in result.stderr and not result.failures


def test_a_traceback_reaches_the_witness_with_stderr_closed(tmp_path: Path) -> None:
    """With stderr closed, an exception's traceback still reaches the campaign (so "no traceback" can fail)."""
    case = _shape_case(tmp_path, ("file", "closed"))
    case.argv = ["project", "--cluster"]  # argparse's error: exit 2 without a traceback
    assert run_case(case).exit_codes == [2]
    import primus_ext.cli

    real = primus_ext.cli.main
    primus_ext.cli.main = lambda argv=None: 1 / 0  # the forked child calls this one
    try:
        result = run_case(case)
    finally:
        primus_ext.cli.main = real
    assert "traceback" in result.failures and "ZeroDivisionError" in result.stderr


def test_the_llm_server_answers(tmp_path: Path) -> None:
    """The hostile endpoint is up and answers what its kind says (a case that never reached it would test nothing)."""
    import socket

    import hostile_env

    server = hostile_env.HostileServer("not-json", random.Random(0), tmp_path)
    try:
        host, port = server.api_base.split("//")[1].split("/")[0].split(":")
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            assert conn.recv(100).startswith(b"HTTP/1.1 200")
    finally:
        assert server.close(Case("x", [], tmp_path)) == []
    assert server.hits == 1
