"""One projection session per command: the target, the cost chain and the calibration, decided in one place.

    session = Session(CostChoice(mode="store", store=None))       # what --compute / --store / --uncalibrated asked
    recipe = session.load("recipes/llama3.1_8B-pretrain.yaml", ["micro_batch_size=2"])
    projection = session.project(recipe)       # the cost chain, then the stored calibration that applies
    oracle = session.oracle(recipe)            # the tuner's: the same chain and records, per execution
    print(session.target_line(recipe))         # target: 8 nodes x 8 MI325X (mi325x, from ...)

``project``, ``compare``, ``tune``, ``train --projection-only``, ``calibrate``, ``ci`` and the launcher gates ask a
session; the same recipe and store give the same figure whichever command prints it.

- **Target** (``load``): the one rule of ``recipe.target.resolve_target`` (``--cluster``, the recipe's
  ``# primus-ext:`` comment, ``$PRIMUS_EXT_CLUSTER``, a Primus ``configs/<GPU>/`` folder, this machine's GPUs;
  nothing stating it exits 2). ``Recipe.target`` says where it came from; ``target_line`` prints it.
- **Cost chain** (``costs``): ``analytic`` (the roofline), ``store`` (the timing store ``store``, else the default
  one when it exists: the entries measured on the target GPU, or on ``device``; the roofline for what it lacks),
  ``measured`` (this machine's entries, measured first by the caller: ``launcher.projection_only.measure_missing``).
  ``provider`` hands a ready cost provider instead (perf CI's committed store).
- **Calibration** (``records``, ``calibrate``): the store's records of real runs (``primus_ext.calibration``) of the
  recipe's model on its GPU type, applied exactly to their workload and with a wider band nearby, each naming the
  record (logs, date, factor) in the projection's notes and JSON; ``calibrated=False`` (``--uncalibrated``, perf CI)
  ignores them.

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
    from primus_ext.projection.evaluate import Costs
    from primus_ext.projection.result import Projection
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
        return None if target is None else target.describe(recipe.system)

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

    def calibrate(self, projection: Projection) -> Projection:
        """``projection`` corrected by the stored record that applies to it (exact, else nearby), or as it is."""
        if not self.choice.calibrated or self.provider is not None:
            return projection
        from primus_ext.calibration import apply_stored

        records = self.records(projection.model, projection.system)
        if not records:
            return projection
        return apply_stored(projection, str(self.store_path), records=records)

    def memory_factor(self, recipe: Any) -> Callable[[ExecutionSpec], float] | None:
        """The tuner pre-filter's measured / projected peak factor per execution (``None`` without records)."""
        records = self.records(recipe.model, recipe.system)
        if not records:
            return None
        from primus_ext.calibration import find_record

        def factor(execution: ExecutionSpec) -> float:
            found = find_record(records, recipe.model, execution, recipe.system)
            return (found[0].correction.memory_factor or 1.0) if found else 1.0

        return factor

    # --- projections --------------------------------------------------------------------------------------------
    def project(self, recipe: Any, *, band: bool = True, calibrated: bool = True) -> Projection:
        """The recipe's projection through this session's cost chain, then its stored calibration."""
        from primus_ext.projection import project

        projection = project(recipe.model, recipe.execution, recipe.system, self.costs(recipe.system.gpu.name),
                             band=band)
        return self.calibrate(projection) if calibrated else projection

    def evaluate(self, model: ModelSpec, execution: ExecutionSpec, system: SystemSpec) -> Projection:
        """The fast path (``projection.evaluate``: no timeline, memory or band) through this session's cost chain,
        then its stored calibration: what ``validate`` projects its rows with (``Session.analytic()``)."""
        from primus_ext.projection import evaluate

        return self.calibrate(evaluate(model, execution, system, self.costs(system.gpu.name)))

    def oracle(self, recipe: Any) -> ProjectionOracle:
        """The tuner's oracle over the recipe's model and target: this session's costs and calibration records."""
        from primus_ext.tune.oracle import projection_oracle

        return projection_oracle(recipe.model, recipe.system, self.costs(recipe.system.gpu.name),
                                 self.records(recipe.model, recipe.system))

    def calibration_line(self, recipe: Any) -> str | None:
        """One sentence naming the records that may change this recipe's scores (the tuner prints it)."""
        records = self.records(recipe.model, recipe.system)
        if not records:
            return None
        return (f"scores calibrated from real runs: {'; '.join(f'{r.describe()}, {r.source()}' for r in records)} "
                f"in {self.store_path} (exact for its own workload, nearby with a wider band for the rest; "
                "--uncalibrated to ignore, primus-ext calibrate --list / --forget to see or undo)")
