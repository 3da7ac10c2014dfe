"""Write a tuned execution back into the recipe: a minimal, comment-keeping, atomic YAML edit.

``execution_changes(recipe, tuned)`` turns the difference between the recipe's execution and the
tuned one into Megatron arguments (only what differs; aliases the recipe already uses are kept, e.g.
``num_layers_per_virtual_pipeline_stage``). ``rewrite(path, changes, out=None)`` applies them:

* Primus experiment: keys go to ``modules.pre_trainer.overrides`` (they win over the presets);
  flat Megatron YAML: top level;
* ruamel.yaml round trip: comments, key order, quoting and untouched ``${VAR:default}`` templates
  stay; a changed key written as a template gets the tuned value itself and a comment naming the variable it
  replaced (the keys tuned with it assume that value: an exported variable must not break them);
* only keys whose value differs are written, so applying twice changes nothing;
* the target is backed up (``<file>.bak``) and replaced atomically (temp file in the same folder,
  fsync, rename): an interrupted write leaves the original intact.

    changes = execution_changes(recipe, tuned_execution)
    result = rewrite("recipes/mixtral_8x22B-pretrain.yaml", changes)          # in place
    print(result.diff)
"""

from __future__ import annotations

import difflib
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml as pyyaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import YAMLError

from primus_ext.errors import Problem, RecipeError
from primus_ext.files import atomic_write, output_problem, safe_yaml
from primus_ext.model.pipeline.registry import resolve_schedule
from primus_ext.recipe.resolve import VPP_KEYS
from primus_ext.recipe.target import target_of, with_target
from primus_ext.recipe.templates import TEMPLATE
from primus_ext.recipe.yaml_edit import Assignment, edit_text, render
from primus_ext.specs import ExecutionSpec

FSDP_FLAGS = {"torch_fsdp2": "use_torch_fsdp2", "megatron_fsdp": "use_megatron_fsdp"}


@dataclass(frozen=True, kw_only=True)
class RewriteResult:
    """What a rewrite did."""

    path: str
    """The file written (or that would be written)."""
    changed: dict[str, Any]
    """Megatron key -> new value, for the keys whose text actually changed."""
    diff: str
    """Unified diff of the file (empty when nothing changed)."""
    backup: str | None = None
    current: bool = False
    """The target already holds exactly this text (nothing to write)."""


def _given(args: Mapping[str, Any], key: str) -> bool:
    return args.get(key) not in (None, False)


def megatron_args(e: ExecutionSpec, args: Mapping[str, Any], num_layers: int) -> dict[str, Any]:
    """The Megatron arguments that express ``e``'s tunable part, spelled as the recipe spells them."""
    out: dict[str, Any] = {
        "tensor_model_parallel_size": e.tp,
        "pipeline_model_parallel_size": e.pp,
        "context_parallel_size": e.cp,
        "expert_model_parallel_size": e.ep,
        "expert_tensor_parallel_size": e.expert_tensor_parallel_size,
        "sequence_parallel": e.sequence_parallel,
        "micro_batch_size": e.micro_batch_size,
        "pipeline_model_parallel_layout": e.pipeline_model_parallel_layout,
        "decoder_first_pipeline_num_layers": e.decoder_first_pipeline_num_layers,
        "decoder_last_pipeline_num_layers": e.decoder_last_pipeline_num_layers,
        "account_for_embedding_in_pipeline_split": e.account_for_embedding_in_pipeline_split,
        "account_for_loss_in_pipeline_split": e.account_for_loss_in_pipeline_split,
        "recompute_granularity": e.recompute_granularity,
        "recompute_method": e.recompute_method,
        "recompute_num_layers": e.recompute_num_layers,
        "recompute_layer_ids": list(e.recompute_layer_ids) if e.recompute_layer_ids else None,
        "recompute_modules": list(e.recompute_modules) if e.recompute_modules else None,
        "use_distributed_optimizer": e.use_distributed_optimizer,
        "data_parallel_sharding_strategy": e.data_parallel_sharding_strategy,
        "overlap_grad_reduce": e.overlap_grad_reduce,
        "overlap_param_gather": e.overlap_param_gather,
        "tp_comm_overlap": e.tp_comm_overlap,
        "overlap_moe_expert_parallel_comm": e.overlap_moe_expert_parallel_comm,
        "moe_shared_expert_overlap": e.moe_shared_expert_overlap,
        "fp8_param_gather": e.fp8_param_gather,
    }
    # virtual pipeline: the spelling the recipe uses; per-stage layer counts only for even splits
    vpp = e.vpp if e.vpp > 1 else None
    used = [k for k in VPP_KEYS if _given(args, k)]
    key = used[0] if used else "num_virtual_stages_per_pipeline_rank"
    if key == "num_layers_per_virtual_pipeline_stage" and (e.pipeline_model_parallel_layout or not vpp
                                                           or (num_layers // e.pp) % vpp):
        key = "num_virtual_stages_per_pipeline_rank"
    for other in VPP_KEYS:
        out[other] = None
    schedule = resolve_schedule(e.pipeline_schedule, e.pp, e.virtual_pipeline_model_parallel_size)
    if schedule.chunk_placement == "v":
        pass  # Primus's V schedules set VPP = 2 themselves and refuse num_layers_per_virtual_pipeline_stage
    elif not e.pipeline_model_parallel_layout:  # a layout states the virtual stages itself: Megatron-LM refuses both
        out[key] = (num_layers // e.pp // vpp) if key == "num_layers_per_virtual_pipeline_stage" and vpp else vpp
    # Megatron: --recompute-activations means selective recompute
    if _given(args, "recompute_activations"):
        out["recompute_activations"] = e.recompute_granularity == "selective"
    for kind, flag in FSDP_FLAGS.items():
        out[flag] = e.fsdp == kind
    if _given(args, "use_custom_fsdp"):
        out["use_custom_fsdp"] = e.fsdp == "megatron_fsdp"
    fp8 = args.get("fp8") if args.get("fp8") not in (None, False, True) else "hybrid"
    out["fp8"] = fp8 if e.precision == "fp8" else None
    if _given(args, "fp4"):  # megatron-core refuses fp4 beside fp8: a tuned precision replaces the recipe's fp4
        out["fp4"] = args.get("fp4") if e.precision == "fp4" else None
    if _given(args, "fp4_param"):  # megatron-core: fp4_param must be used together with fp4
        out["fp4_param"] = e.fp4_param
    out.update(schedule_keys(e, args))
    return out


def schedule_keys(e: ExecutionSpec, args: Mapping[str, Any]) -> dict[str, Any]:
    """The keys that run ``e``'s pipeline schedule: Primus's zero-bubble keys (or ``pp_algorithm`` where the recipe
    uses Primus-pipeline); ``RecipeError`` for a schedule no key runs (DualPipe, DualPipeV: what-ifs)."""
    schedule = resolve_schedule(e.pipeline_schedule, e.pp, e.virtual_pipeline_model_parallel_size)
    keys = schedule.recipe_keys(e.pp)
    if keys is None:
        raise RecipeError(problems=[Problem(
            path="pipeline_schedule", value=schedule.name,
            message=f"{schedule.label} is projected as a what-if: neither Primus's Megatron backend nor Megatron-LM "
                    "has a key that runs it, so it cannot be written into the recipe",
            fix="tune with --pin schedule=1f1b,interleaved,zb-h1,zb-h2,zb-v,v-half,v-min to write a recipe")])
    if _given(args, "patch_primus_pipeline"):  # primus_pipeline.yaml: pp_algorithm picks the algorithm
        if not schedule.primus_names:
            raise RecipeError(problems=[Problem(
                path="pp_algorithm", value=schedule.name,
                message=f"{schedule.label} has no pp_algorithm value in Primus-pipeline (patch_primus_pipeline)",
                fix="set patch_primus_pipeline: false to run it through patch_zero_bubble, or tune with "
                    "--pin schedule=1f1b,interleaved,zb-h1,zb-v,v-half,v-min")])
        return {"pp_algorithm": schedule.primus_names[0]}
    return keys


def execution_changes(recipe: Any, tuned: ExecutionSpec) -> dict[str, Any]:
    """Megatron key -> value for every argument whose value differs between the recipe and ``tuned``."""
    args = recipe.megatron_args
    layers = recipe.model.num_layers
    before = megatron_args(recipe.execution, args, layers)
    after = megatron_args(tuned, args, layers)
    changes = {key: value for key, value in after.items() if value != before.get(key)}
    zero_bubble = [k for k in changes if k.startswith("zero_bubble") or k == "patch_zero_bubble"]
    primus = bool(getattr(recipe, "module", ""))
    if zero_bubble and changes.get("patch_zero_bubble", before.get("patch_zero_bubble")) and not primus:
        raise RecipeError(problems=[Problem(
            path="pipeline_schedule", value=tuned.pipeline_schedule,
            message="the zero-bubble schedules run only under Primus (patch_zero_bubble); this is a Megatron-LM "
                    "recipe", fix="tune with --pin schedule=1f1b,interleaved, or use a Primus experiment recipe")])
    return changes


def _yaml() -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.representer.add_representer(
        type(None), lambda rep, _: rep.represent_scalar("tag:yaml.org,2002:null", "null"))
    return yaml


def _target(data: Any, path: str, module: str = "") -> tuple[CommentedMap, tuple[str, ...]]:
    """The mapping the keys go to and its key path: ``modules.<module>.overrides`` of an experiment (created when
    missing, also when the file's ``modules`` come from an ``extends`` parent: ``module`` names it), else the top
    level."""
    if not isinstance(data, CommentedMap):
        raise RecipeError(problems=[Problem(path=path, message="the recipe is not a YAML mapping")])
    modules = data.get("modules")
    if modules is None and not module:
        return data, ()
    if modules is None:
        modules = data["modules"] = CommentedMap()
    name = module or ("pre_trainer" if "pre_trainer" in modules else next(iter(modules)))
    if modules.get(name) is None:
        modules[name] = CommentedMap()
    entry = modules[name]
    if entry.get("overrides") is None:
        entry["overrides"] = CommentedMap()
    return entry["overrides"], ("modules", name, "overrides")


def _same(text_value: Any, new: Any) -> bool:
    if isinstance(new, list) or isinstance(text_value, list):
        return list(text_value or []) == list(new or [])
    return text_value == new and type(text_value) is type(new)


def _default_value(text: str) -> Any:
    """A template default as the loader reads it (a YAML scalar)."""
    try:
        return safe_yaml.load(text)
    except pyyaml.YAMLError:
        return text


def _render(value: Any) -> str:
    """A value as the default of a ``${VAR:default}`` template (read back by YAML)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _set(target: CommentedMap, key: str, value: Any, changed: dict[str, Any], label: str,
         edits: list[Assignment], path: tuple[str, ...]) -> None:
    """Set ``key`` unless it already reads as ``value``; a key absent from the file is written even when the value
    is null / false, since a preset or an ``extends`` parent may set it."""
    if key in target:
        old = target[key]
        template = TEMPLATE.fullmatch(old.strip()) if isinstance(old, str) else None
        if template is not None:
            default = template.group(2)
            if default is not None and _same(_default_value(default), value):
                return
            # the tuned keys are chosen together (TP decides sequence_parallel, tp_comm_overlap, DP, memory): a
            # value left to the variable could make the tuned recipe illegal, so the value is fixed, and said so
            target[key] = value
            note = (f"  # primus-ext tune: fixed (was ${template.group(1)}, default {default}); the keys tuned with "
                    "it assume this value")
            edits.append((path, key, render(value) + note))
            target.yaml_add_eol_comment(note.strip(), key)
            changed[label] = value
            return
        elif _same(old, value):
            return
        else:
            target[key] = value
    else:
        target[key] = value
    edits.append((path, key, target[key] if isinstance(target[key], str) and "${" in target[key] else render(value)))
    changed[label] = value


def _load(yaml: YAML, text: str, path: str) -> Any:
    try:
        return yaml.load(text)
    except DuplicateKeyError as err:
        raise RecipeError(problems=[Problem(path=path, message=f"duplicate key: {' '.join(str(err.problem).split())}"
                                            f" {' '.join(str(err.problem_mark).split())}",
                                            fix="remove one of the two entries (PyYAML keeps the last one)")]) from None
    except YAMLError as err:
        raise RecipeError(problems=[Problem(path=path, message=f"invalid YAML: {' '.join(str(err).split())}",
                                            fix="fix the YAML syntax at the marked line")]) from None


def apply_changes(text: str, changes: Mapping[str, Any], *, path: str = "recipe",
                  cluster: Mapping[str, Any] | None = None, module: str = "") -> tuple[str, dict[str, Any]]:
    """``text`` (a recipe) with ``changes`` applied; returns (new text, keys actually changed).

    ``cluster`` (``{"cluster": "mi355x", "nodes": 4}``) updates the recipe's own ``primus_ext:`` block when it
    has one, else its ``# primus-ext: {...}`` comment (added when missing; ``recipe/target.py``), so the tuned file
    loads for the cluster it was tuned for. ``module``: the experiment's
    module (``pre_trainer``) when the file's ``modules`` come from an ``extends`` parent (``Recipe.module``).
    Lines are edited in place (``yaml_edit``): untouched lines keep every byte; files it cannot edit that way
    (flow-style mappings) are dumped by ruamel."""
    yaml = _yaml()
    data = _load(yaml, text, path)
    target, target_path = _target(data, path, module)
    changed: dict[str, Any] = {}
    edits: list[Assignment] = []
    block = data.get("primus_ext")
    if cluster and isinstance(block, CommentedMap):
        for key, value in cluster.items():
            _set(block, key, value, changed, f"primus_ext.{key}", edits, ("primus_ext",))
    for key, value in changes.items():
        _set(target, key, value, changed, key, edits, target_path)
    marked = bool(cluster) and not isinstance(block, CommentedMap)
    if marked:  # the target as a comment: Primus's schema check refuses a top-level primus_ext block
        changed.update({f"# primus-ext.{k}": v for k, v in cluster.items() if target_of(text, []).get(k) != v})
    if not changed:  # a stale target comment alone is a change: the file must load for the cluster it is tuned for
        return text, {}
    edited = edit_text(text, edits)
    if edited is not None:
        return (with_target(edited, cluster) if marked else edited), changed
    buffer = io.StringIO()
    yaml.dump(data, buffer)
    dumped = buffer.getvalue().replace("\r\n", "\n").replace("\r", "")  # ruamel keeps a CR inside comments
    dumped = with_target(dumped, cluster) if marked else dumped
    return (dumped.replace("\n", "\r\n") if "\r\n" in text else dumped), changed


def read_text(path: Path, *, note: bool = True) -> str:
    """The file's text with its line endings as they are (no universal-newline translation). ``note``: an input of
    the command (``files.note_input``; not the output a rewrite replaces)."""
    from primus_ext.files import InputRefused, read_input

    try:
        return read_input(path, max_bytes=safe_yaml.MAX_TEXT_BYTES, what="recipe", note=note).decode("utf-8")
    except InputRefused as err:
        raise RecipeError(problems=[Problem(path=str(path), message=str(err), fix="give a recipe file")]) from None
    except UnicodeDecodeError as err:
        raise RecipeError(problems=[Problem(path=str(path), message=f"not UTF-8 text ({err.reason}): not a recipe",
                                            fix="write the tuned copy to a new file")]) from None


def _writable(target: Path, force: bool = False) -> Path:
    """The file to write for ``target``: a symlink's destination (the link stays a link); ``output_problem``
    is a ``RecipeError``."""
    problem = output_problem(target, replace_read_only=force)
    if problem is not None:
        raise RecipeError(problems=[problem])
    return Path(os.path.realpath(target))


def rewrite(path: str | Path, changes: Mapping[str, Any], *, out: str | Path | None = None,
            cluster: Mapping[str, Any] | None = None, dry_run: bool = False, module: str = "",
            force: bool = False) -> RewriteResult:
    """Apply ``changes`` to the recipe at ``path``, writing ``out`` (a tuned copy) or ``path`` itself.
    The diff is against the recipe at ``path``; ``module``: see ``apply_changes``; ``force``: replace a
    read-only target."""
    source = Path(path)
    target = Path(out) if out is not None else source
    real = _writable(target, force)
    original = read_text(source)
    text, changed = apply_changes(original, changes, path=str(source), cluster=cluster, module=module)
    before = read_text(real, note=False) if real.exists() else None
    diff = "".join(difflib.unified_diff(original.splitlines(keepends=True), text.splitlines(keepends=True),
                                        fromfile=str(source), tofile=str(target)))
    backup = None
    if not dry_run and text != before:
        backup = atomic_write(real, text, mode_from=source)
    return RewriteResult(path=str(target), changed=changed, diff=diff, backup=backup, current=text == before)
