"""The tuner's search space: axes, their candidate values, and configuration -> ``ExecutionSpec``.

A *configuration* is a plain JSON mapping ``{axis: value}`` over the axes below (what the strategies
and the LLM propose, what the trials log stores). The space builds an ``ExecutionSpec`` from it by
changing the recipe's execution only where an axis says so; everything else (GBS, sequence length,
dispatcher, zero-bubble, ...) stays as the recipe wrote it. DP is derived (world / (TP*PP*CP)),
sequence parallelism is on whenever TP > 1, and the pipeline split is Megatron's even split when the
layers divide, else a generated ``pipeline_model_parallel_layout``.

Axes are ordered: an axis's candidate values may depend on the axes before it (ETP on TP, VPP on PP,
MBS on DP). Candidate values are a superset of what is legal; ``primus_ext.recipe.validate.check``
(through ``primus_ext.tune.legality``) is the one judge. Users pin or limit axes::

    space = build_space(recipe.model, recipe.execution, recipe.system, pins={"tp": (1, 2), "cp": (1,)})
    for config in space.iter_configs():          # every candidate (legal or not)
        execution = space.to_execution(config)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from primus_ext.errors import Problem, RecipeError
from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec
from primus_ext.tune.config_keys import fast_replace

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
RECOMPUTE_CHOICES = ("none", "selective", "block25", "block50", "block75", "full")
"""``blockNN``: full recompute of NN % of each model chunk's layers (method block); ``full``: every
layer (method uniform, 1 layer per unit)."""
RECOMPUTE_DEFAULT = ("none", "selective", "block50", "full")
"""Explored by default, plus the recipe's; ``--pin recompute=...`` opens the others."""
SHARDING_CHOICES = ("ddp", "distopt", "fsdp")
"""Plain data parallel, Megatron's distributed optimizer, or FSDP (the recipe's FSDP kind, else
Megatron-FSDP sharding optimizer state, grads and parameters)."""
SHARDING_DEFAULT = ("distopt", "fsdp")
"""Explored by default, plus the recipe's: plain DDP moves the same bytes as the distributed
optimizer (all-reduce = reduce-scatter + all-gather) with more memory; ``--pin sharding=ddp,...``."""

DP_OVERLAP_CHOICES = {"ddp": ("none", "grad"), "distopt": ("none", "grad", "grad+param"),
                      "fsdp": ("none", "grad+param")}
"""Data-parallel overlap settings per sharding. Explored by default: the last (every overlap the sharding
allows, Megatron's recommended setting: an overlapped collective is never more exposed than a blocking
one) plus the recipe's own; ``--pin dp_overlap=none,grad,...`` explores the others."""

AXIS_DOCS: dict[str, str] = {
    "tp": "tensor_model_parallel_size (sequence_parallel is on whenever tp > 1)",
    "etp": "expert_tensor_parallel_size: 1 or equal to tp (MoE only)",
    "pp": "pipeline_model_parallel_size",
    "vpp": "virtual pipeline stages per pipeline rank (interleaved 1F1B when > 1; needs pp > 1)",
    "cp": "context_parallel_size",
    "ep": "expert_model_parallel_size (MoE only)",
    "mbs": "micro_batch_size (global batch size is fixed; data_parallel_size = world / (tp*pp*cp))",
    "recompute": "activation recompute: none | selective | block25/50/75 (full recompute of that share of each "
                 "chunk's layers) | full (every layer)",
    "sharding": "ddp | distopt (distributed optimizer) | fsdp",
    "precision": "GEMM precision: bf16 | fp8 (explored only when the user allows it with --pin precision=bf16,fp8)",
    "tp_comm_overlap": "overlap TP communication with GEMMs (needs tp > 1)",
    "ep_overlap": "overlap_moe_expert_parallel_comm: hide EP all-to-all behind the other micro-batch (needs ep > 1)",
    "dp_overlap": "overlap data-parallel communication: none | grad (overlap_grad_reduce, with ddp) | "
                  "grad+param (+ overlap_param_gather, with distopt or fsdp)",
}
"""Axes in enumeration order: each axis's candidates may depend on the axes before it. Structural axes
come first, then those that change memory, then the overlap flags."""
AXIS_ORDER = tuple(AXIS_DOCS)
STRUCTURAL_AXES = ("tp", "etp", "pp", "vpp", "cp", "ep")
DOMAIN_DEPENDS: dict[str, tuple[str, ...]] = {
    "tp": (), "etp": ("tp",), "pp": ("tp",), "vpp": ("pp",), "cp": ("tp", "pp"), "ep": ("pp", "etp"),
    "mbs": ("tp", "pp", "cp"), "recompute": ("pp", "vpp"), "sharding": (), "precision": (),
    "tp_comm_overlap": ("tp",), "ep_overlap": ("ep",), "dp_overlap": ("sharding",),
}
"""The earlier axes each axis's candidates read (``Space.domain``): what its memo is keyed on
(``tests/tune/test_space.py`` checks the memo against the computation over whole spaces)."""


def _recompute_layers(choice: str, layers_per_chunk: int) -> int | None:
    """Layers per chunk recomputed by a ``blockNN`` choice; None when it collapses to none/full."""
    share = int(choice[5:]) / 100
    n = round(share * layers_per_chunk)
    return n if 0 < n < layers_per_chunk else None


def balanced_layout(model: ModelSpec, pp: int, vpp: int) -> str | None:
    """A ``pipeline_model_parallel_layout`` spreading the decoder layers over PP*VPP chunks.

    The embedding goes first in chunk 0; the MTP layers and the loss last in the final chunk, which
    counts the output layer + loss as one layer and each MTP layer as two (a full layer plus its own
    output head). Layers go one by one to the least loaded chunk (lowest index on ties), so chunk
    sizes differ by at most one layer-equivalent. None when there are fewer layers than chunks.
    """
    chunks = pp * vpp
    if model.num_layers < chunks - 1:
        return None
    load = [0] * chunks
    load[-1] = 1 + 2 * model.mtp_num_layers
    counts = [0] * chunks
    for _ in range(model.num_layers):
        i = min(range(chunks), key=lambda c: (load[c], c))
        load[i] += 1
        counts[i] += 1
    parts = []
    for i, count in enumerate(counts):
        text = ("E" if i == 0 else "") + ("t" if count == 1 else f"t*{count}" if count else "")
        if i == chunks - 1:
            text += "m" * model.mtp_num_layers + "L"
        parts.append(text)
    return "|".join(parts)


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
        if name == "tp":
            cands = [t for t in POWERS_OF_TWO if t <= self.system.gpu.gpus_per_node] + [b.tp]
            return self._pinned(name, sorted(t for t in cands if world % t == 0))
        if name == "etp":
            return self._pinned(name, (1, g("tp")) if m.is_moe else (None,))
        if name == "tp_comm_overlap":
            return self._pinned(name, (False, True) if g("tp") > 1 else (False,))
        if name == "pp":
            cands = [p for p in POWERS_OF_TWO if p <= m.num_layers] + [b.pp]
            return self._pinned(name, sorted(p for p in cands if world % (g("tp") * p) == 0))
        if name == "vpp":
            pp = g("pp")
            if pp == 1:
                return self._pinned(name, (1,))
            even = [v for v in range(1, MAX_VPP + 1) if m.num_layers % (pp * v) == 0]
            cands = sorted({*VPP_CANDIDATES, *even, b.vpp})
            return self._pinned(name, tuple(v for v in cands if pp * v <= m.num_layers + 1))
        if name == "cp":
            cands = [c for c in POWERS_OF_TWO if b.seq_length // c >= MIN_TOKENS_PER_CP_RANK] + [b.cp]
            return self._pinned(name, sorted(c for c in cands if world % (g("tp") * g("pp") * c) == 0))
        if name == "ep":
            if not m.is_moe:
                return self._pinned(name, (1,))
            per_stage = world // g("pp")
            experts = m.num_experts or 1
            cands = {e for e in POWERS_OF_TWO if experts % e == 0} | {b.ep}
            return self._pinned(name, sorted(e for e in cands if per_stage % (e * g("etp")) == 0))
        if name == "ep_overlap":
            return self._pinned(name, (False, True) if g("ep") > 1 else (False,))
        if name == "mbs":
            dp = world // (g("tp") * g("pp") * g("cp"))
            cands = self._choices(name, MBS_CANDIDATES, sorted({*MBS_EXTENDED, b.micro_batch_size}))
            return tuple(x for x in cands if x * dp <= b.global_batch_size)
        if name == "recompute":
            chunk = max(1, m.num_layers // (g("pp") * g("vpp")))
            cands = self._choices(name, RECOMPUTE_DEFAULT, RECOMPUTE_CHOICES)
            return tuple(c for c in cands if not c.startswith("block") or _recompute_layers(c, chunk))
        if name == "sharding":
            return self._choices(name, SHARDING_DEFAULT, SHARDING_CHOICES)
        if name == "dp_overlap":
            options = DP_OVERLAP_CHOICES[g("sharding")]
            if name not in self.pins:
                strongest = options[-1]
                own = self._recipe_config.get(name)
                return tuple(o for o in options if o == strongest or (o == own and own in options))
            return self._pinned(name, options)
        if name == "precision":
            cands = [b.precision] + (["bf16", "fp8"] if "precision" in self.pins else [])
            if self.system.gpu.fp8_dense_tflops <= 0:
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
                if name == "dp_overlap":
                    for sharding in self.domain("sharding", partial):
                        seen[name].update(dict.fromkeys(self.domain(name, {**partial, "sharding": sharding})))
                    continue
                values = self.domain(name, partial)
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
        """Number of candidate configurations (before legality and memory)."""
        return sum(1 for _ in self.iter_configs())

    def repair(self, config: Mapping[str, Any]) -> Config:
        """``config`` with every axis that left its candidates (after an earlier axis changed) moved to
        the nearest candidate (numbers: closest value; others: the first)."""
        out: Config = {}
        for name in AXIS_ORDER:
            allowed = self.domain(name, out)
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
                    yield name, value, self.repair({**config, name: value})
            partial[name] = config[name]

    # --- configuration <-> execution ------------------------------------------------------------
    def membership(self, config: Mapping[str, Any]) -> list[Problem]:
        """Why ``config`` is not a point of this space (unknown / missing axes, out-of-space values)."""
        problems = [
            Problem(path=str(k), value=None, message="unknown axis", fix=f"use only {', '.join(AXIS_ORDER)}")
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

    def pipeline_split(self, pp: int, vpp: int) -> dict[str, Any]:
        """Layout fields for (PP, VPP): the recipe's own when unchanged, else even or generated."""
        key = (pp, vpp)
        if key not in self._memo:
            self._memo[key] = self._pipeline_split(pp, vpp)
        return self._memo[key]

    def _pipeline_split(self, pp: int, vpp: int) -> dict[str, Any]:
        b, m = self.base, self.model
        if (pp, vpp) == (b.pp, b.vpp):
            return dict(
                pipeline_model_parallel_layout=b.pipeline_model_parallel_layout,
                decoder_first_pipeline_num_layers=b.decoder_first_pipeline_num_layers,
                decoder_last_pipeline_num_layers=b.decoder_last_pipeline_num_layers,
                account_for_embedding_in_pipeline_split=b.account_for_embedding_in_pipeline_split,
                account_for_loss_in_pipeline_split=b.account_for_loss_in_pipeline_split,
            )
        even = m.num_layers % (pp * vpp) == 0
        layout = None if even or pp == 1 else balanced_layout(m, pp, vpp)
        return dict(
            pipeline_model_parallel_layout=layout,
            decoder_first_pipeline_num_layers=None,
            decoder_last_pipeline_num_layers=None,
            account_for_embedding_in_pipeline_split=False,
            account_for_loss_in_pipeline_split=False,
        )

    def to_execution(self, config: Mapping[str, Any]) -> ExecutionSpec:
        """The recipe's execution with this configuration applied (not legality-checked)."""
        b = self.base
        tp, pp, vpp, cp = config["tp"], config["pp"], config["vpp"], config["cp"]
        recompute = config["recompute"]
        chunk = max(1, self.model.num_layers // (pp * vpp))
        if recompute == "none":
            rec: dict[str, Any] = dict(recompute_granularity=None, recompute_method=None, recompute_num_layers=None,
                                       recompute_modules=())
        elif recompute == "selective":
            modules = b.recompute_modules if b.recompute_granularity == "selective" else ()
            rec = dict(recompute_granularity="selective", recompute_method=None, recompute_num_layers=None,
                       recompute_modules=modules)
        elif recompute == "full":
            rec = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1,
                       recompute_modules=())
        else:
            rec = dict(recompute_granularity="full", recompute_method="block",
                       recompute_num_layers=_recompute_layers(recompute, chunk) or chunk, recompute_modules=())
        sharding, overlap = config["sharding"], config["dp_overlap"]
        fsdp_kind = b.fsdp if b.fsdp != "none" else "megatron_fsdp"
        shard: dict[str, Any] = dict(
            use_distributed_optimizer=sharding == "distopt" or (sharding == "fsdp" and fsdp_kind == "megatron_fsdp"),
            fsdp=fsdp_kind if sharding == "fsdp" else "none",
            data_parallel_sharding_strategy=(
                (b.data_parallel_sharding_strategy
                 if b.fsdp == "megatron_fsdp" and b.data_parallel_sharding_strategy != "no_shard"
                 else "optim_grads_params")  # "fsdp" shards: a no_shard recipe's own strategy would not
                if sharding == "fsdp" and fsdp_kind == "megatron_fsdp" else "no_shard"),
            overlap_grad_reduce=overlap in ("grad", "grad+param"),
            overlap_param_gather=overlap == "grad+param",
        )
        if shard["fsdp"] == "torch_fsdp2":
            shard["use_distributed_optimizer"] = False
        schedule = "zb-h1" if b.pipeline_schedule == "zb-h1" and pp > 1 else "interleaved" if vpp > 1 else "1f1b"
        return fast_replace(b, dict(
            tensor_model_parallel_size=tp,
            pipeline_model_parallel_size=pp,
            virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
            context_parallel_size=cp,
            expert_model_parallel_size=config["ep"],
            expert_tensor_parallel_size=(
                None if not self.model.is_moe or (b.expert_tensor_parallel_size is None and config["etp"] == tp)
                else config["etp"]),
            data_parallel_size=max(1, self.world // (tp * pp * cp)),
            sequence_parallel=tp > 1,
            tp_comm_overlap=config["tp_comm_overlap"],
            overlap_moe_expert_parallel_comm=config["ep_overlap"],
            moe_shared_expert_overlap=b.moe_shared_expert_overlap and not config["ep_overlap"],
            pipeline_schedule=schedule,
            micro_batch_size=config["mbs"],
            precision=config["precision"],
            fp8_param_gather=b.fp8_param_gather and config["precision"] == "fp8",  # fp8 weights need fp8
            **self.pipeline_split(pp, vpp),
            **rec,
            **shard,
        ))

    def config_of(self, execution: ExecutionSpec) -> Config:
        """The configuration nearest to an execution (the recipe's own, for seeding and reports)."""
        e = execution
        chunk = max(1, self.model.num_layers // (e.pp * e.vpp))
        if e.recompute_granularity is None:
            recompute = "none"
        elif e.recompute_granularity == "selective":
            recompute = "selective"
        elif e.recompute_method == "block":
            n = e.recompute_num_layers or 0
            recompute = "none" if n <= 0 else "full" if n >= chunk else min(
                (c for c in RECOMPUTE_CHOICES if c.startswith("block")),
                key=lambda c: abs(int(c[5:]) / 100 * chunk - n))
        else:
            recompute = "full"
        sharding = "fsdp" if e.fsdp != "none" else "distopt" if e.use_distributed_optimizer else "ddp"
        overlap = "grad+param" if e.overlap_param_gather else "grad" if e.overlap_grad_reduce else "none"
        return {
            "tp": e.tp, "etp": e.etp if self.model.is_moe else None, "tp_comm_overlap": e.tp_comm_overlap,
            "pp": e.pp, "vpp": e.vpp, "cp": e.cp, "ep": e.ep, "ep_overlap": e.overlap_moe_expert_parallel_comm,
            "mbs": e.micro_batch_size, "recompute": recompute, "sharding": sharding, "dp_overlap": overlap,
            "precision": e.precision,
        }


def parse_pins(items: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """``["tp=2", "ep=8,16", "precision=bf16,fp8"]`` -> ``{"tp": (2,), "ep": (8, 16), ...}``."""
    problems: list[Problem] = []
    pins: dict[str, tuple[Any, ...]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or name not in AXIS_DOCS:
            problems.append(Problem(path="--pin", value=item, message="expected axis=value[,value...]",
                                    fix=f"axes: {', '.join(AXIS_ORDER)}"))
            continue
        values: list[Any] = []
        for word in text.split(","):
            word = word.strip()
            low = word.lower()
            if low in ("true", "false"):
                values.append(low == "true")
            elif low in ("null", "none") and name == "etp":
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
    pins: Mapping[str, Sequence[Any]] | None = None,
) -> Space:
    """The space around ``execution`` (the recipe's) on ``system``, limited by ``pins``."""
    pins = {k: tuple(v) for k, v in (pins or {}).items()}
    unknown = [k for k in pins if k not in AXIS_DOCS]
    if unknown:
        raise RecipeError(problems=[Problem(path="--pin", value=k, message="unknown axis",
                                            fix=f"axes: {', '.join(AXIS_ORDER)}") for k in unknown])
    space = Space(model=model, base=execution, system=system, pins=pins)
    if next(space.iter_configs(), None) is None:
        raise RecipeError(problems=[Problem(path="--pin", value=dict(pins),
                                            message="no configuration is left after the pins",
                                            fix="relax the pins (each value must be a candidate of its axis)")])
    return space
