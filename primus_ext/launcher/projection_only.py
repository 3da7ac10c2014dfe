"""``--projection-only``: measure what the store lacks, project, write the reports, decide the exit code.

    from primus_ext.launcher.projection_only import CostPlan, projection_only
    outcome = projection_only(recipe, out_dir=Path("output/amd/root/exp"), costs=CostPlan(mode="analytic"))
    outcome.exit_code        # 0 fits, 3 projected out of memory (illegal recipes raise RecipeError: 2)

Shared by ``primus-ext train --projection-only`` and the upstream-launcher hook (``hook.py``).
Where the files go: the experiment's directory as Primus composes it,
``{workspace}/{work_group}/{user_name}/{exp_name}`` (``experiment_dir``); a flat Megatron YAML
without ``workspace`` writes to ``./output/<file stem>``.

Cost modes: ``analytic`` (roofline only), ``store`` (timing-store entries at full scale, roofline
for the rest), ``measured`` (first measure on this device, at ``scale``, what the store lacks; a
scale < 1 projects with the scaled entries standing in for their targets, and the sources say so).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

EXIT_OK = 0
EXIT_ILLEGAL = 2
"""Same code as every ``PrimusExtError`` (the CLI's domain errors)."""
EXIT_OOM = 3
"""Projected peak memory above the GPU's HBM on some pipeline stage."""

CostMode = Literal["analytic", "store", "measured"]


@dataclass(frozen=True, kw_only=True)
class CostPlan:
    """Where layer costs come from (see the module docstring)."""

    mode: CostMode = "store"
    store: str | None = None
    """SQLite timing store; ``None`` = the default store ($PRIMUS_EXT_CACHE/timings.sqlite)."""
    scale: float = 1.0
    device: str | None = None
    """Device to measure on (``None`` = cuda when present)."""
    store_device: str | None = None
    """Whose store entries to read in ``store`` mode (the store's device name; ``None`` = this machine)."""
    reps: int = 5


@dataclass(frozen=True, kw_only=True)
class ProjectionOutcome:
    projection: Any
    """``primus_ext.projection.Projection``."""
    exit_code: int
    reasons: tuple[str, ...] = ()
    """Why the exit code is not 0 (the OOM stages with their peaks)."""
    files: Mapping[str, Path] = field(default_factory=dict)
    """``json`` / ``html`` / ``png`` -> path written."""
    measured: tuple[str, ...] = ()
    """Layer kinds measured during this call (``kind: ok`` or ``kind: FAILED reason``)."""


def experiment_dir(recipe_path: str | Path, *, env: Mapping[str, str] | None = None) -> Path:
    """Primus's experiment directory of a recipe: ``workspace/work_group/user_name/exp_name``.

    Templates (``${PRIMUS_WORKSPACE:./output}``) are expanded as Primus does. Relative workspaces
    are relative to the current directory (where the launcher runs)."""
    from primus_ext.recipe.presets import load_preset

    path = Path(recipe_path)
    problems: list[Any] = []
    warnings: list[str] = []
    values = dict(load_preset(path, os.environ if env is None else env, problems, warnings).values)
    workspace = values.get("workspace")
    if not isinstance(workspace, str) or not workspace:
        return Path("output") / path.stem
    from primus_ext.errors import PrimusExtError
    from primus_ext.recipe.secrets import folder_name_problem

    refused = [why for key in ("workspace", "work_group", "user_name", "exp_name")
               if (why := folder_name_problem(key, values.get(key), path=key == "workspace"))]
    if refused:  # a value from the environment names a folder only if it is a plain name (recipe.secrets)
        raise PrimusExtError("; ".join(refused) + "; set the variable to a plain name, or pass --workspace DIR")
    parts = [str(values[k]) for k in ("work_group", "user_name") if isinstance(values.get(k), str | int)]
    exp = values.get("exp_name")
    return Path(workspace, *parts, str(exp) if exp else path.stem)


def _missing_shapes(recipe: Any, store: Any, scale: float) -> list[Any]:
    from primus_ext.model.layers import rank_shapes
    from primus_ext.model.lora import trained_in_full

    shapes = (trained_in_full(s) for s in rank_shapes(recipe.model, recipe.execution).values())
    return [s for s in shapes if store.entry(s, scale=scale) is None]


def measure_missing(recipe: Any, plan: CostPlan, *,
                    progress: Callable[[int, int, Any], None] | None = None) -> tuple[str, ...]:
    """Measure the recipe's per-rank layer kinds the store lacks at ``plan.scale`` (``bench``'s loop)."""
    from primus_ext.measure.runner import MeasureOptions, measure_many
    from primus_ext.measure.shims import resolve_device
    from primus_ext.measure.store import TimingStore

    device = resolve_device(plan.device)
    with TimingStore(plan.store) as store:
        missing = _missing_shapes(recipe, store, plan.scale)
        results = measure_many(missing, scale=plan.scale, device=device, opts=MeasureOptions(reps=plan.reps),
                               progress=progress)
        for m in results:
            store.record(m)
    return tuple(f"{m.target.kind}: ok" if m.ok else f"{m.target.kind}: FAILED {m.error}" for m in results)


def session_of(plan: CostPlan, *, calibrated: bool = True) -> Any:
    """The projection session (``primus_ext.session``) of a cost plan: ``project``'s chain, with the store entries of
    the target GPU (or ``plan.store_device``'s) and, below scale 1, the scaled entries standing in for their targets."""
    from primus_ext.session import CostChoice, Session

    return Session(CostChoice(mode=plan.mode, store=plan.store, device=plan.store_device if plan.mode == "store"
                              else None, accept_scaled=plan.scale < 1, calibrated=calibrated))


def cost_provider(plan: CostPlan, gpu_name: str | None = None) -> Any:
    """The projection's ``costs`` argument for a plan (``None`` = analytic roofline only).

    ``store`` mode reads the entries measured on the target GPU (``gpu_name``, the profile name) unless
    ``plan.store_device`` names a device; ``measured`` mode reads this machine's fresh measurements."""
    if plan.mode == "analytic":
        return None
    from primus_ext.measure.store import TimingStore, default_store_path, store_for_target

    path = plan.store or default_store_path()
    if plan.mode == "store" and not Path(path).exists():
        return None
    if plan.mode == "store" and plan.store_device is None and gpu_name:
        return store_for_target(path, gpu_name, accept_scaled=plan.scale < 1)
    device = plan.store_device if plan.mode == "store" else None  # measured: this machine's entries
    return TimingStore(path, device=device, accept_scaled=plan.scale < 1)


def oom_reasons(projection: Any) -> tuple[str, ...]:
    """One line per pipeline stage whose projected peak exceeds the capacity (empty when it fits, or exceeds it by
    no more than the model's demonstrated error: ``margin_note`` says so)."""
    from primus_ext.model.memory import margin_verdict

    memory = projection.memory
    if memory is None or memory.fits or margin_verdict(memory.peak_bytes, memory.capacity_bytes) != "out of memory":
        return ()
    gib = 1024**3
    cap = memory.capacity_bytes / gib
    over = [s for s in memory.stages if s.total_bytes > memory.capacity_bytes] or [memory.peak_stage]
    return tuple(f"pipeline stage {s.rank}: projected peak {s.total_bytes / gib:.1f} GiB > {cap:.1f} GiB HBM "
                 f"(params {s.params_bytes / gib:.1f}, grads {s.grads_bytes / gib:.1f}, optimizer "
                 f"{s.optimizer_bytes / gib:.1f}, activations {s.activations_bytes / gib:.1f} GiB)" for s in over)


def margin_note(memory: Any) -> str | None:
    """A sentence when a memory estimate fits the HBM but not the default margin (``model.memory.DEFAULT_MARGIN``),
    or exceeds it by no more than the model's demonstrated error (``MEMORY_ERROR``): verdicts of their own, not out of
    memory (exit 0)."""
    from primus_ext.model.memory import DEFAULT_MARGIN, MEMORY_ERROR, margin_verdict

    verdict = None if memory is None else margin_verdict(memory.peak_bytes, memory.capacity_bytes)
    gib = 1024**3
    if verdict == "within the model's error":
        over = memory.peak_bytes / memory.capacity_bytes - 1.0
        return (f"within the model's error: projected peak {memory.peak_bytes / gib:.1f} GiB is {over:.1%} over the "
                f"{memory.capacity_bytes / gib:.1f} GiB per GPU, inside the {MEMORY_ERROR:.1%} the memory model has "
                "been off on runs that ran (a real run's max reserved; benchmarks/RESULTS.md, memory error per "
                "component): it may run; measure it (primus-ext calibrate) before relying on it")
    if verdict != "over the margin":
        return None
    return (f"fits, but inside the {DEFAULT_MARGIN:.0%} memory margin: projected peak {memory.peak_bytes / gib:.1f} of "
            f"{memory.capacity_bytes / gib:.1f} GiB per GPU ({(memory.capacity_bytes - memory.peak_bytes) / gib:.1f} "
            "GiB free); what the memory model cannot see may not fit there")


REPORT_PHASES = ("projecting", "writing projection.json", "writing the HTML report", "drawing the timeline PNG")
"""What ``projection_only`` tells its ``phase`` callback, in order (the CLI's progress line)."""


def write_reports(projection: Any, out_dir: Path, *, recipe: Any = None, overrides: Sequence[str] = (),
                  html_path: Path | None = None, extra: Mapping[str, str] | None = None,
                  verify: Mapping[str, Any] | None = None, baseline: tuple[str, Any] | None = None,
                  phase: Callable[[str], None] | None = None) -> dict[str, Path]:
    """projection.json, projection.html and projection_timeline.png into ``out_dir``; ``baseline`` (label,
    projection) is shown beside the projection in the HTML (the recipe as written, after auto-tune); ``phase``:
    told each of ``REPORT_PHASES[1:]`` as it starts."""
    say = phase or (lambda _phase: None)
    from primus_ext.files import write_output
    from primus_ext.report.html import ReportInputs, render_html
    from primus_ext.report.timeline_png import timeline_png
    from primus_ext.results import dumps
    from primus_ext.results.projection import projection_document, verify_fields

    out_dir.mkdir(parents=True, exist_ok=True)
    say(REPORT_PHASES[1])
    doc = projection_document(projection, recipe=recipe, overrides=list(overrides),
                              **({"verify": verify_fields(verify)} if verify else {}))
    files = {"json": out_dir / "projection.json", "html": html_path or out_dir / "projection.html",
             "png": out_dir / "projection_timeline.png"}
    write_output(files["json"], dumps(doc) + "\n")
    inputs = ReportInputs(recipe=str(doc["recipe"] or ""), overrides=tuple(overrides),
                          cluster=projection.system.name, warnings=tuple(getattr(recipe, "warnings", ()) or ()),
                          extra=dict(extra or {}))
    files["html"].parent.mkdir(parents=True, exist_ok=True)
    say(REPORT_PHASES[2])
    write_output(files["html"], render_html(projection, inputs=inputs, verify=verify, baseline=baseline),
                 label="--html")
    say(REPORT_PHASES[3])
    write_output(files["png"], timeline_png(projection))
    return files


def _full_scale_memory(projection: Any) -> Any:
    """Activation bytes measured on a down-scaled model are not the target's: gate on the analytic
    memory model at full size instead (the projection's own memory would use the scaled saved-bytes)."""
    from dataclasses import replace

    from primus_ext.model.memory import estimate_memory

    memory = estimate_memory(projection.model, projection.execution, projection.system)
    note = "memory: analytic at full size (measured saved-bytes are of the down-scaled layers)"
    return replace(projection, memory=memory, notes=(*projection.notes, note))


def projection_only(recipe: Any, *, out_dir: Path | None, costs: CostPlan | None = None,
                    overrides: Sequence[str] = (), html_path: Path | None = None,
                    progress: Callable[[int, int, Any], None] | None = None,
                    baseline: Any = None, calibrated: bool = True,
                    phase: Callable[[str], None] | None = None) -> ProjectionOutcome:
    """Project a loaded (hence legal) recipe and write its reports; exit code 0 or 3 (see module). ``baseline``: a
    loaded recipe (the one auto-tune started from) projected with the same costs and shown beside it in the HTML.
    ``calibrated``: apply the store's calibration record from real runs of this workload (or a nearby one).
    ``progress``: the layer measurement's hook; ``phase``: told each of ``REPORT_PHASES`` as it starts."""
    plan = costs or CostPlan()
    session = session_of(plan, calibrated=calibrated)
    measured: tuple[str, ...] = ()
    if plan.mode == "measured":
        measured = measure_missing(recipe, plan, progress=progress)
    if phase is not None:
        phase(REPORT_PHASES[0])
    projection = session.project_on_cluster(recipe)  # the cluster record's environment; the model record below
    if plan.mode == "measured" and plan.scale < 1:
        projection = _full_scale_memory(projection)
    projection = session.calibrate(projection)
    reasons = oom_reasons(projection)
    files: dict[str, Path] = {}
    if out_dir is not None:
        extra = {"costs": plan.mode + (f" (scale {plan.scale:g})" if plan.scale < 1 else "")}
        if plan.mode != "analytic":
            extra["store"] = str(plan.store or "default store")
        beside = None
        if baseline is not None:
            beside = ("the recipe as written", session.project(baseline, calibrated=False))
        files = write_reports(projection, out_dir, recipe=recipe, overrides=overrides, html_path=html_path,
                              extra=extra, baseline=beside, phase=phase)
    return ProjectionOutcome(projection=projection, exit_code=EXIT_OOM if reasons else EXIT_OK, reasons=reasons,
                             files=files, measured=measured)
