"""One projection session per command: the target, the cost chain and the calibration, decided in one place.

    session = Session(cost_choice(compute="store", store=None))  # what --compute / --store / --uncalibrated asked
    recipe = session.load("recipes/llama3.1_8B-pretrain.yaml", ["micro_batch_size=2"])
    projection = session.project(recipe)       # the cost chain, then the stored calibration that applies
    oracle = session.oracle(recipe)            # the tuner's: the same chain and records, per execution
    print(session.target_line(recipe))         # target: 8 nodes x 8 MI325X (mi325x, from ...)

``project`` (``--memory-only`` too), ``compare``, ``tune``, ``train --projection-only``, ``calibrate``, ``ci`` and the
launcher gates ask a session, built once per command from its flags by ``cost_choice``; the same recipe and store give
the same figure (step, band, peak memory, verdict) whichever command prints it.

- **Target** (``load``): the one rule of ``recipe.target.resolve_target`` (``--cluster``, the recipe's
  ``# primus-ext:`` comment, ``$PRIMUS_EXT_CLUSTER``, a Primus ``configs/<GPU>/`` folder, this machine's GPUs;
  nothing stating it exits 2). ``Recipe.target`` says where it came from; ``target_line`` prints it.
- **Cost chain** (``costs``): ``analytic`` (the roofline), ``store`` (the timing store ``store``, else the default
  one when it exists: the entries measured on the target GPU, or on ``device``; the roofline for what it lacks),
  ``measured`` (this machine's entries, the missing ones measured first: ``measure``; below scale 1 they stand in for
  their full-size shapes and the memory is the analytic model's at full size). ``provider`` hands a ready cost
  provider instead (perf CI's committed store).
- **Calibration** (``records``, ``calibrate``): the store's records of real runs (``primus_ext.calibration``) of the
  recipe's model on its GPU type, applied exactly to their workload and with a wider band nearby, each naming the
  record (logs, date, factor) in the projection's notes and JSON; ``calibrated=False`` (``--uncalibrated``, perf CI)
  ignores them.
- **Cluster environment** (``environment``): the store's cluster record (``calibrate --scope cluster``) of the
  target's profile and cluster label (``cluster_label``: ``--cluster-label``, else ``$PRIMUS_EXT_CLUSTER_LABEL``,
  else the unlabelled record) sets the links, overlap and kernel factor it fitted in the target's efficiencies, and
  the projection runs on them, for every model. Order with a per-model record: a model record that applies (exact or
  nearby) takes precedence and is applied on the environment it was fitted on (the cluster record current when it
  was calibrated, stored in it; none: the profile), so its own workload reproduces its log; the current cluster
  record is then not applied to that model, and the note says so. Otherwise the cluster record applies alone.

``validate`` projects the published rows of its development set on the roofline and never applies a stored record
(a user's calibration must not move the figures it is judged by): ``Session.analytic()``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from primus_ext.calibration import CalibrationRecord
    from primus_ext.calibration.cluster import ClusterRecord
    from primus_ext.projection.evaluate import Costs
    from primus_ext.projection.result import ClusterApplied, Projection
    from primus_ext.recipe import Recipe
    from primus_ext.specs import ExecutionSpec, ModelSpec, SystemSpec
    from primus_ext.tune.oracle import ProjectionOracle

CostMode = Literal["analytic", "store", "measured"]


@dataclass(frozen=True, kw_only=True)
class CostChoice:
    """What the command line asked of the cost chain and the calibration."""

    mode: CostMode = "store"
    """``analytic`` roofline only; ``store`` timing store + roofline (the default); ``measured`` this machine's."""
    store: str | None = None
    """Timing store file (``--store``); ``None``: the default store, when it exists."""
    device: str | None = None
    """Whose store entries to read (``--device``); ``None``: those measured on the target GPU."""
    accept_scaled: bool = False
    """Also read down-scaled (CPU-sized) entries for their full-size shapes (``--accept-scaled``, scale < 1)."""
    calibrated: bool = True
    """Apply the store's calibration records from real runs (``--uncalibrated``: False)."""
    cluster_label: str | None = None
    """Which cluster record of the target's profile applies (``--cluster-label``); ``None``:
    ``$PRIMUS_EXT_CLUSTER_LABEL``, else the unlabelled record."""
    scale: float | None = None
    """``measured``: the scale the missing layers are measured at (``--scale``; ``None``: 1 on a GPU, a CPU-sized one
    on CPU, decided by ``Session.measure``). Below 1 the memory is the analytic model's at full size."""
    measure_on: str | None = None
    """``measured``: the torch device to measure on (``cpu``, ``cuda``; ``None``: cuda when present)."""


def cost_choice(*, compute: CostMode = "store", analytic: bool = False, store: str | None = None,
                device: str | None = None, accept_scaled: bool = False, scale: float | None = None,
                measure_on: str | None = None, uncalibrated: bool = False,
                cluster_label: str | None = None) -> CostChoice:
    """A command's cost flags as its ``CostChoice``, the one rule (``cli._args.session_of``: ``project``, ``compare``,
    ``tune``, ``calibrate``; ``train --projection-only`` and the launcher gates). ``analytic`` is ``compute=
    "analytic"``; ``device`` counts in ``store`` mode, ``scale`` and ``measure_on`` in ``measured`` mode, which reads
    the scaled entries exactly when the scale is below 1 (``accept_scaled``: the caller may measure for another
    device's target)."""
    mode: CostMode = "analytic" if analytic else compute
    measured = mode == "measured"
    return CostChoice(mode=mode, store=store, device=device if mode == "store" else None,
                      accept_scaled=scale is not None and scale < 1 if measured else accept_scaled,
                      scale=scale if measured else None, measure_on=measure_on if measured else None,
                      calibrated=not uncalibrated, cluster_label=cluster_label)


@dataclass(frozen=True, kw_only=True)
class Environment:
    """The system a projection runs on after the cluster record (``Session.environment``), and what to say."""

    system: SystemSpec
    applied: ClusterApplied | None = None
    notes: tuple[str, ...] = ()
    basis: tuple[Any, ...] | None = None
    """``basis_key`` of the environment: the model records fitted on it are the ones applied on top."""

    def mark(self, projection: Projection) -> Projection:
        """``projection`` naming the environment it ran on (notes, ``cluster_calibration``)."""
        from dataclasses import replace

        notes = list(self.notes)
        a = self.applied
        if a is not None:
            from primus_ext.calibration.environment import FACTORS, describe_value

            moved = ", ".join(describe_value(n, a.values[n], projection.system.gpu) + (
                f" (profile {a.profile_values[n]:.4g})" if n in a.profile_values and n != "kernels" else "")
                for n in FACTORS if n in a.values)
            whose = ("the cluster record" if a.origin == "cluster"
                     else "the cluster record the model record was fitted on")
            notes.append(f"cluster environment ({whose}) {a.record}: {moved}; stored {a.date[:10]}"
                         + (f" in {a.store}" if a.store else "") + " (primus-ext calibrate --list to see it, --forget "
                         "--scope cluster to undo it, --uncalibrated to ignore it)")
        if not notes and a is None:
            return projection
        return replace(projection, notes=(*projection.notes, *notes), cluster_calibration=a)


def full_scale_memory(projection: Projection) -> Projection:
    """Activation bytes measured on a down-scaled model are not the target's: the projection with the analytic memory
    model at full size instead (its own memory would rest on the scaled saved bytes)."""
    from dataclasses import replace

    from primus_ext.model.memory import estimate_memory

    memory = estimate_memory(projection.model, projection.execution, projection.system)
    note = "memory: analytic at full size (measured saved-bytes are of the down-scaled layers)"
    return replace(projection, memory=memory, notes=(*projection.notes, note))


def basis_key(record: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    """Identity of a cluster record's environment (profile, date, values), ``None`` for the profile as shipped."""
    if record is None:
        return None
    return (record.get("profile"), record.get("date"),
            tuple(sorted((str(k), float(v)) for k, v in dict(record.get("values", {})).items())))


@dataclass(eq=False)
class Session:
    """One command's projections (module docstring). Cheap to build; opens the store once per target GPU."""

    choice: CostChoice = field(default_factory=CostChoice)
    provider: Any = None
    """A ready cost provider used instead of the store (perf CI's committed store; no stored calibration applies to
    its figures); ``None``: ``choice`` decides."""
    env: Mapping[str, str] | None = None
    """The environment for ``${VAR}`` templates, ``$NNODES`` and ``$PRIMUS_EXT_CLUSTER`` (default ``os.environ``)."""
    gpus: Callable[[], Sequence[str]] | None = None
    """This machine's GPU device names, asked last for the target (default ``hardware.visible.visible_gpus``;
    perf CI passes none: an entry's target is stated, not found on the runner)."""
    _costs: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _records: dict[tuple[str, str], tuple[CalibrationRecord, ...]] = field(default_factory=dict, init=False,
                                                                           repr=False)
    _clusters: dict[str, tuple[ClusterRecord, ...]] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def analytic(cls) -> Session:
        """The roofline, no stored calibration: what ``validate`` judges the method by."""
        return cls(CostChoice(mode="analytic", calibrated=False))

    # --- target -------------------------------------------------------------------------------------------------
    def load(self, path: str | os.PathLike[str], overrides: Sequence[str] = (), *, cluster: str | None = None,
             nodes: int | None = None, config_roots: Sequence[str | os.PathLike[str]] = (), validate: bool = True,
             module: str | None = None, schedule: str | None = None) -> Recipe:
        """The recipe on its target (``recipe.target.resolve_target``: one rule, nothing silent). Raises
        ``RecipeError`` (exit 2) naming ``--cluster`` and the profiles when nothing states the target.
        ``schedule``: a what-if pipeline schedule (``--schedule``), else the comment's or the recipe keys'."""
        from primus_ext.recipe import load_recipe

        return load_recipe(path, list(overrides), cluster=cluster, nodes=nodes, config_roots=config_roots,
                           validate=validate, env=self.env, module=module, gpus=self.gpus, schedule=schedule)

    @staticmethod
    def target_line(recipe: Any) -> str | None:
        """``target: 8 nodes x 8 MI325X (mi325x, from the recipe's # primus-ext: target)``, None when unknown."""
        target = getattr(recipe, "target", None)
        return None if target is None else target.describe(recipe.system, getattr(recipe, "nodes_source", None))

    # --- cost chain ---------------------------------------------------------------------------------------------
    @property
    def store_path(self) -> Path:
        """The timing store this session reads (and ``calibrate`` writes)."""
        from primus_ext.measure.store import default_store_path

        return Path(self.choice.store) if self.choice.store is not None else default_store_path()

    def costs(self, gpu_name: str) -> Costs:
        """The projection's ``costs`` for a target GPU (``None``: the roofline only); memoised per GPU."""
        if gpu_name not in self._costs:
            self._costs[gpu_name] = self._open(gpu_name)
        return self._costs[gpu_name]

    def _open(self, gpu_name: str) -> Costs:
        c = self.choice
        if self.provider is not None:
            return self.provider
        if c.mode == "analytic" or (c.store is None and not self.store_path.exists()):
            return None
        if c.mode == "measured":  # this machine's entries (just measured by the caller)
            from primus_ext.measure.store import TimingStore

            return TimingStore(self.store_path, accept_scaled=c.accept_scaled)
        from primus_ext.measure.store import store_for_target

        return store_for_target(self.store_path, gpu_name, device=c.device, accept_scaled=c.accept_scaled)

    def measure(self, recipe: Any, *, progress: Callable[[int, int, Any], None] | None = None) -> tuple[str, ...]:
        """``measured``: time the recipe's per-rank layer kinds the store lacks on this machine (``bench``'s loop) at
        ``CostChoice.scale`` (``None``: ``measure.scale.default_scale``), which this session then reads; one line per
        kind measured (``kind: ok`` or ``kind: FAILED reason``)."""
        from dataclasses import replace

        from primus_ext.measure.runner import MeasureOptions, measure_many
        from primus_ext.measure.scale import default_scale
        from primus_ext.measure.shims import resolve_device
        from primus_ext.measure.store import TimingStore
        from primus_ext.model.layers import rank_shapes
        from primus_ext.model.lora import trained_in_full

        device = resolve_device(self.choice.measure_on)
        shapes = rank_shapes(recipe.model, recipe.execution).values()
        scale = self.choice.scale if self.choice.scale is not None else default_scale(shapes, device.type)
        with TimingStore(self.choice.store) as store:
            missing = [s for s in map(trained_in_full, shapes) if store.entry(s, scale=scale) is None]
            results = measure_many(missing, scale=scale, device=device, opts=MeasureOptions(reps=5),  # bench: 10
                                   progress=progress)
            for m in results:
                store.record(m)
        self.choice = replace(self.choice, scale=scale, accept_scaled=scale < 1)
        self._costs.clear()
        return tuple(f"{m.target.kind}: ok" if m.ok else f"{m.target.kind}: FAILED {m.error}" for m in results)

    # --- calibration --------------------------------------------------------------------------------------------
    def records(self, model: ModelSpec, system: SystemSpec) -> tuple[CalibrationRecord, ...]:
        """The store's calibration records of ``model`` on ``system``'s GPU type (none when uncalibrated)."""
        if not self.choice.calibrated or self.provider is not None:
            return ()
        from primus_ext.calibration import Workload, load_records

        key = (Workload.model_key(model), system.gpu.name)
        if key not in self._records:
            self._records[key] = tuple(load_records(self.choice.store, model=key[0], gpu=key[1]))
        return self._records[key]

    def cluster_label(self) -> str:
        """The cluster label projections ask for (``CostChoice.cluster_label``, else ``$PRIMUS_EXT_CLUSTER_LABEL``)."""
        if self.choice.cluster_label is not None:
            return self.choice.cluster_label
        env = self.env if self.env is not None else os.environ
        return env.get("PRIMUS_EXT_CLUSTER_LABEL", "")

    def cluster_record(self, system: SystemSpec) -> tuple[ClusterRecord | None, str]:
        """The store's cluster record of ``system``'s profile and this session's label (``None`` when uncalibrated or
        none), and a note when none applies but others exist."""
        if not self.choice.calibrated or self.provider is not None:
            return None, ""
        from primus_ext.calibration.cluster import load_cluster_records, pick_cluster_record

        if system.name not in self._clusters:
            self._clusters[system.name] = tuple(r for r in load_cluster_records(
                self.choice.store, profile=system.name, gpu=system.gpu) if r.gpu == system.gpu.name)
        return pick_cluster_record(self._clusters[system.name], profile=system.name, label=self.cluster_label(),
                                   store=str(self.store_path))

    def environment(self, model: ModelSpec, execution: ExecutionSpec, system: SystemSpec) -> Environment:
        """The system to project on: the cluster record's environment, or the one of the model record that applies
        (module docstring: the order)."""
        cluster, note = self.cluster_record(system)
        notes = [note] if note else []
        records = self.records(model, system)
        found = None
        if records:
            from primus_ext.calibration import find_record
            from primus_ext.calibration.record import costs_of

            costs = self.costs(system.gpu.name)
            kind = "analytic"
            if costs is not None:
                from primus_ext.projection import evaluate

                kind = costs_of(dict(evaluate(model, execution, system, costs).sources))
            found = find_record([r for r in records if r.costs == kind], model, execution, system)
        if found is not None:
            basis = found[0].environment
            if cluster is not None and basis_key(basis) != basis_key(cluster.to_dict()):
                fitted_on = ("the profile as shipped" if basis is None
                             else f"the cluster record of {str(basis.get('date', ''))[:10]}")
                notes.append(
                    f"{cluster.describe()} not applied: the model record of {found[0].workload.label} takes "
                    f"precedence, on the environment it was fitted on ({fitted_on}); calibrate the model again to fit "
                    "its record over the current cluster record")
            if basis is None:
                return Environment(system=system, notes=tuple(notes))
            from primus_ext.calibration.cluster import ClusterRecord

            current = cluster is not None and basis_key(basis) == basis_key(cluster.to_dict())
            return self._on(system, ClusterRecord.from_dict(basis), "cluster" if current else "model record", notes)
        if cluster is None:
            return Environment(system=system, notes=tuple(notes))
        return self._on(system, cluster, "cluster", notes)

    def _on(self, system: SystemSpec, record: ClusterRecord, origin: str, notes: list[str]) -> Environment:
        from primus_ext.calibration.environment import apply_environment
        from primus_ext.projection.result import ClusterApplied

        applied = ClusterApplied(record=record.describe(), values=dict(record.values),
                                 profile_values=dict(record.profile_values), origin=origin,
                                 logs=tuple(r.log for r in record.runs), date=record.date, store=str(self.store_path))
        return Environment(system=apply_environment(system, record.values), applied=applied, notes=tuple(notes),
                           basis=basis_key(record.to_dict()))

    def _basis_of(self, projection: Projection) -> tuple[Any, ...] | None:
        a = getattr(projection, "cluster_calibration", None)
        if a is None:
            return None
        return (projection.system.name, a.date, tuple(sorted((k, float(v)) for k, v in a.values.items())))

    def calibrate(self, projection: Projection) -> Projection:
        """``projection`` corrected by the stored record that applies to it (exact, else nearby), or as it is: the
        model records fitted on the environment the projection ran on."""
        if not self.choice.calibrated or self.provider is not None:
            return projection
        from primus_ext.calibration import apply_stored

        records = self.records(projection.model, projection.system)
        if records and any(r.environment is not None for r in records):
            basis = self._basis_of(projection)
            records = tuple(r for r in records if basis_key(r.environment) == basis)
        if not records:
            return projection
        return apply_stored(projection, str(self.store_path), records=records)

    def memory_factor(self, recipe: Any) -> Callable[[ExecutionSpec], float] | None:
        """The tuner pre-filter's measured / projected peak factor per execution from the oracle's records (or None)."""
        records = self._fitted(recipe)[1]
        if not records:
            return None
        from primus_ext.calibration import find_record

        def factor(execution: ExecutionSpec) -> float:
            found = find_record(records, recipe.model, execution, recipe.system)
            return (found[0].correction.memory_factor or 1.0) if found else 1.0

        return factor

    # --- projections --------------------------------------------------------------------------------------------
    def project_on_cluster(self, recipe: Any, *, band: bool = True) -> Projection:
        """The recipe's projection on its environment (``environment``), before a per-model record corrects it."""
        env = self.environment(recipe.model, recipe.execution, recipe.system)
        return env.mark(self._project(recipe, env.system, band))

    def project(self, recipe: Any, *, band: bool = True, calibrated: bool = True) -> Projection:
        """The recipe's projection through this session's cost chain, then its stored calibration (cluster
        environment, then the per-model record); ``calibrated=False``: neither. Its ``memory`` is the verdict every
        command prints (``project --memory-only`` too)."""
        if calibrated:
            return self.calibrate(self.project_on_cluster(recipe, band=band))
        return self._project(recipe, recipe.system, band)

    def _project(self, recipe: Any, system: SystemSpec, band: bool) -> Projection:
        from primus_ext.projection import project

        p = project(recipe.model, recipe.execution, system, self.costs(recipe.system.gpu.name), band=band)
        scale = self.choice.scale
        return p if scale is None or scale >= 1 else full_scale_memory(p)

    def evaluate(self, model: ModelSpec, execution: ExecutionSpec, system: SystemSpec) -> Projection:
        """The fast path (``projection.evaluate``: no timeline, memory or band) through this session's cost chain,
        then its stored calibration: what ``validate`` projects its rows with (``Session.analytic()``: none)."""
        from primus_ext.projection import evaluate

        env = self.environment(model, execution, system)
        return self.calibrate(env.mark(evaluate(model, execution, env.system, self.costs(system.gpu.name))))

    def oracle(self, recipe: Any) -> ProjectionOracle:
        """The tuner's oracle over the recipe's model and target: this session's costs, the environment of the
        recipe's own configuration, and the calibration records fitted on it."""
        from primus_ext.tune.oracle import projection_oracle

        env, records = self._fitted(recipe)
        return projection_oracle(recipe.model, env.system, self.costs(recipe.system.gpu.name), records)

    def _fitted(self, recipe: Any) -> tuple[Environment, tuple[CalibrationRecord, ...]]:
        """The environment of the recipe's own configuration and the model records fitted on it."""
        env = self.environment(recipe.model, recipe.execution, recipe.system)
        records = self.records(recipe.model, recipe.system)
        if any(r.environment is not None for r in records):
            records = tuple(r for r in records if basis_key(r.environment) == env.basis)
        return env, records

    def calibration_line(self, recipe: Any) -> str | None:
        """One sentence naming the records that may change this recipe's scores (the tuner prints it)."""
        env = self.environment(recipe.model, recipe.execution, recipe.system)
        records = self.records(recipe.model, recipe.system)
        lines = [*env.notes]
        if env.applied is not None:
            lines.append(f"scores on the cluster environment of {env.applied.record} ("
                         + ", ".join(f"{k} {v:.4g}" for k, v in env.applied.values.items()) + ")")
        if records:
            lines.append(f"scores calibrated from real runs: "
                         f"{'; '.join(f'{r.describe()}, {r.source()}' for r in records)} in {self.store_path} (exact "
                         "for its own workload, nearby with a wider band for the rest; --uncalibrated to ignore, "
                         "primus-ext calibrate --list / --forget to see or undo)")
        return "\n".join(lines) or None

