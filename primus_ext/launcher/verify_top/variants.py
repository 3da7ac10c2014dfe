"""The K best configurations of a search as short-run variants of the recipe, a manifest and a launch script.

    candidates = pick_candidates(result.ranked, space.to_execution, k=3)
    manifest = write_variants(recipe, candidates, folder, iters=20, cluster=..., nodes=..., config_roots=[])

Each variant is the recipe with the candidate's execution written as ``primus-ext tune --out`` writes it
(``recipe.rewrite``: the same keys, the same place, comments kept) plus the short-run keys of
``short_run_changes``; it is reloaded and must resolve to the candidate's execution, else nothing is kept.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from primus_ext.errors import Problem, RecipeError
from primus_ext.results import dumps
from primus_ext.specs import ExecutionSpec
from primus_ext.tune.axes import label

DEFAULT_ITERS = 20
"""Iterations of a short run: the log reader drops the first two as warm-up (``primus_ext.logs.stats``), 18 remain."""
MANIFEST = "manifest.json"
LAUNCH = "launch.sh"
PRIMUS_ONLY = frozenset({"disable_last_saving"})
"""Short-run keys of Primus's module config (primus_megatron_module.yaml) that Megatron-LM's argparse refuses."""
MANIFEST_FORMAT = "primus-ext verify-top"
MANIFEST_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One of the K best projected configurations (``index`` 1 is the projection's best)."""

    index: int
    config: Mapping[str, Any]
    """The search's axes by name (``tensor_model_parallel_size``, ...: ``primus_ext.tune.axes``)."""
    execution: ExecutionSpec
    step_time_s: float
    """Projected step time of the target run."""
    tokens_per_s_per_gpu: float

    @property
    def name(self) -> str:
        return f"candidate-{self.index}"

    def summary(self) -> str:
        """The configuration in one line: ``tp=2 pp=1 vpp=1 ... mbs=2 recompute=none``."""
        shown = {True: "on", False: "off"}
        return " ".join(f"{label(k)}={shown.get(v, v) if isinstance(v, bool) else v}" for k, v in self.config.items()
                        if v is not None)


def pick_candidates(ranked: Sequence[Any], to_execution: Callable[[Mapping[str, Any]], ExecutionSpec],
                    k: int) -> list[Candidate]:
    """The first ``k`` projected (legal, fitting) trials of ``ranked`` (best first), as candidates."""
    legal = [t for t in ranked if t.status == "projected" and t.score is not None][:k]
    return [Candidate(index=i, config=dict(t.config), execution=to_execution(t.config),
                      step_time_s=t.score.step_time_s, tokens_per_s_per_gpu=t.score.tokens_per_s_per_gpu)
            for i, t in enumerate(legal, start=1)]


def short_run_changes(args: Mapping[str, Any], iters: int, *, primus: bool) -> dict[str, Any]:
    """The Megatron arguments that make a recipe a short timed run of ``iters`` iterations (pure).

    ``log_interval: 1`` prints every iteration's ``elapsed time per iteration (ms)`` and ``log_throughput`` its
    TFLOP/s (megatron/training/training.py ``training_log``); ``save: null`` turns checkpoints off in Megatron-LM
    and in Primus (primus/backends/megatron/patches/args/checkpoint_path_patches.py: ``save: null`` is the
    opt-out), ``disable_last_saving`` also skips Primus's final save (primus_megatron_module.yaml);
    ``eval_iters: 0`` skips evaluation. A sample-based schedule becomes iteration-based (Megatron-LM's
    validate_args refuses ``train_iters`` beside ``train_samples`` / ``lr_*_samples``), and a warm-up of at least
    ``iters`` iterations with the decay tied to ``train_iters`` is dropped (OptimizerParamScheduler asserts
    warm-up < decay steps): neither changes the step time."""
    changes: dict[str, Any] = {"train_iters": iters, "log_interval": 1, "eval_iters": 0, "save": None,
                               "log_throughput": True}
    if primus:
        changes["disable_last_saving"] = True
    if args.get("train_samples") is not None:
        changes.update(train_samples=None, lr_decay_samples=None, lr_warmup_samples=0)
    warmup = args.get("lr_warmup_iters")
    if args.get("lr_decay_iters") is None and isinstance(warmup, int) and warmup >= iters:
        changes["lr_warmup_iters"] = 0
    return changes


def default_folder(recipe_path: str | Path) -> Path:
    """``<recipe folder>/<recipe stem>-verify-top`` (beside the recipe, as ``train --auto-tune``'s tuned copy)."""
    path = Path(recipe_path)
    return path.with_name(f"{path.stem}-verify-top")


def check_folder(folder: Path, *, force: bool, label: str = "--verify-dir") -> None:
    """Refuse, before the search, a folder that is a file, cannot be created or written, or is not empty (unless
    ``force``)."""
    from primus_ext.files import output_problem

    problem = None
    if folder.exists() and not folder.is_dir():
        problem = Problem(path=label, value=str(folder), message="is a file, not a folder",
                          fix="give a folder for the candidates' recipes, logs and manifest")
    elif folder.is_dir() and any(folder.iterdir()) and not force:
        problem = Problem(path=label, value=str(folder), message="the folder is not empty (an earlier verify-top?)",
                          fix="give another --verify-dir, --resume-verify to re-rank its logs, or --force to "
                              "replace its candidates")
    else:
        probe = folder / MANIFEST if folder.is_dir() else folder
        problem = output_problem(probe, label)
    if problem is not None:
        raise RecipeError(problems=[problem])


def _relative_extends(text: str, source: Path, folder: Path) -> str:
    """``text`` with its top-level relative ``extends`` paths rewritten to resolve from ``folder``."""
    import yaml

    from primus_ext.recipe import safe_yaml
    from primus_ext.recipe.yaml_edit import edit_text, render

    try:
        data = safe_yaml.load(text)
    except yaml.YAMLError:
        return text
    extends = data.get("extends") if isinstance(data, dict) else None
    if not extends:
        return text
    parents = [extends] if isinstance(extends, str) else list(extends)
    here, there = os.path.realpath(source.parent), os.path.realpath(folder)
    moved = [p if os.path.isabs(p) else os.path.relpath(os.path.join(here, p), there) for p in parents]
    if moved == parents:
        return text
    edited = edit_text(text, [((), "extends", render(moved))])
    if edited is None:
        raise RecipeError(problems=[Problem(path=str(source), value=extends,
                                            message="its extends paths cannot be moved to the verify folder",
                                            fix="write absolute extends paths, or --verify-dir beside the recipe")])
    return edited


def launch_commands(variant: Any, log: str, *, nodes: int, gpus_per_node: int) -> dict[str, str]:
    """The shell commands that train ``variant`` (a loaded recipe, its ``source`` relative to the folder) with
    Primus and with Megatron-LM, each writing ``log`` (run from the folder).

    Primus (runner/primus-cli-direct.sh at fd1eeab): ``primus-cli direct --env NNODES=N --env GPUS_PER_NODE=G
    --log_file LOG -- train pretrain --config FILE``; it reads NODE_RANK / MASTER_ADDR from the environment on
    several nodes. Megatron-LM: ``launcher.delegate.launch_command`` (torchrun + ``pretrain_gpt.py --mock-data`` +
    the recipe's arguments as flags), ``pretrain_gpt.py`` from ``$MEGATRON_LM_PATH``, output teed to LOG."""
    from primus_ext.launcher.delegate import Launcher, launch_command

    primus = Launcher(kind="primus", how="primus-cli on PATH",
                      entry=("primus-cli", "direct", "--env", f"NNODES={nodes}", "--env",
                             f"GPUS_PER_NODE={gpus_per_node}", "--log_file", log, "--"))
    primus_cmd = launch_command(primus, variant, nproc=gpus_per_node, nnodes=nodes).shell()
    entry = "pretrain_gpt.py"
    plain = replace(variant, megatron_args={k: v for k, v in variant.megatron_args.items() if k not in PRIMUS_ONLY})
    megatron = launch_command(Launcher(kind="megatron-lm", how="$MEGATRON_LM_PATH", entry=(entry,)), plain,
                              nproc=gpus_per_node, nnodes=nodes)
    parts = [shlex.quote(a) for a in megatron.argv]
    parts[0] = "torchrun"  # this machine's path of torchrun is not the cluster's
    at = parts.index(entry)
    parts[at] = '"$MEGATRON_LM_PATH/pretrain_gpt.py"'
    if nodes > 1:  # torchrun's rendezvous on several nodes; each node exports its NODE_RANK
        parts[at:at] = ['--node-rank="${NODE_RANK:?}"', '--master-addr="${MASTER_ADDR:?}"',
                        '--master-port="${MASTER_PORT:-6000}"']
    return {"primus": primus_cmd, "megatron": " ".join(parts) + f" 2>&1 | tee {shlex.quote(log)}"}


def _launch_script(candidates: Sequence[Mapping[str, Any]], iters: int) -> str:
    lines = ["#!/usr/bin/env bash",
             f"# primus-ext tune --verify-top: {len(candidates)} short runs ({iters} iterations each), one after the",
             "# other, each writing candidate-N.log here. Usage: ./launch.sh primus | megatron",
             "# (megatron: $MEGATRON_LM_PATH is a Megatron-LM checkout; on several nodes run it on every node with",
             "# NODE_RANK and MASTER_ADDR exported). Then: primus-ext tune RECIPE --verify-dir THIS --resume-verify",
             "set -euo pipefail", 'cd "$(dirname "$0")"', 'mode="${1:?usage: launch.sh primus|megatron}"',
             'case "$mode" in']
    for kind in ("primus", "megatron"):
        lines.append(f"  {kind})")
        lines += [f"    {c['launch'][kind]}" for c in candidates]
        lines.append("    ;;")
    lines += ['  *) echo "usage: launch.sh primus|megatron" >&2; exit 2 ;;', "esac", ""]
    return "\n".join(lines)


def write_variants(recipe: Any, candidates: Sequence[Candidate], folder: Path, *, iters: int = DEFAULT_ITERS,
                   cluster: str | None, nodes: int | None, config_roots: Sequence[str] = (),
                   tune_document: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[Any]]:
    """Write the variants, ``launch.sh`` and ``manifest.json`` into ``folder`` (created; ``check_folder`` first);
    returns the manifest and the reloaded variants. ``cluster`` / ``nodes``: as given on the command line (the
    reload uses them as the search did)."""
    from primus_ext.files import atomic_write, private_file, replace_all
    from primus_ext.recipe import load_recipe
    from primus_ext.recipe.rewrite import apply_changes, execution_changes, read_text

    folder.mkdir(parents=True, exist_ok=True)
    source = Path(recipe.source)
    original = read_text(source)
    target = {"cluster": recipe.system.name, "nodes": recipe.system.num_nodes}
    short = short_run_changes(recipe.megatron_args, iters, primus=bool(recipe.module))
    entries, loaded, texts = [], [], {}
    for c in candidates:  # every variant checked (a probe copy beside its file) before any file is written
        changes = {**execution_changes(recipe, c.execution), **short}
        text, _ = apply_changes(original, changes, path=str(source), cluster=target, module=recipe.module)
        path = folder / f"{c.name}.yaml"
        texts[path] = _relative_extends(text, source, folder)
        with private_file(path, texts[path].encode("utf-8")) as probe:
            variant = load_recipe(probe, cluster=cluster, nodes=nodes, config_roots=config_roots, validate=False)
        if variant.execution != c.execution or variant.megatron_args.get("train_iters") != iters:
            raise RecipeError(problems=[Problem(
                path=str(path), value=None,
                message="the short-run variant does not resolve to the candidate's configuration; nothing was "
                        "written",
                fix="give --verify-dir beside the recipe (its presets resolve from there) or --config-root")])
        shown = _with_source(variant, path.name)
        system = variant.system
        entries.append({
            "index": c.index, "name": c.name, "config": dict(c.config), "summary": c.summary(),
            "step_time_s": c.step_time_s, "tokens_per_s_per_gpu": c.tokens_per_s_per_gpu, "projected_rank": c.index,
            "file": path.name, "log": f"{c.name}.log", "changes": changes,
            "launch": launch_commands(shown, f"{c.name}.log", nodes=system.num_nodes,
                                      gpus_per_node=system.gpu.gpus_per_node)})
        loaded.append(_with_source(variant, str(path)))
    _set_aside_old_logs(folder)
    replace_all(texts)
    for path in texts:
        shutil.copymode(source, path)
    manifest = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "recipe": str(recipe.source),
                "cluster": recipe.system.name, "nodes": recipe.system.num_nodes, "train_iters": iters,
                "candidates": entries, "local": None,
                "tune": json.loads(dumps(tune_document)) if tune_document else {}}  # as `tune --json` wrote it
    atomic_write(folder / LAUNCH, _launch_script(entries, iters), backup=False)
    os.chmod(folder / LAUNCH, 0o755)
    write_manifest(folder, manifest)
    return manifest, loaded


def _set_aside_old_logs(folder: Path) -> None:
    """Rename the logs of an earlier verify-top in ``folder`` (``--force``) to their backup names
    (``candidate-N.log.bak``...): they belong to that run's candidates and must not be read as the new ones'."""
    from primus_ext.files import next_backup

    for old in sorted(folder.glob("candidate-*.log")):
        old.rename(next_backup(old))


def _with_source(recipe: Any, name: str) -> Any:
    """``recipe`` named by its file name (the launch commands run from the folder)."""
    return replace(recipe, source=name)


def write_manifest(folder: Path, manifest: Mapping[str, Any]) -> None:
    from primus_ext.files import atomic_write

    atomic_write(folder / MANIFEST, json.dumps(manifest, indent=2, default=str) + "\n", backup=False)


def read_manifest(folder: Path) -> dict[str, Any]:
    """``folder``'s manifest; a missing or foreign one is a ``RecipeError``."""
    path = Path(folder) / MANIFEST
    fix = "give the folder primus-ext tune --verify-top wrote (--verify-dir)"
    from primus_ext.files import InputRefused, load_json, read_input

    try:
        data = load_json(read_input(path, max_bytes=64 << 20, what="manifest").decode("utf-8"))
    except InputRefused as err:
        raise RecipeError(problems=[Problem(path=str(path), message=str(err), fix=fix)]) from None
    except FileNotFoundError:
        raise RecipeError(problems=[Problem(path=str(path), message="no manifest here", fix=fix)]) from None
    except (OSError, ValueError) as err:  # UnicodeDecodeError, not JSON, nested too deep
        raise RecipeError(problems=[Problem(path=str(path), message=f"unreadable manifest: {err}", fix=fix)]) from None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or not isinstance(
            data.get("candidates"), list):
        raise RecipeError(problems=[Problem(path=str(path), message="not a verify-top manifest", fix=fix)])
    return data
