"""Megatron-LM's own parser, at every supported release, on the Megatron-LM command lines verify-top writes.

    MEGATRON_LM_GIT=/path/to/Megatron-LM python -m pytest -q tests/launcher/megatron_cli/test_upstream.py

Each release's ``megatron/`` folder is taken from a Megatron-LM git clone (``$MEGATRON_LM_GIT``, else the mirror
at /work/.mirror/NVIDIA+Megatron-LM/repo) and its ``parse_args`` (``ignore_unknown_args=False``: argparse exits on an
unknown flag or a value outside ``choices``) parses every candidate's command; the committed ``flags.json`` must be
what the releases regenerate. Skipped, with the reason, without a clone holding the tags (CI has none). ~1 min.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from verify_cases import REPO, candidates, verify_manifests

from primus_ext.launcher.megatron_cli.flags import FLAGS_FILE, SUPPORTED_TAGS
from primus_ext.launcher.megatron_cli.upstream import flags_document, probe_releases, render
from primus_ext.launcher.verify_top import write_variants
from primus_ext.recipe import load_recipe
from primus_ext.tune.axes import MBS, RECOMPUTE, TP

CLONE = Path(os.environ.get("MEGATRON_LM_GIT", "/work/.mirror/NVIDIA+Megatron-LM/repo"))
PRIMUS_70B_FP8 = REPO.parent / "shared" / "primus_configs" / "examples" / "megatron" / "configs" / "MI300X" / \
    "llama3.1_70B-FP8-pretrain.yaml"
REFUSED = {  # what the reported launch passed, and values outside the choices: the parser must refuse each
    "--fp8 hybrid": ["--fp8", "hybrid"], "--enable-zero-bubble": ["--enable-zero-bubble"],
    "--turbo-gemm-backend": ["--turbo-gemm-backend", "default"],
    "--fp8-format e5m2": ["--fp8-format", "e5m2"],
    "--recompute-granularity sel": ["--recompute-granularity", "sel"],
    "--recompute-method chunked": ["--recompute-method", "chunked"],
}


def _has_tags() -> str | None:
    if not (CLONE / "HEAD").is_file() and not (CLONE / ".git").exists():
        return f"no Megatron-LM git clone at {CLONE} (set MEGATRON_LM_GIT)"
    try:
        for tag in SUPPORTED_TAGS:
            subprocess.run(["git", "-C", str(CLONE), "rev-parse", "--verify", f"{tag}^{{commit}}"], check=True,
                           capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return f"{CLONE} lacks one of the tags {', '.join(SUPPORTED_TAGS)}"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_has_tags() is not None, reason=str(_has_tags()))]


def _megatron_argv(command: str) -> list[str]:
    """The pretrain_gpt.py arguments of a launch.sh Megatron-LM line."""
    words = shlex.split(command.split(" 2>&1 ")[0])
    return words[next(i for i, w in enumerate(words) if w.endswith("pretrain_gpt.py")) + 1:]


def _issue_case(tmp: Path) -> dict:
    """The reported case: Primus's MI300X Llama-3.1-70B FP8 experiment on 4 nodes, its presets from the Primus
    configs beside this checkout."""
    roots = [str(PRIMUS_70B_FP8.parents[4])]
    recipe = load_recipe(PRIMUS_70B_FP8, nodes=4, config_roots=roots, validate=False)
    manifest, _ = write_variants(recipe, candidates(recipe, [{TP: 2, MBS: 1}, {TP: 4, RECOMPUTE: "selective"}]),
                                 tmp / "issue", iters=20, cluster=None, nodes=4, config_roots=roots)
    return manifest


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verify")
    manifests = verify_manifests(tmp)
    if PRIMUS_70B_FP8.is_file():
        manifests["issue-70b-fp8"] = _issue_case(tmp)
    lines = {f"{name}/{e['name']}": _megatron_argv(e["launch"]["megatron"])
             for name, m in manifests.items() for e in m["candidates"] if e["launch"]["megatron"]}
    argvs = list(lines.values()) + list(REFUSED.values())
    releases = probe_releases(CLONE, SUPPORTED_TAGS, argvs=argvs)
    return lines, releases


def test_flags_json_is_what_the_releases_regenerate(verdicts):
    _, releases = verdicts
    assert render(flags_document(releases)) == FLAGS_FILE.read_text(encoding="utf-8"), (
        "flags.json is stale: python -m primus_ext.launcher.megatron_cli.upstream --git CLONE")


def test_every_candidate_command_parses_at_every_release(verdicts):
    lines, releases = verdicts
    assert len(lines) >= 9
    for tag, release in releases.items():
        errors = {name: err for name, err in zip(lines, release.parsed, strict=False) if err is not None}
        assert errors == {}, tag
        unknown = {name: [f for f in argv if f.startswith("--") and f not in release.flags]
                   for name, argv in lines.items()}
        assert all(not flags for flags in unknown.values()), (tag, unknown)


def test_the_parser_refuses_the_reported_flags_and_bad_choices(verdicts):
    lines, releases = verdicts
    for tag, release in releases.items():
        for (what, _), err in zip(REFUSED.items(), release.parsed[len(lines):], strict=True):
            assert err is not None and ("unrecognized" in err or "invalid choice" in err), (tag, what, err)
