"""Load a recipe: Primus experiment YAML (or flat Megatron YAML) -> validated, frozen specs.

Precedence, lowest first: model preset (``model:``) < module preset (``config:``) <
``modules.<trainer>.overrides`` < command-line ``key=value``. The two presets are merged as Primus merges
them (``primus/core/launcher/parser.py``, ``PrimusParser.parse_trainer_module``: ``merge_namespace(
module_config, model_config, allow_override=False)``): a top-level key both set keeps the module
preset's value (named in a warning when the values differ). A flat Megatron-style YAML (argument names
at top level, no ``modules``) is the whole argument set; command-line values still win.

Presets are looked up in the config roots (``config_roots``), else in the Primus checkout the recipe
lives in (``presets.find_primus_root``); ``Recipe.preset_files`` lists every file read.

The target cluster follows the one rule of ``recipe.target.resolve_target``: ``cluster`` (``--cluster``), the
recipe's ``# primus-ext: {cluster: mi300x, nodes: 4}`` comment (or the older top-level ``primus_ext:`` block),
``$PRIMUS_EXT_CLUSTER``, a Primus ``configs/<GPU>/`` folder, this machine's GPUs; nothing stating it is a problem
(never a silent default). ``Recipe.target`` says where it came from. The node count: ``nodes`` (``--nodes``),
the comment, ``$NNODES`` (what Primus's launch scripts export), else 1. Usage::

    recipe = load_recipe("recipes/llama3.1_8B-pretrain.yaml", ["micro_batch_size=2"], nodes=8)
    recipe.model.hidden_size, recipe.execution.dp, recipe.warnings

Every failure raises one ``RecipeError`` listing every problem found (path, value, fix).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from primus_ext.errors import Problem, RecipeError, cut, shown
from primus_ext.files import real_path, safe_yaml
from primus_ext.recipe.catalogue import known_keys, unknown_key_notes
from primus_ext.recipe.checks import check
from primus_ext.recipe.key_effects import unmodelled_keys
from primus_ext.recipe.listing import untargeted_problems
from primus_ext.recipe.node_count import (
    NODES_DEFAULTED,
    WORLD_SIZE_PATHS,
    nodes_hint,
    nodes_source_text,
    stated_nodes,
)
from primus_ext.recipe.presets import (
    SHIPPED_RECIPES,
    Layer,
    display,
    find_preset,
    find_primus_root,
    is_file,
    load_preset,
)
from primus_ext.recipe.resolve import SPEC_ALIASES, resolve_all
from primus_ext.recipe.secrets import hidden_values, hide_mapping, hide_text, hide_value
from primus_ext.recipe.target import Target, resolve_target, target_block
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec

EXPERIMENT_KEYS = frozenset({"work_group", "user_name", "exp_name", "workspace", "modules", "platform", "primus_ext"})
"""Top-level keys of a Primus experiment (``PrimusParser``: meta info, ``platform``, ``modules``) and ours."""
MODULE_KEYS = frozenset({"framework", "config", "model", "overrides", "trainer_class"})
"""Keys of a Primus trainer module (``trainer_class`` picks the trainer, e.g. diffusion's)."""
CLUSTER_KEYS = frozenset({"cluster", "nodes", "schedule"})
"""Keys of the ``# primus-ext:`` comment (``schedule``: a pipeline schedule to project, ``--schedule``)."""
CLI_PREFIX = "cli."
"""Origin prefix of a command-line ``key=value`` (``cli.micro_batch_size``)."""

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """A loaded recipe: the three specs plus the merged Megatron arguments they came from."""

    model: ModelSpec
    execution: ExecutionSpec
    system: SystemSpec
    megatron_args: Mapping[str, Any]
    """Merged flat Megatron arguments (presets < overrides < command line), unknown keys included."""
    unknown_keys: Mapping[str, Any]
    """Keys outside the Megatron/Primus catalogue (kept in ``megatron_args``, named in warnings)."""
    warnings: tuple[str, ...]
    source: str
    """The recipe file as given."""
    origins: Mapping[str, str] = field(default_factory=dict)
    """Megatron key -> where its value was written (``modules.pre_trainer.overrides.x``, ``file:x``)."""
    problems: tuple[Problem, ...] = ()
    """Legality problems, when loaded with ``validate=False`` (empty otherwise: they raise)."""
    exp_name: str = ""
    module: str = ""
    """The experiment's training module (``pre_trainer``); empty for a flat Megatron YAML. A tuned
    configuration is written to its ``overrides``."""
    preset_files: tuple[str, ...] = ()
    """Every YAML file read to build the arguments, the recipe last (as the user would write the paths)."""
    config_root: str | None = None
    """The Primus checkout whose presets were used when none was given (found above the recipe)."""
    unmodelled: Mapping[str, str] = field(default_factory=dict)
    """Keys set to a value that changes time or memory but that the projection does not price: key ->
    ``value (projected as X): effect`` (``key_effects.UNMODELLED``; also one line of ``warnings``)."""
    target: Target | None = None
    """The target GPU profile and where it was stated (``recipe.target.resolve_target``)."""
    nodes_source: str | None = None
    """Where the node count came from, for people (``node_count.nodes_source_text``); None for one built by hand."""
    hidden: Mapping[str, str] = field(default_factory=dict)
    """Text from the environment (``${VAR}``) -> its template: used, never shown (``recipe.secrets``); a printed
    command or message passes through ``secrets.hide_text(text, recipe.hidden)``."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view: the three specs, the cluster and where it was stated, warnings and unknown keys."""
        return {
            "source": self.source,
            "exp_name": self.exp_name,
            "model": dataclasses.asdict(self.model),
            "execution": dataclasses.asdict(self.execution),
            "system": {**dataclasses.asdict(self.system), "world_size": self.system.world_size},
            "target_source": None if self.target is None else self.target.source,
            "nodes_source": self.nodes_source,
            "unknown_keys": hide_mapping(self.unknown_keys),
            "unmodelled_keys": dict(self.unmodelled),
            "preset_files": list(self.preset_files),
            "config_root": self.config_root,
            "warnings": list(self.warnings),
            "problems": [dataclasses.asdict(p) for p in self.problems],
        }


def parse_overrides(items: Sequence[str], problems: list[Problem]) -> Layer:
    """Command-line ``key=value`` items; values read as YAML scalars (``8`` -> int, ``null`` -> None)."""
    layer = Layer()
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not _KEY.fullmatch(key):
            problems.append(Problem(path="cli", value=item, message="expected key=value",
                                    fix="write e.g. tensor_model_parallel_size=2"))
            continue
        try:
            value = safe_yaml.load(text) if text.strip() else None
        except (yaml.YAMLError, ValueError, RecursionError, OverflowError):
            value = text
        layer.values[key] = value
        layer.origins[key] = f"{CLI_PREFIX}{key}"
    return layer


def _where(origin: str) -> str:
    """The container an origin lives in, for warnings (``modules.pre_trainer.overrides``)."""
    if origin.startswith(CLI_PREFIX):
        return "the command line"
    if ":" in origin:
        return origin.rsplit(":", 1)[0]
    return origin.rsplit(".", 1)[0] if "." in origin else "the recipe"


@dataclass
class _State:
    path: Path
    env: Mapping[str, str]
    roots: tuple[Path, ...]
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    typos: list[Problem] = field(default_factory=list)
    """Unknown keys close to a known one: listed with the problems when loading fails anyway."""
    files: list[Path] = field(default_factory=list)
    """Every YAML file read, in reading order."""
    nodes_path: str = ""
    """Where the node count was stated (``stated_nodes``; ``NODES_DEFAULTED``: nowhere, 1 node assumed)."""
    target: Target | None = None
    gpus: Callable[[], Sequence[str]] | None = None
    hidden: dict[str, str] = field(default_factory=dict)
    """Text from the environment -> its template (``secrets``): never in a message."""

    def fail_if_problems(self) -> None:
        if self.problems:
            raise RecipeError(problems=[self.shown(p) for p in (*self.problems, *self.typos)],
                              source=display(self.path))

    def shown(self, problem: Problem) -> Problem:
        """``problem`` as it may be printed: a value from the environment as its template."""
        value = hide_mapping({"v": problem.value})["v"]  # an EnvText at any depth: its template
        if isinstance(value, str):
            value = hide_text(value, self.hidden)
        return dataclasses.replace(problem, value=value, message=hide_text(problem.message, self.hidden),
                                   fix=hide_text(problem.fix, self.hidden))


BUNDLED_PRESETS = "primus-ext's bundled"
"""Words of the warning that a recipe outside primus-ext read its bundled presets (``ci`` notes it per entry)."""


def _preset(state: _State, module: str, kind: str, name: Any) -> tuple[Layer, str]:
    key = f"modules.{module}.{'model' if kind == 'model' else 'config'}"
    if not isinstance(name, str) or not name.strip():
        example = "llama3.1_8B.yaml" if kind == "model" else "pre_trainer.yaml"
        state.problems.append(Problem(path=key, value=name, message="expected a YAML file name",
                                      fix=f"write e.g. {example}"))
        return Layer(), ""
    found, tried = find_preset(name, kind, state.path.parent, state.roots, exclude=state.path)  # type: ignore[arg-type]
    if found is None:
        state.problems.append(Problem(
            path=key, value=name, message=f"{kind} preset not found; searched: " + ", ".join(display(p) for p in tried),
            fix="fix the name, or pass --config-root pointing at a Primus checkout (or a folder with "
                f"{'models' if kind == 'model' else 'modules'}/)"))
        return Layer(), ""
    if _inside(found, SHIPPED_RECIPES) and not _inside(state.path, SHIPPED_RECIPES):
        state.warnings.append(
            f"{kind} preset {name!r} taken from {BUNDLED_PRESETS} {display(found)}: no Primus checkout was found "
            "above the recipe; pass --config-root with your Primus checkout to use its presets")
    return load_preset(found, state.env, state.problems, state.warnings, files=state.files), found.stem


def _inside(path: Path, folder: Path) -> bool:
    try:
        return real_path(path).is_relative_to(real_path(folder))
    except (OSError, RuntimeError, ValueError):
        return False


def _merge_presets(state: _State, module: Layer, model: Layer) -> Layer:
    """Primus's merge of the two presets: a key the module preset sets keeps its value (the model's is dropped)."""
    merged = Layer(values=dict(model.values), origins=dict(model.origins))
    for key, value in module.values.items():
        if key in model.values and model.values[key] != value:
            state.warnings.append(
                f"`{key}` is set by both presets: Primus keeps the module preset's {shown(value)} "
                f"({_where(module.origins[key])}) over the model preset's {shown(model.values[key])} "
                f"({_where(model.origins[key])}); set it in overrides to choose")
        merged.values[key] = value
        merged.origins[key] = module.origins[key]
    return merged


MODULE_ALIASES = {"pre_trainer": "post_trainer", "post_trainer": "pre_trainer"}
"""Primus's ``get_module_config`` (core/config/primus_config.py): an SFT experiment declares only ``post_trainer``,
a pre-training one ``pre_trainer``; asked for one, Primus falls back to the other."""


def _primus_args(state: _State, data: dict[str, Any], wanted: str | None = None) -> tuple[Layer, str, str]:
    """Merged arguments of the experiment's training module: (arguments, model preset name, module name)."""
    for key in data:
        if key not in EXPERIMENT_KEYS:
            state.warnings.append(f"unknown top-level key `{cut(key)}` in {display(state.path)} (ignored)")
    modules = data["modules"]
    if not isinstance(modules, dict) or not modules:
        state.problems.append(Problem(path="modules", value=modules, message="expected a mapping of modules",
                                      fix="write modules: {pre_trainer: {framework: megatron, ...}}"))
        return Layer(), "", ""
    if wanted is not None:  # the module the launcher runs (``train pretrain`` / ``train posttrain``)
        name = wanted if wanted in modules else MODULE_ALIASES.get(wanted) if MODULE_ALIASES.get(wanted) in modules \
            else None
    else:
        name = "pre_trainer" if "pre_trainer" in modules else next(iter(modules)) if len(modules) == 1 else None
    if name is None:
        want = wanted or "pre_trainer"
        state.problems.append(Problem(path="modules", value=sorted(map(str, modules)),
                                      message=f"no {want} module", fix=f"name the training module {want}"))
        return Layer(), "", ""
    module = modules[name]
    if not isinstance(module, dict):
        state.problems.append(Problem(path=f"modules.{name}", value=module, message="expected a mapping",
                                      fix="give framework, config, model and overrides"))
        return Layer(), "", ""
    for key in module:
        if key not in MODULE_KEYS:
            state.warnings.append(f"unknown key `{cut(key)}` in modules.{cut(name)} (ignored; expected "
                                  f"{sorted(MODULE_KEYS)})")
    framework = module.get("framework", "megatron")
    if framework != "megatron":
        state.problems.append(Problem(path=f"modules.{name}.framework", value=framework,
                                      message="only the megatron framework is supported", fix="framework: megatron"))
    model_name = ""
    model_layer = Layer()
    if module.get("model") is not None:  # read first: the lower precedence, listed first in preset_files
        model_layer, model_name = _preset(state, name, "model", module["model"])
    module_layer = _preset(state, name, "module", module["config"])[0] if module.get("config") is not None else Layer()
    args = _merge_presets(state, module_layer, model_layer)
    overrides = module.get("overrides") or {}
    if not isinstance(overrides, dict):
        state.problems.append(Problem(path=f"modules.{name}.overrides", value=overrides,
                                      message="expected a mapping of Megatron arguments", fix="write key: value lines"))
        overrides = {}
    prefix = f"modules.{name}.overrides."
    bad = [k for k in overrides if not isinstance(k, str)]
    if bad:
        state.problems.append(Problem(path=f"{prefix}{bad[0]}", value=bad[0], message="keys must be strings",
                                      fix="use Megatron argument names"))
        overrides = {k: v for k, v in overrides.items() if isinstance(k, str)}
    args.update(Layer(values=dict(overrides), origins={k: f"{prefix}{k}" for k in overrides}))
    return args, model_name, name


def _system(state: _State, block: Any, cluster: str | None, nodes: int | None) -> SystemSpec | None:
    from primus_ext.hardware import load_system

    if block is None:
        block = {}
    if not isinstance(block, dict):
        state.problems.append(Problem(path="primus_ext", value=block, message="expected a mapping",
                                      fix="primus_ext: {cluster: mi300x, nodes: 4}"))
        block = {}
    for key in block:
        if key not in CLUSTER_KEYS:
            hint = difflib.get_close_matches(str(key), sorted(CLUSTER_KEYS), n=1)
            state.warnings.append(f"unknown key `{cut(key)}` in primus_ext (ignored; known: {sorted(CLUSTER_KEYS)})"
                                  + (f"; did you mean `{hint[0]}`?" if hint else ""))
    state.target = resolve_target(state.path, cluster=cluster, block=block, env=state.env, problems=state.problems,
                                  gpus=state.gpus)
    name = state.target.cluster if state.target is not None else None
    name_path = ("--cluster" if cluster is not None else "primus_ext.cluster" if "cluster" in block else
                 state.target.source if state.target is not None and state.target.source.startswith("$") else "cluster")
    if state.target is not None and not isinstance(name, str):
        state.problems.append(Problem(path=name_path, value=name, message="expected a profile name",
                                      fix="e.g. cluster: mi300x"))
        return None
    nodes_path, count = stated_nodes(nodes, block, state.env, state.problems)
    state.nodes_path = nodes_path
    if name is None or count is None:
        return None
    try:
        return load_system(name, count)
    except RecipeError as err:
        paths = {"cluster": name_path, "nodes": nodes_path}
        state.problems += [dataclasses.replace(p, path=paths.get(p.path, p.path)) for p in err.problems]
        return None


def _repoint(problems: Sequence[Problem], args: Mapping[str, Any], origins: Mapping[str, str]) -> list[Problem]:
    """Point each problem at where its key was written (override, preset file, command line)."""
    out = []
    for problem in problems:
        key = problem.path
        where = origins.get(key)
        if where is None:
            given = [k for k in SPEC_ALIASES.get(key, ()) if args.get(k) not in (None, False) and k in origins]
            where = origins[given[0]] if given else key
        out.append(dataclasses.replace(problem, path=where))
    return out


def load_recipe(path: str | Path, overrides: Sequence[str] = (), *, cluster: str | None = None,
                nodes: int | None = None, config_roots: Sequence[str | Path] = (), validate: bool = True,
                env: Mapping[str, str] | None = None, module: str | None = None,
                gpus: Callable[[], Sequence[str]] | None = None, schedule: str | None = None) -> Recipe:
    """Load, resolve and (unless ``validate=False``) legality-check a recipe. Raises ``RecipeError``.

    ``config_roots``: folders searched for ``model:`` / ``config:`` presets (e.g. a Primus checkout).
    ``env``: the environment for ``${VAR}`` templates (default ``os.environ``).
    ``module``: the experiment module to load (``pre_trainer`` / ``post_trainer``, with Primus's fallback to the
    other); default ``pre_trainer``, else the only one.
    ``gpus``: this machine's GPU device names for the target rule (default ``hardware.visible.visible_gpus``).
    ``schedule``: project this pipeline schedule (``--schedule``; else the comment's ``schedule:``) instead of
    the one the recipe's keys select (``pipeline_keys.what_if_schedule``).
    With ``validate=False`` legality problems are returned in ``Recipe.problems`` instead of raised
    (the tuner loads a recipe that way to search for a legal execution).
    """
    if isinstance(overrides, str):
        overrides = [overrides]
    state, found_root = _start(path, config_roots, env, gpus)
    top, data, block = _read_recipe(state)
    args, model_name, module = _recipe_args(state, top, data, module)
    args.update(parse_overrides(overrides, state.problems))
    state.hidden.update(hidden_values(args.values))  # presets' and the command line's too
    system = _system(state, block, cluster, nodes)
    unknown = _unknown_keys(state, args)  # its typos are listed with any other problem, the missing target's too
    if system is None:  # a bad cluster / node count: still list every argument problem with it
        state.problems += _repoint(untargeted_problems(args.values, model_name), args.values, args.origins)
    state.fail_if_problems()
    assert system is not None
    model, execution, resolve_problems, resolve_warnings = resolve_all(args.values, system, name=model_name,
                                                                       primus=bool(module), environ=state.env)
    state.warnings += resolve_warnings
    state.problems += _repoint(resolve_problems, args.values, args.origins)
    execution = _what_if(state, execution, schedule, block)
    state.fail_if_problems()
    legality = _legality(state, model, execution, system, args, validate)
    exp_name = data.get("exp_name")
    return Recipe(
        model=model, execution=execution, system=system, source=str(path), module=module, target=state.target,
        nodes_source=nodes_source_text(state.nodes_path) if state.nodes_path else None,
        megatron_args=MappingProxyType(dict(args.values)), origins=MappingProxyType(dict(args.origins)),
        unknown_keys=MappingProxyType(unknown), hidden=MappingProxyType(dict(state.hidden)),
        warnings=tuple(hide_text(w, state.hidden) for w in state.warnings),
        problems=() if validate else tuple(state.shown(p) for p in legality),
        exp_name=hide_value(exp_name) if isinstance(exp_name, str) else "",
        preset_files=_reading_order(state.files, state.path),
        unmodelled=MappingProxyType({k: hide_text(v, state.hidden) for k, v in unmodelled_keys(args.values).items()}),
        config_root=display(found_root) if found_root else None)


def _start(path: str | Path, config_roots: Sequence[str | Path], env: Mapping[str, str] | None,
           gpus: Callable[[], Sequence[str]] | None) -> tuple[_State, Path | None]:
    """The loading state of the recipe at ``path``, with the Primus checkout found above it when no config root
    is given (else ``None``); raises when the file does not exist."""
    roots = tuple(Path(r) for r in config_roots)
    found_root = None if roots else find_primus_root(Path(path))
    state = _State(path=Path(path), env=os.environ if env is None else env,
                   roots=roots or ((found_root,) if found_root else ()), gpus=gpus)
    if not is_file(state.path) and os.path.exists(state.path):
        raise RecipeError(problems=[Problem(path=str(path), message="is not a regular file (a folder, a named pipe "
                                            "or a device)", fix="give the recipe's YAML file")])
    if not is_file(state.path):
        raise RecipeError(problems=[Problem(path=str(path), message="recipe file not found",
                                            fix="check the path")], source=str(path),
                          what="cannot read recipe")
    return state, found_root


def _read_recipe(state: _State) -> tuple[Layer, dict[str, Any], Any]:
    """The recipe file itself: its layer (``extends`` and ``${VAR}`` resolved), its top-level values without the
    target block, and that block (``recipe.target.target_block``). Raises when the file gives nothing to resolve."""
    top = load_preset(state.path, state.env, state.problems, state.warnings, files=state.files)
    state.hidden.update(hidden_values(top.values))
    if not top.values:
        state.fail_if_problems()  # unreadable file: nothing to resolve
    data = dict(top.values)
    block = target_block(state.path, data.pop("primus_ext", None), "modules" in data, state.problems,
                         state.warnings)
    return top, data, block


def _recipe_args(state: _State, top: Layer, data: dict[str, Any], module: str | None) -> tuple[Layer, str, str]:
    """The Megatron arguments the recipe sets, a Primus experiment's (``_primus_args``) or a flat file's:
    (arguments, the model's name, the module's name). Raises when the file is neither."""
    if "modules" in data:
        args, model_name, module = _primus_args(state, data, module)
        return args, model_name or "model", module
    label = display(state.path)  # a flat file: its keys are the arguments, each written at its own name
    args = Layer(values={k: v for k, v in top.values.items() if k != "primus_ext"},
                 origins={k: (k if v == f"{label}:{k}" else v) for k, v in top.origins.items() if k != "primus_ext"})
    if not any(key in known_keys() for key in args.values):
        state.problems.append(Problem(
            path=display(state.path), value=sorted(map(str, args.values))[:5],
            message="neither a Primus experiment (no `modules` block) nor a Megatron argument file (none of its "
                    "top-level keys is a Megatron / Primus argument)",
            fix="pass an experiment YAML (modules: {pre_trainer: ...}) or a flat file of Megatron arguments"))
        state.fail_if_problems()
    return args, state.path.stem or "model", ""


def _unknown_keys(state: _State, args: Layer) -> dict[str, Any]:
    """The arguments outside the catalogue: each named in a warning, those close to a known key also as a typo."""
    unknown = {k: v for k, v in args.values.items() if k not in known_keys()}
    warnings, typos = unknown_key_notes(list(unknown), {k: args.origins[k] for k in unknown}, _where)
    state.warnings += warnings
    state.typos += typos
    return unknown


def _legality(state: _State, model: ModelSpec, execution: ExecutionSpec, system: SystemSpec, args: Layer,
              validate: bool) -> list[Problem]:
    """The legality problems (``checks.check``) pointed at where their keys were written; with ``validate`` they
    raise, with a node-count hint when no count was given and the world size is the problem."""
    raw_legality = check(model, execution, system)
    legality = _repoint(raw_legality, args.values, args.origins)
    if validate:
        state.problems += legality
        if state.nodes_path == NODES_DEFAULTED and any(p.path in WORLD_SIZE_PATHS for p in raw_legality):
            state.problems.append(nodes_hint(execution, system))
        state.fail_if_problems()
    return legality


def _what_if(state: _State, execution: ExecutionSpec, schedule: str | None, block: Any) -> ExecutionSpec:
    """``execution`` under the schedule ``--schedule`` (else the comment's ``schedule:``) asks for."""
    from primus_ext.recipe.pipeline_keys import what_if_schedule

    path = "--schedule" if schedule is not None else "# primus-ext.schedule"
    name = schedule if schedule is not None else block.get("schedule") if isinstance(block, dict) else None
    if name is None:
        return execution
    chosen = what_if_schedule(name, path, execution.pp, execution.virtual_pipeline_model_parallel_size,
                              execution.pipeline_schedule, state.problems, state.warnings)
    return dataclasses.replace(execution, pipeline_schedule=chosen) if chosen else execution


def _reading_order(files: Sequence[Path], recipe: Path) -> tuple[str, ...]:
    """The preset files (parents before children), then the recipe and what it extends, each once."""
    own = [f for f in files if real_path(f) == real_path(recipe)]
    rest = [f for f in files if f not in own]
    seen: dict[str, None] = {}
    for f in (*rest, *own):
        seen.setdefault(display(f), None)
    return tuple(seen)
