"""``--projection-only``: measure what the store lacks, project, write the reports, decide the exit code.

    from primus_ext.launcher.projection_only import projection_only
    from primus_ext.session import Session, cost_choice
    session = Session(cost_choice(compute="analytic"))
    outcome = projection_only(recipe, out_dir=Path("output/amd/root/exp"), session=session)
    outcome.exit_code        # 0 fits, 4 within the model's error, 3 out of memory (illegal: RecipeError, 2)
    outcome.note             # the sentence behind a 4 (or the margin's warning), for standard error

Shared by ``primus-ext train --projection-only`` and the upstream-launcher hooks (``hook.py``, ``primus_gate.py``),
each of which builds its session from its flags (``session.cost_choice``). Where the files go: the experiment's
directory as Primus composes it, ``{workspace}/{work_group}/{user_name}/{exp_name}`` (``experiment_dir``); a flat
Megatron YAML without ``workspace`` writes to ``./output/<file stem>``. The exit code is the memory gate's
(``model.memory.gate``: ``strict`` makes "over the margin" exit 4 too).

The figures are the session's (``primus_ext.session``: the cost chain, the cluster environment, the calibration
record, the memory verdict), as ``project`` prints them; ``measured`` costs first measure on this device, at the
choice's scale, what the store lacks (``Session.measure``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from primus_ext.session import Session

from primus_ext.model.memory.gate import EXIT_FITS as EXIT_OK
from primus_ext.model.memory.gate import EXIT_ILLEGAL, EXIT_WITHIN_ERROR
from primus_ext.model.memory.gate import EXIT_OUT_OF_MEMORY as EXIT_OOM

__all__ = ["EXIT_ILLEGAL", "EXIT_OK", "EXIT_OOM", "EXIT_WITHIN_ERROR", "ProjectionOutcome", "projection_only"]


@dataclass(frozen=True, kw_only=True)
class ProjectionOutcome:
    projection: Any
    """``primus_ext.projection.Projection``."""
    exit_code: int
    reasons: tuple[str, ...] = ()
    """Why the exit code is 3 (the OOM stages with their peaks)."""
    note: str | None = None
    """``model.memory.gate_note``: why it is 4 (or the margin's warning with 0), with the figures."""
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


def oom_reasons(projection: Any) -> tuple[str, ...]:
    """One line per pipeline stage whose projected peak exceeds the capacity (empty when it fits, or exceeds it by
    no more than the model's demonstrated error: ``gate_note`` says so)."""
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


def projection_only(recipe: Any, *, out_dir: Path | None, session: Session | None = None,
                    overrides: Sequence[str] = (), html_path: Path | None = None,
                    progress: Callable[[int, int, Any], None] | None = None,
                    baseline: Any = None, phase: Callable[[str], None] | None = None,
                    strict: bool = False) -> ProjectionOutcome:
    """Project a loaded (hence legal) recipe through ``session`` (default: the store, calibrated) and write its
    reports; exit code 0, 4 or 3 (``model.memory.gate_exit``; ``strict``: over the margin exits 4). ``baseline``: a
    loaded recipe (the one auto-tune started from) projected with the same costs, uncalibrated, and shown beside it
    in the HTML. ``progress``: the layer measurement's hook;
    ``phase``: told each of ``REPORT_PHASES`` as it starts."""
    from primus_ext.session import Session

    session = session or Session()
    choice = session.choice
    measured: tuple[str, ...] = ()
    if choice.mode == "measured":
        measured = session.measure(recipe, progress=progress)
        choice = session.choice  # its scale decided
    if phase is not None:
        phase(REPORT_PHASES[0])
    projection = session.project(recipe)
    reasons = oom_reasons(projection)
    files: dict[str, Path] = {}
    if out_dir is not None:
        scale = choice.scale if choice.scale is not None else 1.0
        extra = {"costs": choice.mode + (f" (scale {scale:g})" if scale < 1 else "")}
        if choice.mode != "analytic":
            extra["store"] = str(choice.store or "default store")
        beside = None
        if baseline is not None:
            beside = ("the recipe as written", session.project(baseline, calibrated=False))
        files = write_reports(projection, out_dir, recipe=recipe, overrides=overrides, html_path=html_path,
                              extra=extra, baseline=beside, phase=phase)
    from primus_ext.model.memory.gate import gate_exit, gate_note

    return ProjectionOutcome(projection=projection, exit_code=gate_exit(projection.memory, strict=strict),
                             reasons=reasons, note=gate_note(projection.memory, strict=strict), files=files,
                             measured=measured)
