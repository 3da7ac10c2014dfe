"""The K best configurations of a search as short-run variants of the recipe, a manifest and a launch script.

    candidates = pick_candidates(result.ranked, space.to_execution, k=3)
    manifest = write_variants(recipe, candidates, folder, iters=20, cluster=..., nodes=..., config_roots=[])

Each variant is the recipe with the candidate's execution written as ``primus-ext tune --out`` writes it
(``recipe.rewrite``: the same keys, the same place, comments kept) plus the short-run keys of
``short_run_changes``; it is reloaded and must resolve to the candidate's execution, else nothing is kept.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
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

    from primus_ext.files import safe_yaml
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


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
TIMING_TOKENIZER = {"tokenizer_type": "NullTokenizer", "tokenizer_model": None, "vocab_file": None, "merge_file": None}
"""A short Megatron-LM run on mock data needs no tokenizer files: Megatron's NullTokenizer with ``--vocab-size V-1``
builds the model's vocabulary V (megatron/training/tokenizer/tokenizer.py ``_NullTokenizer``: ``vocab_size`` is the
given size + 1, the end-of-document token); the step time depends on the vocabulary's size alone."""


def megatron_plan(variant: Any) -> dict[str, Any]:
    """The Megatron-LM flags of a short run of ``variant`` (a loaded recipe) and what they leave out (pure):
    ``argv`` (Megatron-LM's parser accepts them at every supported release), ``dropped`` (key, value, reason),
    ``tokenizer`` (what the NullTokenizer replaces) and ``refused`` (why the run would not be this configuration: a
    key of its execution that no supported release accepts; None when it is)."""
    from primus_ext.launcher.megatron_cli import megatron_argv
    from primus_ext.model.pipeline.registry import resolve_schedule
    from primus_ext.recipe.rewrite import megatron_args as execution_args
    from primus_ext.recipe.secrets import hide_mapping, hide_text

    args = dict(variant.megatron_args)
    replaced = {k: args.get(k) for k in TIMING_TOKENIZER if args.get(k) is not None}
    args.update(TIMING_TOKENIZER, vocab_size=variant.model.vocab_size - 1)
    built = megatron_argv({k: v for k, v in args.items() if k not in variant.unknown_keys})
    e = variant.execution
    schedule = resolve_schedule(e.pipeline_schedule, e.pp, e.virtual_pipeline_model_parallel_size)
    # the schedule's Primus keys are knobs at their defaults unless one switches a Primus schedule on
    knobs = set(schedule.recipe_keys(e.pp) or {}) | {"pp_algorithm"}
    execution = set(execution_args(e, variant.megatron_args, variant.model.num_layers)) - knobs
    lost = [f"{d.key}: {d.value} ({d.reason})" for d in built.dropped
            if (d.key in execution and d.value not in (None, False, 0, "")) or (d.key in knobs and d.value is True)]
    if schedule.recipe_keys(e.pp) is None or any(v is True for v in (schedule.recipe_keys(e.pp) or {}).values()):
        lost.insert(0, f"the {schedule.label} pipeline schedule runs only under Primus")
    refused = hide_text("; ".join(lost), variant.hidden) or None
    dropped = [{**dataclasses.asdict(d), "value": hide_mapping({d.key: d.value})[d.key]} for d in built.dropped]
    argv = [hide_text(a, variant.hidden) for a in built.argv]  # an environment value as its ${VAR} template
    return {"argv": argv, "dropped": dropped, "tokenizer": hide_mapping(replaced), "refused": refused}


def launch_commands(variant: Any, log: str, *, nodes: int, gpus_per_node: int) -> dict[str, Any]:
    """The shell commands that train ``variant`` (a loaded recipe, its ``source`` relative to the folder) with
    Primus and with Megatron-LM, each writing ``log`` (run from the folder), and ``megatron_plan``'s account of the
    Megatron-LM flags (``megatron`` is None when the plan refuses, ``primus`` for a Megatron-LM recipe).

    Primus (README.md and runner/primus-cli-direct.sh at fd1eeab): ``primus-cli direct --env NNODES=N --env
    GPUS_PER_NODE=G --log_file LOG -- train pretrain --config FILE``; it reads NODE_RANK / MASTER_ADDR from the
    environment on several nodes. Megatron-LM: torchrun + ``$MEGATRON_LM_PATH/pretrain_gpt.py --mock-data`` +
    ``megatron_plan``'s flags, output teed to LOG."""
    from primus_ext.launcher.delegate import Launcher, launch_command

    primus = Launcher(kind="primus", how="primus-cli on PATH",
                      entry=("primus-cli", "direct", "--env", f"NNODES={nodes}", "--env",
                             f"GPUS_PER_NODE={gpus_per_node}", "--log_file", log, "--"))
    # Primus's train pretrain --config reads an experiment (its modules: section; primus/core/launcher/config.py)
    primus_cmd = launch_command(primus, variant, nproc=gpus_per_node, nnodes=nodes).shell() if variant.module else None
    plan = megatron_plan(variant)
    parts = ["torchrun", f"--nproc-per-node={gpus_per_node}", f"--nnodes={nodes}"]
    if nodes > 1:  # torchrun's rendezvous on several nodes; each node exports its NODE_RANK
        parts += ['--node-rank="${NODE_RANK:?}"', '--master-addr="${MASTER_ADDR:?}"',
                  '--master-port="${MASTER_PORT:-6000}"']
    flags = [shlex.quote(a) for a in plan["argv"] if a != "--mock-data"]
    parts += ['"$MEGATRON_LM_PATH/pretrain_gpt.py"', "--mock-data", *flags]
    megatron = None if plan["refused"] else " ".join(parts) + f" 2>&1 | tee {shlex.quote(log)}"
    return {"primus": primus_cmd, "megatron": megatron, "megatron_plan": plan}


def _megatron_comment(candidates: Sequence[Mapping[str, Any]]) -> list[str]:
    """launch.sh's account of the Megatron-LM commands: the release span, the tokenizer, the dropped keys."""
    from primus_ext.launcher.megatron_cli import SUPPORTED_TAGS, Dropped, dropped_lines

    plans = [c["launch"]["megatron_plan"] for c in candidates]
    lines = [f"flags accepted by Megatron-LM's own parser at {', '.join(SUPPORTED_TAGS)}",
             "(primus_ext/launcher/megatron_cli/flags.json); mock data and Megatron's NullTokenizer with the "
             "model's vocabulary"]
    replaced = {k: v for p in plans for k, v in p["tokenizer"].items()}
    if replaced:
        lines.append("in place of the recipe's " + ", ".join(f"{k}={v}" for k, v in replaced.items()) +
                     " (no tokenizer files to fetch; the step time depends on the vocabulary size only).")
    everyone = set.intersection(*({(d["key"], d["reason"]) for d in p["dropped"]} for p in plans))
    common = [Dropped(key=k, value=None, reason=r) for k, r in sorted(everyone, key=lambda kr: (kr[1], kr[0]))]
    lines.append("recipe keys NOT passed to Megatron-LM, and why:")
    lines += [f"  {line}" for line in dropped_lines(common, width=108)]
    for c, p in zip(candidates, plans, strict=True):
        own = [Dropped(**d) for d in p["dropped"] if (d["key"], d["reason"]) not in everyone]
        lines += [f"  {c['name']} only: {line}" for line in dropped_lines(own, width=96)]
    return [f"# {_CONTROL.sub(' ', line)}" for line in lines]  # a newline in a key or value cannot end the comment


PRIMUS_REFUSED = (": a Megatron-LM recipe, not a Primus experiment (no modules: section, which Primus's train "
                  "pretrain --config reads): run launch.sh megatron")


def _launch_script(candidates: Sequence[Mapping[str, Any]], iters: int) -> str:
    lines = ["#!/usr/bin/env bash",
             f"# primus-ext tune --verify-top: {len(candidates)} short runs ({iters} iterations each), one after the",
             "# other, each writing candidate-N.log here. Usage: ./launch.sh primus | megatron",
             "# (megatron: $MEGATRON_LM_PATH is a Megatron-LM checkout; on several nodes run it on every node with",
             "# NODE_RANK and MASTER_ADDR exported). Then: primus-ext tune RECIPE --verify-dir THIS --resume-verify",
             "set -euo pipefail", 'cd "$(dirname "$0")"', 'mode="${1:?usage: launch.sh primus|megatron}"',
             'case "$mode" in', "  primus)"]
    lines += [f"    {c['launch']['primus']}" if c["launch"]["primus"] else
              f"    echo {shlex.quote(c['name'] + PRIMUS_REFUSED)} >&2" for c in candidates]
    lines += ["    ;;", "  megatron)"]
    lines += [f"    {line}" for line in _megatron_comment(candidates)]
    for c in candidates:
        refused = c["launch"]["megatron_plan"]["refused"]
        why = (f"{c['name']}: not run with Megatron-LM, which cannot run this configuration: {refused} "
               "(launch.sh primus runs it)")
        lines.append(f"    {c['launch']['megatron']}" if refused is None else f"    echo {shlex.quote(why)} >&2")
    lines += ["    ;;", '  *) echo "usage: launch.sh primus|megatron" >&2; exit 2 ;;', "esac", ""]
    return "\n".join(lines)


def write_variants(recipe: Any, candidates: Sequence[Candidate], folder: Path, *, iters: int = DEFAULT_ITERS,
                   cluster: str | None, nodes: int | None, config_roots: Sequence[str] = (),
                   tune_document: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[Any]]:
    """Write the variants, ``launch.sh`` and ``manifest.json`` into ``folder`` (created; ``check_folder`` first);
    returns the manifest and the reloaded variants. ``cluster`` / ``nodes``: as given on the command line (the
    reload uses them as the search did)."""
    from primus_ext.files import atomic_write, private_file, replace_all
    from primus_ext.recipe import load_recipe
    from primus_ext.recipe.presets import find_primus_root
    from primus_ext.recipe.rewrite import apply_changes, execution_changes, read_text

    folder.mkdir(parents=True, exist_ok=True)
    source = Path(recipe.source)
    # a variant outside the recipe's Primus checkout still takes that checkout's presets (not the shipped ones)
    home = None if config_roots else find_primus_root(source)
    roots = list(config_roots) or ([str(home)] if home else [])
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
            variant = load_recipe(probe, cluster=cluster, nodes=nodes, config_roots=roots, validate=False)
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
