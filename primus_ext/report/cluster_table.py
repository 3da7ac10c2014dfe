"""The ``calibrate --scope cluster`` report: the fitted environment, what it holds, each log before and after."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from primus_ext.calibration.cluster import ClusterRecord
    from primus_ext.specs import GPUSpec


def applies_to(record: ClusterRecord, store: str | None = None) -> str:
    """What "the same cluster" is: profile, label and store, any model and node count."""
    label = (f"--cluster-label {record.label} (or $PRIMUS_EXT_CLUSTER_LABEL={record.label})" if record.label
             else "no --cluster-label")
    return (f"every model projected on profile {record.profile} ({record.gpu}) with {label}"
            + (f" from {store}" if store else "") + ", at any node count: project, compare, tune and train "
            "--projection-only (never validate; --uncalibrated ignores it)")


def format_cluster(record: ClusterRecord, gpu: GPUSpec, *, stored: str | None, refused: str | None) -> str:
    from primus_ext.calibration.environment import FACTORS, describe_value

    lines = [f"cluster record {record.where()} ({record.gpu}): {record.rule}"]
    for name in FACTORS:
        if name in record.values:
            se = record.standard_errors.get(name)
            error = "" if se is None else (f" +-{se:.1%}" if name != "overlap" else f" +-{se:.2f}")
            was = record.profile_values.get(name)
            lines.append(f"  fitted  {describe_value(name, record.values[name], gpu)}{error} (one standard error)"
                         + (f"; profile {describe_value(name, was, gpu)}" if was is not None and name != "kernels"
                            else ""))
    for name, why in record.held.items():
        lines.append(f"  held    {describe_value(name, _profile(name, gpu), gpu)} (the profile's): {why}")
    for r in record.runs:
        lines.append(f"  {Path(r.log).name} ({r.model}): projected step {r.before_s * 1e3:,.1f} ms -> "
                     f"{r.after_s * 1e3:,.1f} ms, measured {r.measured_s * 1e3:,.1f} ms "
                     f"(projected tok/s {_pct(r.measured_s / r.before_s - 1)} -> {_pct(r.measured_s / r.after_s - 1)} "
                     "of the logged)")
    lines += [f"  note: {n}" for n in record.notes]
    if stored:
        lines.append(f"stored in {stored}: applies to {applies_to(record, stored)}")
    elif refused is None:
        lines.append(f"--dry-run: nothing stored (stored, it would apply to {applies_to(record)})")
    return "\n".join(lines)


def _pct(x: float) -> str:
    return f"{round(x, 4) + 0.0:+.1%}"  # no "-0.0 %" for a residual of -1e-12


def _profile(name: str, gpu: GPUSpec) -> float:
    from primus_ext.calibration.environment import profile_value

    return profile_value(name, gpu)


def _gpu(profile: str) -> GPUSpec | None:
    """The profile's GPU (for GB/s in the listing), ``None`` when the profile is no longer there."""
    from primus_ext.errors import RecipeError
    from primus_ext.hardware import load_gpu

    try:
        return load_gpu(profile)
    except RecipeError:
        return None


def list_lines(records: list[ClusterRecord], store: str) -> list[str]:
    """``calibrate --list``'s block of cluster records."""
    if not records:
        return []
    lines = [f"{len(records)} cluster record(s) in {store}; each sets the links / overlap / kernels of every model "
             "projected on its profile and label:"]
    for r in records:
        lines.append(f"{r.describe()}\n    {r.factors_text(_gpu(r.profile))}; {r.costs} layer costs; {r.evidence()}"
                     f"\n    from {', '.join(x.log for x in r.runs) or 'unnamed logs'} ({r.date or 'undated'})")
        lines += [f"    note: {n}" for n in r.notes]
    lines.append("undo: primus-ext calibrate --forget --scope cluster [--cluster PROFILE] [--cluster-label NAME]")
    return lines
