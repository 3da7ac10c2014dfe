"""The tuner's search space: axes and their candidate values around one recipe.

A *configuration* is a plain JSON mapping ``{axis: value}`` over the axes below (what the strategies
and the LLM propose, what the trials log stores), keyed by the recipe's field names where one field carries the
axis (``primus_ext.tune.axes``: ``tp``, ``mbs``, ... are display labels, accepted as input aliases). The space
builds an ``ExecutionSpec`` from it (``primus_ext.tune.configure``, memoised here) by changing the recipe's
execution only where an axis says so; everything else (GBS, sequence length, dispatcher, zero-bubble, ...) stays
as the recipe wrote it. DP is derived (world / (TP*PP*CP)), sequence parallelism is on whenever TP > 1, and the
pipeline split is the ``split`` axis (``primus_ext.tune.splits``): by default Megatron's even split when the layers
divide, else a generated ``pipeline_model_parallel_layout``; besides it, legal uneven first/last stages,
account_for flags and a weighted layout that unload the busiest stage.

Axes are ordered: an axis's candidate values may depend on the axes before it (ETP on TP, VPP on PP,
MBS on DP). Candidate values are a superset of what is legal; ``primus_ext.recipe.checks.check``
(through ``primus_ext.tune.legality``) is the one judge. Users pin or limit axes::

    space = build_space(recipe.model, recipe.execution, recipe.system, pins={TP: (1, 2), CP: (1,)})
    for config in space.iter_configs():          # every candidate (legal or not)
        execution = space.to_execution(config)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from primus_ext.errors import Problem, RecipeError
from primus_ext.model.pipeline.registry import SCHEDULES, get_schedule
from primus_ext.model.stages import LAYOUT_FIELDS
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec
from primus_ext.tune import configure
from primus_ext.tune.axes import (
    CP,
    DP_OVERLAP,
    EP,
    EP_OVERLAP,
    ETP,
    MBS,
    PP,
    PRECISION,
    RECOMPUTE,
    SCHEDULE,
    SHARDING,
    SPLIT,
    TP,
    TP_OVERLAP,
    VPP,
    axis_name,
    canonical,
    spelled,
)
from primus_ext.tune.splits import DEFAULT, split_candidates

Config = dict[str, Any]

POWERS_OF_TWO = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MBS_CANDIDATES = (1, 2, 4)
"""Micro-batch sizes explored by default, plus the recipe's (``MBS_EXTENDED`` with ``--pin mbs=...``)."""
MBS_EXTENDED = (1, 2, 4, 8, 16)
VPP_CANDIDATES = (1, 2, 4, 8)
"""Virtual stages per pipeline rank explored, plus any count that divides the layers evenly (<= 8)."""
MAX_VPP = 8
MIN_TOKENS_PER_CP_RANK = 4096
"""Context parallelism is explored only while each rank keeps >= this many tokens of a sequence
(below it the attention GEMMs get too small to pay for the KV exchange; NVIDIA's published recipes
use CP > 1 only from 8k-token sequences, shared/validation/measured_throughput.csv). Pin ``cp`` to
override."""
RECOMPUTE_DEFAULT = ("none", "selective", "block50", "full")
"""Explored by default, plus the recipe's (of ``configure.RECOMPUTE_CHOICES``); ``--pin recompute=...``
opens the others."""
SHARDING_CHOICES = ("ddp", "distopt", "fsdp")
"""Plain data parallel, Megatron's distributed optimizer, or FSDP (the recipe's FSDP kind, else
Megatron-FSDP sharding optimizer state, grads and parameters)."""
SHARDING_DEFAULT = ("distopt", "fsdp")
"""Explored by default, plus the recipe's: plain DDP moves the same bytes as the distributed
optimizer (all-reduce = reduce-scatter + all-gather) with more memory; ``--pin sharding=ddp,...``."""

DP_OVERLAP_CHOICES = {"ddp": ("none", "grad"), "distopt": ("none", "grad", "grad+param"),
                      "fsdp": ("none", "grad+param"), "torch_fsdp2": ("none", "grad")}
"""Data-parallel overlap settings per sharding. Explored by default: the last (every overlap the sharding
allows, Megatron's recommended setting: an overlapped collective is never more exposed than a blocking
one) plus the recipe's own; ``--pin dp_overlap=none,grad,...`` explores the others. ``fsdp`` is
Megatron-FSDP's; a recipe on torch FSDP2 (``use_torch_fsdp2``) keeps FSDP2 under ``sharding=fsdp``, which
gathers its parameters ahead by itself and refuses ``overlap_param_gather`` (Megatron-LM arguments.py:
it needs the distributed optimizer or Megatron-FSDP), so its strongest setting is ``grad``."""

AXIS_DOCS: dict[str, str] = {
    TP: "tp: tensor parallel size (sequence_parallel is on whenever tp > 1)",
    ETP: "etp: expert tensor parallel size, 1 or equal to tp (MoE only; the recipe's null reads as tp's value, "
         "a dense model's axis holds null)",
    PP: "pp: pipeline parallel size",
    VPP: "vpp: virtual pipeline stages per pipeline rank (1 where the recipe writes null; interleaved 1F1B when > 1; "
         "needs pp > 1)",
    SCHEDULE: "schedule: the pipeline schedule (pp > 1): 1f1b / interleaved (Megatron's, by vpp) | zb-h1, zb-h2 "
              "(Primus zero bubble, vpp 1) | zb-v, v-half, v-min (Primus V schedules, vpp 2) | dualpipe, dualpipev "
              "(DeepSeek, vpp 1; what-ifs: no recipe key runs them). Explored: the recipe's own, plus V-half and "
              "V-min on Primus recipes; --pin schedule=... for the others",
    SPLIT: "a tuner choice (sets the layout keys): layers per pipeline stage: default (the recipe's own, Megatron's "
           "even split, or a generated layout) | firstN/lastN (decoder_first/last_pipeline_num_layers) | "
           "acc-emb/acc-loss/acc-both (account_for_embedding/loss_in_pipeline_split) | layout (output layer weighted "
           "by its cost); legal candidates that unload the busiest stage only, at most 1 + splits.MAX_UNEVEN per "
           "(pp, vpp)",
    CP: "cp: context parallel size",
    EP: "ep: expert parallel size (MoE only)",
    MBS: "mbs: micro-batch size (global batch size is fixed; data_parallel_size = world / (tp*pp*cp))",
    RECOMPUTE: "a tuner choice (sets the recompute_* keys): activation recompute: none | selective | block25/50/75 "
               "(full recompute of that share of each chunk's layers) | full (every layer)",
    SHARDING: "a tuner choice (sets use_distributed_optimizer and the FSDP keys): ddp | distopt (distributed "
              "optimizer) | fsdp",
    PRECISION: "GEMM precision: bf16 | fp8 (explored only when the user allows it with --pin precision=bf16,fp8)",
    TP_OVERLAP: "overlap TP communication with GEMMs (needs tp > 1)",
    EP_OVERLAP: "ep_overlap: hide EP all-to-all behind the other micro-batch (needs ep > 1)",
    DP_OVERLAP: "a tuner choice (sets overlap_grad_reduce / overlap_param_gather): none | grad (overlap_grad_reduce, "
                "with ddp) | grad+param (+ overlap_param_gather, with distopt or Megatron-FSDP; torch FSDP2: "
                "none | grad)",
}
"""Axes in enumeration order: each axis's candidates may depend on the axes before it. Structural axes
come first, then those that change memory, then the overlap flags. Each key is the ``ExecutionSpec`` / recipe field
the axis sets (``primus_ext.tune.axes``), except ``split``, ``recompute``, ``sharding`` and ``dp_overlap``: tuner
choices that set several fields at once, named for themselves; the docs give each axis's short label."""
AXIS_ORDER = tuple(AXIS_DOCS)
STRUCTURAL_AXES = (TP, ETP, PP, VPP, SCHEDULE, SPLIT, CP, EP)
DOMAIN_DEPENDS: dict[str, tuple[str, ...]] = {
    TP: (), ETP: (TP,), PP: (TP,), VPP: (PP,), SCHEDULE: (PP, VPP),
    SPLIT: (PP, VPP, SCHEDULE),
    CP: (TP, PP), EP: (PP, ETP),
    MBS: (TP, PP, CP), RECOMPUTE: (PP, VPP), SHARDING: (), PRECISION: (),
    TP_OVERLAP: (TP,), EP_OVERLAP: (EP,), DP_OVERLAP: (SHARDING, SCHEDULE, PP),
}
"""The earlier axes each axis's candidates read (``Space.domain``): what its memo is keyed on
(``tests/tune/test_space.py`` checks the memo against the computation over whole spaces)."""


@dataclass(frozen=True, kw_only=True)
class Axis:
    """One dimension of the space, for descriptions (prompt, JSON, table)."""

    name: str
    doc: str
    universe: tuple[Any, ...]
    """Every value the axis can take in this space (its candidates given earlier axes are a subset)."""


@dataclass(frozen=True, kw_only=True)
class Space:
    """Axes and candidate values around one recipe on one cluster. Build with ``build_space``."""

    model: ModelSpec
    base: ExecutionSpec
    """The recipe's execution: the fixed part of every configuration."""
    system: SystemSpec
    pins: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    """User limits: axis -> allowed values."""
    schedules: tuple[str, ...] = ()
    """Pipeline schedules explored besides the recipe's own (``PRIMUS_SCHEDULES`` on Primus recipes)."""
    _memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    """Memo of ``pipeline_split`` (layout generation is the slow part of building an execution) and of
    the recipe's own configuration."""

    # --- candidates -----------------------------------------------------------------------------
    @property
    def world(self) -> int:
        return self.system.world_size

    def _pinned(self, name: str, values: Sequence[Any]) -> tuple[Any, ...]:
        allowed = self.pins.get(name)
        out = []
        for v in values:
            if v not in out and (allowed is None or v in allowed):
                out.append(v)
        return tuple(out)

    def _choices(self, name: str, default: Sequence[Any], extended: Sequence[Any]) -> tuple[Any, ...]:
        """Pinned values (from ``extended``), else ``default`` plus the recipe's own value."""
        if name in self.pins:
            return tuple(v for v in extended if v in self.pins[name])
        own = self._recipe_config.get(name)
        return tuple(v for v in extended if v in default or v == own)

    @property
    def _recipe_config(self) -> Config:
        if "recipe" not in self._memo:
            self._memo["recipe"] = self.config_of(self.base)
        return self._memo["recipe"]

    def domain(self, name: str, partial: Mapping[str, Any]) -> tuple[Any, ...]:
        """Candidate values of axis ``name`` given the values of the axes before it (memoised on the
        axes it reads, ``DOMAIN_DEPENDS``, values and types: the strategies ask it ~10^5 times)."""
        memo = self._memo.get("domain")
        if memo is None:
            memo = self._memo["domain"] = {}
        key = (name, *((v, type(v)) for v in map(partial.get, DOMAIN_DEPENDS[name])))
        try:
            found = memo.get(key)
        except TypeError:  # an unhashable value (a malformed proposal): not memoised
            return self._domain(name, partial)
        if found is None:
            found = memo[key] = self._domain(name, partial)
        return found

    def _domain(self, name: str, partial: Mapping[str, Any]) -> tuple[Any, ...]:
        m, b, world = self.model, self.base, self.world
        g = partial.get
        if name == TP:
            cands = [t for t in POWERS_OF_TWO if t <= self.system.gpu.gpus_per_node] + [b.tp]
            return self._pinned(name, sorted(t for t in cands if world % t == 0))
        if name == ETP:
            return self._pinned(name, (1, g(TP)) if m.is_moe else (None,))
        if name == TP_OVERLAP:
            return self._pinned(name, (False, True) if g(TP) > 1 else (False,))
        if name == PP:
            cands = [p for p in POWERS_OF_TWO if p <= m.num_layers] + [b.pp]
            return self._pinned(name, sorted(p for p in cands if world % (g(TP) * p) == 0))
        if name == VPP:
            pp = g(PP)
            if pp == 1:
                return self._pinned(name, (1,))
            even = [v for v in range(1, MAX_VPP + 1) if m.num_layers % (pp * v) == 0]
            cands = sorted({*VPP_CANDIDATES, *even, b.vpp})
            return self._pinned(name, tuple(v for v in cands if pp * v <= m.num_layers + 1))
        if name == SCHEDULE:
            return self._pinned(name, configure.schedule_candidates(b, g(PP), g(VPP),
                                                                    self.pins.get(name) or self.schedules))
        if name == SPLIT:
            pp, vpp = g(PP), g(VPP)
            schedule = get_schedule(g(SCHEDULE) or "1f1b")
            if schedule.fixed_chunks and schedule.recipe_keys(pp) is not None:
                return self._pinned(name, (DEFAULT,))  # Primus's V schedules: an even count per stage, no layout
            own = self.pipeline_split(pp, vpp, DEFAULT, g(SCHEDULE))
            return self._pinned(name, split_candidates(m, b, pp, vpp, own, schedule=schedule.name))
        if name == CP:
            cands = [c for c in POWERS_OF_TWO if b.seq_length // c >= MIN_TOKENS_PER_CP_RANK] + [b.cp]
            return self._pinned(name, sorted(c for c in cands if world % (g(TP) * g(PP) * c) == 0))
        if name == EP:
            if not m.is_moe:
                return self._pinned(name, (1,))
            per_stage = world // g(PP)
            experts = m.num_experts or 1
            cands = {e for e in POWERS_OF_TWO if experts % e == 0} | {b.ep}
            return self._pinned(name, sorted(e for e in cands if per_stage % (e * g(ETP)) == 0))
        if name == EP_OVERLAP:
            return self._pinned(name, (False, True) if g(EP) > 1 else (False,))
        if name == MBS:
            dp = world // (g(TP) * g(PP) * g(CP))
            cands = self._choices(name, MBS_CANDIDATES, sorted({*MBS_EXTENDED, b.micro_batch_size}))
            return tuple(x for x in cands if x * dp <= b.global_batch_size)
        if name == RECOMPUTE:
            chunk = max(1, m.num_layers // (g(PP) * g(VPP)))
            cands = self._choices(name, RECOMPUTE_DEFAULT, configure.RECOMPUTE_CHOICES)
            return tuple(c for c in cands if not c.startswith("block") or configure.recompute_layers(c, chunk))
        if name == SHARDING:
            return self._choices(name, SHARDING_DEFAULT, SHARDING_CHOICES)
        if name == DP_OVERLAP:
            sharding = g(SHARDING)
            options = DP_OVERLAP_CHOICES["torch_fsdp2" if sharding == "fsdp" and self.base.fsdp == "torch_fsdp2"
                                         else sharding]
            schedule = get_schedule(g(SCHEDULE) or "1f1b")
            if schedule.splits_wgrad and schedule.recipe_keys(g(PP) or 1) is not None and g(SHARDING) != "ddp":
                options = ("none",)  # Primus's zero bubble refuses DP overlap with the distributed optimizer
            if name not in self.pins:
                strongest = options[-1]
                own = self._recipe_config.get(name)
                return tuple(o for o in options if o == strongest or (o == own and own in options))
            return self._pinned(name, options)
        if name == PRECISION:
            cands = [b.precision] + (["bf16", "fp8"] if PRECISION in self.pins else [])
            if self.system.gpu.fp8_dense_tflops <= 0 or self.system.gpu.runs("fp8") is False:
                cands = [c for c in cands if c != "fp8"] or [b.precision]
            return self._pinned(name, cands)
        raise KeyError(name)

    def axes(self) -> tuple[Axis, ...]:
        """The axes with the union of their candidate values (for prompts and reports)."""
        if "axes" not in self._memo:
            self._memo["axes"] = self._axes()
        return self._memo["axes"]

    def _axes(self) -> tuple[Axis, ...]:
        seen: dict[str, dict[Any, None]] = {name: {} for name in AXIS_ORDER}
        for structural in self.iter_configs(structural_only=True):
            partial = dict(structural)
            for name in AXIS_ORDER:
                if name in STRUCTURAL_AXES:
                    seen[name][partial[name]] = None
                    continue
                if name == DP_OVERLAP:
                    for sharding in self.domain(SHARDING, partial):
                        seen[name].update(dict.fromkeys(self.domain(name, {**partial, SHARDING: sharding})))
                    continue
                values = self.domain(name, partial)
                if not values:  # this structural choice leaves the axis empty: it has no candidate
                    break
                seen[name].update(dict.fromkeys(values))
                partial[name] = values[0]
        return tuple(Axis(name=n, doc=AXIS_DOCS[n], universe=tuple(seen[n])) for n in AXIS_ORDER)

    def iter_configs(self, *, structural_only: bool = False) -> Iterator[Config]:
        """Every candidate configuration, in axis order (legality is not checked here)."""
        names = STRUCTURAL_AXES if structural_only else AXIS_ORDER
        names = tuple(n for n in AXIS_ORDER if n in names)

        def rec(i: int, partial: Config) -> Iterator[Config]:
            if i == len(names):
                yield dict(partial)
                return
            for value in self.domain(names[i], partial):
                partial[names[i]] = value
                yield from rec(i + 1, partial)
            partial.pop(names[i], None)

        yield from rec(0, {})

    def size(self) -> int:
        """Number of candidate configurations (before legality and memory): ``iter_configs``' count, the last
        axis's candidates counted instead of enumerated (the walk and its dict copies were 1.4 s of a DeepSeek-V3
        search at 8 192 GPUs)."""
        names, last = AXIS_ORDER, len(AXIS_ORDER) - 1

        def count(i: int, partial: Config) -> int:
            values = self.domain(names[i], partial)
            if i == last:
                return len(values)
            total = 0
            for value in values:
                partial[names[i]] = value
                total += count(i + 1, partial)
            partial.pop(names[i], None)
            return total

        return count(0, {}) if names else 1

    def repair(self, config: Mapping[str, Any]) -> Config | None:
        """``config`` with every axis that left its candidates (after an earlier axis changed) moved to
        the nearest candidate (numbers: closest value; others: the first); ``None`` when an axis has no
        candidate left (a pin, or a global batch no micro-batch size divides, rules the change out)."""
        out: Config = {}
        for name in AXIS_ORDER:
            allowed = self.domain(name, out)
            if not allowed:
                return None
            value = config.get(name)
            if any(value == a and type(value) is type(a) for a in allowed):
                out[name] = value
            elif isinstance(value, int) and not isinstance(value, bool) and all(
                    isinstance(a, int) and not isinstance(a, bool) for a in allowed):
                out[name] = min(allowed, key=lambda a: (abs(a - value), a))
            else:
                out[name] = allowed[0]
        return out

    def neighbours(self, config: Mapping[str, Any]) -> Iterator[tuple[str, Any, Config]]:
        """One-axis changes of ``config``: (axis, new value, repaired configuration)."""
        partial: Config = {}
        for name in AXIS_ORDER:
            for value in self.domain(name, partial):
                if value != config[name] or type(value) is not type(config[name]):
                    repaired = self.repair({**config, name: value})
                    if repaired is not None:
                        yield name, value, repaired
            partial[name] = config[name]

    # --- configuration <-> execution ------------------------------------------------------------
    def membership(self, config: Mapping[str, Any]) -> list[Problem]:
        """Why ``config`` is not a point of this space (unknown / missing axes, out-of-space values)."""
        problems = [
            Problem(path=str(k), value=None, message="unknown axis", fix=f"use only {spelled(AXIS_ORDER)}")
            for k in config if k not in AXIS_DOCS
        ]
        partial: Config = {}
        for name in AXIS_ORDER:
            allowed = self.domain(name, partial)
            if name not in config:
                problems.append(Problem(path=name, message="missing", fix=f"give one of {list(allowed)}"))
                return problems
            value = config[name]
            if not any(value == a and type(value) is type(a) for a in allowed):
                pinned = f" (pinned by the user to {list(self.pins[name])})" if name in self.pins else ""
                problems.append(Problem(path=name, value=value,
                                        message=f"not a candidate given the axes before it{pinned}",
                                        fix=f"choose one of {list(allowed)}"))
                return problems
            partial[name] = value
        return problems

    def pipeline_split(self, pp: int, vpp: int, split: str = DEFAULT, schedule: str | None = None) -> dict[str, Any]:
        """Layout fields for (PP, VPP), a ``split`` value and the schedule's stages per rank
        (``configure.pipeline_split``, memoised)."""
        key = (pp, vpp, split, configure.stages_per_rank(schedule, pp, vpp))
        if key not in self._memo:
            self._memo[key] = configure.pipeline_split(self.model, self.base, pp, vpp, split, schedule)
        return self._memo[key]

    def to_execution(self, config: Mapping[str, Any]) -> ExecutionSpec:
        """The recipe's execution with this configuration applied (not legality-checked)."""
        return configure.to_execution(self.model, self.base, self.world, config,
                                      self.pipeline_split(config[PP], config[VPP], config.get(SPLIT, DEFAULT),
                                                          config.get(SCHEDULE)))

    def config_of(self, execution: ExecutionSpec) -> Config:
        """The configuration nearest to an execution (the recipe's own, for seeding and reports); ``split`` is
        the candidate whose layout fields the execution has, else ``default``."""
        config = configure.config_of(self.model, execution)
        fields = {name: getattr(execution, name) for name in LAYOUT_FIELDS}
        schedule = config.get(SCHEDULE)
        if config[PP] > 1 and fields != self.pipeline_split(config[PP], config[VPP], DEFAULT, schedule):
            for split in self.domain(SPLIT, config):
                if self.pipeline_split(config[PP], config[VPP], split, schedule) == fields:
                    config[SPLIT] = split
                    break
        return config


def parse_pins(items: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """``["tp=2", "expert_model_parallel_size=8,16", "precision=bf16,fp8"]`` -> ``{"tensor_model_parallel_size": (2,),
    "expert_model_parallel_size": (8, 16), ...}``: an axis by its name or its short label (``axes.LABELS``)."""
    problems: list[Problem] = []
    pins: dict[str, tuple[Any, ...]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = axis_name(name.strip())
        if not sep or name not in AXIS_DOCS:
            problems.append(Problem(path="--pin", value=item, message="expected axis=value[,value...]",
                                    fix=f"axes: {spelled(AXIS_ORDER)}"))
            continue
        values: list[Any] = []
        for word in text.split(","):
            word = word.strip()
            low = word.lower()
            if low in ("true", "false"):
                values.append(low == "true")
            elif low in ("null", "none") and name == ETP:
                values.append(None)
            else:
                try:
                    values.append(int(word))
                except ValueError:
                    values.append(word)
        pins[name] = tuple(values)
    if problems:
        raise RecipeError(problems=problems)
    return pins


def build_space(
    model: ModelSpec, execution: ExecutionSpec, system: SystemSpec,
    pins: Mapping[str, Sequence[Any]] | None = None, *, schedules: Sequence[str] = (),
) -> Space:
    """The space around ``execution`` (the recipe's) on ``system``, limited by ``pins``; ``schedules``: pipeline
    schedules to explore besides the recipe's own (``PRIMUS_SCHEDULES`` for a Primus recipe). A pin names its axis
    by name or by short label (``axes.canonical``)."""
    pins = {k: tuple(v) for k, v in canonical(pins or {}).items()}
    unknown = [k for k in pins if k not in AXIS_DOCS]
    if unknown:
        raise RecipeError(problems=[Problem(path="--pin", value=k, message="unknown axis",
                                            fix=f"axes: {spelled(AXIS_ORDER)}") for k in unknown])
    bad = [v for v in pins.get(SCHEDULE, ()) if v not in SCHEDULES]
    if bad:
        raise RecipeError(problems=[Problem(path="--pin", value=v, message="unknown pipeline schedule",
                                            fix=f"schedules: {', '.join(SCHEDULES)}") for v in bad])
    space = Space(model=model, base=execution, system=system, pins=pins, schedules=tuple(schedules))
    if next(space.iter_configs(), None) is None:
        raise RecipeError(problems=[Problem(path="--pin", value=dict(pins),
                                            message="no configuration is left after the pins",
                                            fix="relax the pins (each value must be a candidate of its axis)")])
    return space
