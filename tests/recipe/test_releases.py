"""Keys across Primus releases: an earlier release's removed or renamed key projects as that release meant it."""

from __future__ import annotations

import subprocess

import pytest
from recipe_data import BASE, MOE

from primus_ext.hardware import load_system
from primus_ext.recipe.catalogue import key_class, known_keys
from primus_ext.recipe.releases import RELEASE_KEYS, ReleaseKey, read_release_keys
from primus_ext.recipe.resolve import resolve_all

NODE = load_system("mi355x", 1)
TURBO = {**MOE, "enable_primus_turbo": True}


def test_a_plan_from_primus_v26_3_projects_with_a_warning_naming_the_release():
    """A real MI355X run's plan (an earlier Primus: ``use_turbo_grouped_mlp``) was refused as removed at HEAD."""
    _, _, problems, warnings = resolve_all({**TURBO, "use_turbo_grouped_mlp": True}, NODE)
    assert problems == []
    note = next(w for w in warnings if "use_turbo_grouped_mlp" in w)
    assert "v26.3.1" in note and "de27cd43" in note and "`use_turbo_grouped_gemm` = True" in note
    # read as the new key: the same not-modelled warning as a HEAD recipe that sets use_turbo_grouped_gemm
    _, _, _, as_head = resolve_all({**TURBO, "use_turbo_grouped_gemm": True}, NODE)
    assert [w for w in warnings if w.startswith("not modelled")] == [w for w in as_head if w.startswith("not modelled")]
    assert any("use_turbo_grouped_gemm" in w for w in as_head if w.startswith("not modelled"))


def test_the_old_and_new_name_merge_as_that_release_did():
    """v26.3.1's spec provider read ``use_turbo_grouped_gemm or use_turbo_grouped_mlp``."""
    for old, new, merged in ((True, False, True), (False, True, True), (True, None, True)):
        args = {"use_turbo_grouped_mlp": old, **({} if new is None else {"use_turbo_grouped_gemm": new})}
        out, notes, problems = read_release_keys(args)
        assert "use_turbo_grouped_mlp" not in out and out["use_turbo_grouped_gemm"] is merged and not problems
        assert len(notes) == (1 if old else 0)


@pytest.mark.parametrize("key", sorted(RELEASE_KEYS))
def test_every_earlier_key_is_known_and_read(key):
    assert key in known_keys() and key_class(key) == "earlier release"
    _, _, problems, warnings = resolve_all({**BASE, key: True}, NODE)
    assert problems == [] and any(key in w and RELEASE_KEYS[key].last_release in w for w in warnings)


def test_a_key_whose_meaning_is_unknown_is_refused(monkeypatch):
    entry = ReleaseKey(last_release="v0.1.0", change="0000000", reading="unknown", meant="?")
    monkeypatch.setitem(RELEASE_KEYS, "test_mystery_key", entry)
    _, notes, problems = read_release_keys({"test_mystery_key": 3})
    assert notes == [] and [p.path for p in problems] == ["test_mystery_key"] and "v0.1.0" in problems[0].message


def test_the_table_cites_commits_of_the_primus_mirror():
    """Each entry's commit exists in the Primus mirror and touches the key (skipped without the mirror)."""
    from pathlib import Path

    mirror = Path("/work/.mirror/AMD-AGI+Primus/repo")
    if not mirror.exists():
        pytest.skip("no Primus mirror on this machine")
    for key, entry in RELEASE_KEYS.items():
        commit = entry.change.split()[0]
        diff = subprocess.run(["git", "-C", str(mirror), "show", commit], capture_output=True, text=True,
                              check=True).stdout
        assert f"-{key}" in diff.replace(" ", "") or f"{key}" in diff, (key, commit)
        tag = subprocess.run(["git", "-C", str(mirror), "grep", "-l", f"^{key}:", entry.last_release, "--",
                              "primus/configs"], capture_output=True, text=True)
        assert tag.stdout, (key, entry.last_release)


def test_the_real_runs_plan_with_its_own_key_projects_as_with_the_renamed_one(tmp_path):
    """The DeepSeek-V2-Lite MI355X run's plan (tests/support) as its Primus wrote it: ``use_turbo_grouped_mlp``."""
    from recipe_data import REPO

    from primus_ext.projection.project import project
    from primus_ext.recipe.loader import load_recipe

    source = REPO / "tests" / "support" / "recipes" / "primus_dsv2_lite_fp8_mi355x.yaml"
    text = source.read_text()
    assert "      use_turbo_grouped_gemm: true\n" in text
    as_run = tmp_path / "plan.yaml"
    as_run.write_text(text.replace("      use_turbo_grouped_gemm: true\n", "      use_turbo_grouped_mlp: true\n"))
    roots = [REPO.parent / "shared" / "primus_configs"]
    if not roots[0].is_dir():
        pytest.skip("shared/primus_configs absent")
    head, earlier = (load_recipe(path, cluster="mi355x", nodes=1, config_roots=roots) for path in (source, as_run))
    assert any("use_turbo_grouped_mlp" in w and "v26.3.1" in w for w in earlier.warnings)
    assert earlier.unmodelled == head.unmodelled and "use_turbo_grouped_gemm" in earlier.unmodelled
    assert project(earlier.model, earlier.execution, earlier.system).step_time_s == pytest.approx(
        project(head.model, head.execution, head.system).step_time_s, rel=1e-12)
