"""Multi-fidelity tuning (``primus_ext.launcher.verify_top``): short-run variants that reload to the tuned
configuration, their launch commands, and the re-ranking of synthetic Megatron-format logs.

    python -m pytest -q tests/tune/test_verify_top.py
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from verify_cases import candidates as _candidates

from primus_ext.errors import RecipeError
from primus_ext.launcher.verify_top import (
    check_folder,
    format_verify_top,
    rerank,
    short_run_changes,
    write_variants,
)
from primus_ext.launcher.verify_top.local import megatron_log_lines
from primus_ext.launcher.verify_top.variants import write_manifest
from primus_ext.recipe import load_recipe
from primus_ext.tune.axes import MBS, TP

REPO = Path(__file__).resolve().parents[2]
EIGHT_B = REPO / "recipes" / "llama3.1_8B-pretrain.yaml"  # Primus experiment; presets from the shipped recipes/


def test_short_run_keys():
    plain = short_run_changes({"lr_warmup_iters": 5, "lr_decay_iters": None}, 20, primus=False)
    assert plain == {"train_iters": 20, "log_interval": 1, "eval_iters": 0, "save": None, "log_throughput": True}
    # warm-up >= train_iters with the decay tied to train_iters: Megatron's scheduler asserts warm-up < decay
    assert short_run_changes({"lr_warmup_iters": 40}, 20, primus=True)["lr_warmup_iters"] == 0
    assert "lr_warmup_iters" not in short_run_changes({"lr_warmup_iters": 40, "lr_decay_iters": 1000}, 20, primus=True)
    assert short_run_changes({}, 20, primus=True)["disable_last_saving"] is True
    samples = short_run_changes({"train_samples": 10**6, "lr_decay_samples": 10**6}, 20, primus=False)
    assert samples["train_samples"] is None and samples["lr_decay_samples"] is None
    assert samples["lr_warmup_samples"] == 0


def test_variants_reload_to_the_tuned_configuration(tmp_path: Path):
    recipe = load_recipe(EIGHT_B, validate=False)
    candidates = _candidates(recipe, [{MBS: 1}, {TP: 2, MBS: 2}])
    assert candidates[0].execution != candidates[1].execution != recipe.execution
    folder = tmp_path / "verify"
    manifest, variants = write_variants(recipe, candidates, folder, iters=12, cluster=None, nodes=None)
    for c, entry, variant in zip(candidates, manifest["candidates"], variants, strict=True):
        path = folder / f"candidate-{c.index}.yaml"
        reloaded = load_recipe(path)  # through the loader, from the verify folder
        assert reloaded.execution == c.execution and variant.execution == c.execution
        args = reloaded.megatron_args
        assert (args["train_iters"], args["log_interval"], args["eval_iters"], args["save"]) == (12, 1, 0, None)
        assert args["disable_last_saving"] is True and args["log_throughput"] is True
        assert (reloaded.system.name, reloaded.system.num_nodes) == (recipe.system.name, recipe.system.num_nodes)
        overrides = yaml.safe_load(path.read_text())["modules"]["pre_trainer"]["overrides"]
        assert overrides["train_iters"] == 12  # written where --out writes the tuned keys
        primus, megatron = entry["launch"]["primus"], entry["launch"]["megatron"]
        assert primus.startswith("primus-cli direct --env NNODES=8 --env GPUS_PER_NODE=8 --log_file "
                                 f"candidate-{c.index}.log -- train pretrain --config candidate-{c.index}.yaml")
        assert megatron.startswith("torchrun --nproc-per-node=8 --nnodes=8 --node-rank=")
        assert "--disable-last-saving" not in megatron  # Primus's key; Megatron-LM's argparse refuses it
        assert '"$MEGATRON_LM_PATH/pretrain_gpt.py" --mock-data' in megatron
        assert "--train-iters 12" in megatron and megatron.endswith(f"| tee candidate-{c.index}.log")
        assert f"--micro-batch-size {c.execution.micro_batch_size}" in megatron
        assert entry["projected_rank"] == c.index and entry["step_time_s"] == c.step_time_s
    second = manifest["candidates"][1]["launch"]["megatron"]
    assert f"--tensor-model-parallel-size {candidates[1].execution.tp}" in second
    on_disk = json.loads((folder / "manifest.json").read_text())
    assert on_disk["train_iters"] == 12 and len(on_disk["candidates"]) == 2
    script = folder / "launch.sh"
    assert os.access(script, os.X_OK) and subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert all(e["launch"][k] in text for e in manifest["candidates"] for k in ("primus", "megatron"))


def test_megatron_launch_passes_megatron_flags_only(tmp_path: Path):
    """Issue 53 part 4: ``--fp8 hybrid`` (Megatron-LM's flag is ``--fp8-format``) and Primus's keys
    (``--enable-zero-bubble``...) made the Megatron-LM launch exit at argument parsing."""
    recipe = load_recipe(EIGHT_B, validate=False)  # a Primus experiment in FP8, enable_zero_bubble: true
    manifest, _ = write_variants(recipe, _candidates(recipe, [{TP: 2}]), tmp_path / "v", iters=20, cluster=None,
                                 nodes=None)
    megatron = manifest["candidates"][0]["launch"]["megatron"]
    assert "--fp8-format hybrid" in megatron and "--fp8 " not in megatron
    assert "--enable-zero-bubble" not in megatron and "--disable-last-saving" not in megatron
    assert "--tokenizer-type NullTokenizer" in megatron  # mock data: no tokenizer files to fetch
    script = (tmp_path / "v" / "launch.sh").read_text()
    comment = script[script.index("  megatron)"):]
    assert "recipe keys NOT passed to Megatron-LM" in comment and "enable_zero_bubble" in comment
    assert "disable_last_saving" in comment and "a Primus or Primus-Turbo key" in comment


def test_values_from_the_environment_stay_templates(tmp_path: Path, monkeypatch):
    """A Primus experiment's ${VAR} value (a path, a token) is written as its template, in launch.sh and in the
    manifest: the Megatron-LM flag's value and a dropped key's alike."""
    monkeypatch.setenv("VERIFY_TB_DIR", "s3cr3t-tb-4711")
    monkeypatch.setenv("VERIFY_TURBO_OPTION", "s3cr3t-turbo-4711")
    shutil.copytree(REPO / "recipes", tmp_path / "recipes")
    path = tmp_path / "recipes" / EIGHT_B.name
    path.write_text(path.read_text().replace(
        "      train_iters: 50\n", "      train_iters: 50\n      tensorboard_dir: ${VERIFY_TB_DIR:none}\n"
        "      turbo_token: ${VERIFY_TURBO_OPTION:none}\n"))
    recipe = load_recipe(path, validate=False)
    assert recipe.megatron_args["tensorboard_dir"] == "s3cr3t-tb-4711"
    write_variants(recipe, _candidates(recipe, [{TP: 2}]), tmp_path / "v", iters=20, cluster=None, nodes=None)
    for name in ("launch.sh", "manifest.json"):
        text = (tmp_path / "v" / name).read_text()
        assert "s3cr3t" not in text, name
    assert "--tensorboard-dir '${VERIFY_TB_DIR:none}'" in (tmp_path / "v" / "launch.sh").read_text()


PRIMUS_70B_FP8 = REPO.parent / "shared" / "primus_configs" / "examples" / "megatron" / "configs" / "MI300X" / \
    "llama3.1_70B-FP8-pretrain.yaml"


@pytest.mark.skipif(not PRIMUS_70B_FP8.is_file(), reason=f"no Primus configs at {PRIMUS_70B_FP8.parents[4]}")
def test_variants_elsewhere_keep_the_recipes_primus_presets(tmp_path: Path):
    """A --verify-dir outside the Primus checkout: the variants (and their Megatron-LM flags) take the checkout's
    presets, as the recipe does, not the shipped recipes/ ones."""
    recipe = load_recipe(PRIMUS_70B_FP8, nodes=4, validate=False)
    _, variants = write_variants(recipe, _candidates(recipe, [{TP: 2}]), tmp_path / "v", iters=20, cluster=None,
                                 nodes=4)
    assert set(variants[0].megatron_args) == set(recipe.megatron_args)
    assert variants[0].megatron_args["turbo_gemm_backend"] == recipe.megatron_args["turbo_gemm_backend"]


def test_relative_extends_resolve_from_the_verify_folder(tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "base.yaml").write_text(
        "num_layers: 4\nhidden_size: 1024\nffn_hidden_size: 2816\nnum_attention_heads: 16\n"
        "group_query_attention: true\nnum_query_groups: 4\nvocab_size: 32000\nbf16: true\nswiglu: true\n")
    recipe_path = tmp_path / "a" / "tiny.yaml"
    recipe_path.write_text("extends: [base.yaml]\nseq_length: 2048\nmax_position_embeddings: 2048\n"
                           "micro_batch_size: 1\nglobal_batch_size: 64\ntensor_model_parallel_size: 1\n")
    recipe = load_recipe(recipe_path, cluster="h100", nodes=1, validate=False)
    folder = tmp_path / "b" / "verify"
    write_variants(recipe, _candidates(recipe, [{TP: 2}]), folder, iters=20, cluster="h100", nodes=1)
    variant = folder / "candidate-1.yaml"
    assert yaml.safe_load(variant.read_text())["extends"] == ["../../a/base.yaml"]
    # a Megatron-LM recipe: Primus cannot train it (no modules: section), launch.sh primus says so
    script = (folder / "launch.sh").read_text()
    assert "primus-cli" not in script and "a Megatron-LM recipe, not a Primus experiment" in script
    assert subprocess.run(["bash", "-n", str(folder / "launch.sh")]).returncode == 0
    # a flat recipe's model is named after its file: the rest is the same model
    assert dataclasses.replace(load_recipe(variant).model, name=recipe.model.name) == recipe.model


def test_folder_checks(tmp_path: Path):
    check_folder(tmp_path / "new", force=False)  # absent: created later
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "candidate-1.log").write_text("x")
    with pytest.raises(RecipeError, match="not empty"):
        check_folder(tmp_path / "full", force=False)
    check_folder(tmp_path / "full", force=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(RecipeError, match="is a file"):
        check_folder(tmp_path / "file", force=True)


def _folder(tmp_path: Path, projected: list[float], measured: list[float | None], *, local: bool = False) -> Path:
    """A verify folder: a manifest with these projected step times and, where measured is not None, a log of
    ``iters`` iterations at that step time (the first two slower: warm-up)."""
    entries = []
    for i, (p, m) in enumerate(zip(projected, measured, strict=True), start=1):
        entry = {"index": i, "name": f"candidate-{i}", "summary": f"mbs={i}", "step_time_s": p,
                 "tokens_per_s_per_gpu": 1.0 / p, "projected_rank": i, "file": f"candidate-{i}.yaml",
                 "log": f"candidate-{i}.log"}
        if local:  # the local projections run the other way round from the target's
            entry["local"] = {"projected_step_s": 10.0 - p}
        entries.append(entry)
        if m is not None:
            times = [3 * m, 2 * m] + [m] * 8
            (tmp_path / f"candidate-{i}.log").write_text("\n".join(megatron_log_lines(
                times, [7.0] * len(times), global_batch_size=16, end=datetime(2026, 1, 1))) + "\n")
    write_manifest(tmp_path, {"format": "primus-ext verify-top", "version": 1, "candidates": entries,
                              "local": {"iters": 10} if local else None, "tune": {}})
    return tmp_path


def test_rerank_measured_against_projected(tmp_path: Path):
    folder = _folder(tmp_path, [1.0, 1.1, 1.2, 1.3], [1.2, 1.0, 1.3, None])
    (folder / "candidate-5.log").write_text("not a training log\n")  # a stray file is ignored
    result = rerank(folder)
    by = {c.name: c for c in result.candidates}
    assert [c.name for c in result.candidates] == ["candidate-1", "candidate-2", "candidate-3", "candidate-4"]
    assert by["candidate-1"].measured_step_s == pytest.approx(1.2) and by["candidate-1"].measured_steps == 8
    assert (by["candidate-1"].measured_rank, by["candidate-2"].measured_rank, by["candidate-3"].measured_rank) == (
        2, 1, 3)
    assert by["candidate-4"].measured_step_s is None and "no log" in by["candidate-4"].not_run
    # the projection's #1 (candidate-1) measures 1.2 s, the best measured 1.0 s
    assert result.regret == pytest.approx(0.2)
    # ranks projected (1, 2, 3) vs measured (2, 1, 3): rho = 1 - 6 * 2 / (3 * 8) = 0.5
    assert result.spearman == pytest.approx(0.5)
    doc = result.to_dict()
    assert doc["projected_best"] == "candidate-1" and doc["measured_best"] == "candidate-2"
    assert doc["not_run"] == ["candidate-4"] and json.loads(json.dumps(doc)) == doc
    text = format_verify_top(result)
    assert "selection regret: 20.0 %" in text and "Spearman rank correlation: +0.50 (3 runs)" in text
    assert "not run: candidate-4" in text


def test_rerank_unreadable_log_and_missing_first(tmp_path: Path):
    folder = _folder(tmp_path, [1.0, 1.1, 1.2], [None, 1.5, 1.2])
    (folder / "candidate-1.log").write_text("nothing Megatron would print\n")
    result = rerank(folder)
    first = result.candidates[0]
    assert first.measured_step_s is None and first.not_run.startswith("candidate-1.log:")
    # the best-projected candidate that ran is candidate-2 (1.5 s); the best measured candidate-3 (1.2 s)
    assert result.regret == pytest.approx(0.25) and result.spearman is None  # two runs: no correlation
    assert "the best-projected that ran: #2" in format_verify_top(result)


def test_rerank_after_a_local_run_compares_the_local_projection(tmp_path: Path):
    result = rerank(_folder(tmp_path, [1.0, 1.1, 1.2], [1.2, 1.1, 1.0], local=True))
    assert "same reduced run" in result.basis
    assert [c.name for c in result.candidates] == ["candidate-3", "candidate-2", "candidate-1"]
    assert result.regret == 0.0 and result.spearman == pytest.approx(1.0)


def test_rerank_local_with_a_candidate_that_could_not_run_here(tmp_path: Path):
    folder = _folder(tmp_path, [1.0, 1.1, 1.2], [1.2, 1.1, None], local=True)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["candidates"][2]["local"] = {"not_run": "needs 4 ranks"}
    write_manifest(folder, manifest)
    result = rerank(folder)
    assert "same reduced run" in result.basis
    last = result.candidates[-1]
    assert (last.name, last.projected_rank, last.not_run) == ("candidate-3", 3, "needs 4 ranks")
    assert result.candidates[0].projected_step_s == pytest.approx(10.0 - 1.1)  # local projection of candidate-2


def test_rerank_refuses_a_folder_without_manifest(tmp_path: Path):
    with pytest.raises(RecipeError, match="no manifest"):
        rerank(tmp_path)
